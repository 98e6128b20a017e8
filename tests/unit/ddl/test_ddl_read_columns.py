"""The columns of each base table a FAST plan says its query reads (``workers.ddl.read_columns``): by
name, a superset, every column where a star or a NATURAL JOIN may read any; carried by the plan's
record (old records: every column)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.trees import tpch_columns
from workers.ddl import analyze_query, plan_from_record, plan_record
from workers.ddl.plan import fast_plan_from_record, fast_plan_record

COLUMNS = {
    "o": ("ok", "ck", "status", "note", "s"),
    "l": ("ok", "qty", "price", "Comment"),
    "c": ("ck", "name", "nation"),
}


def read(sql: str) -> dict[str, tuple[str, ...]] | None:
    plan = analyze_query(sql, columns_of=COLUMNS.get).fast_refresh
    assert plan is not None, sql
    return plan.columns_by_table


def test_each_table_lists_the_columns_the_query_names_in_the_table_order() -> None:
    sql = (
        "SELECT c.name, sum(l.price * l.qty) AS total FROM c JOIN o ON c.ck = o.ck "
        "JOIN l ON o.ok = l.ok WHERE o.status = 'F' GROUP BY c.name"
    )
    assert read(sql) == {"c": ("ck", "name"), "l": ("ok", "qty", "price"), "o": ("ok", "ck", "status")}


def test_a_name_is_kept_whatever_table_it_is_named_of_and_any_case() -> None:
    # The output named "comment" is not l's column, but l's column of that name is kept: by name, a
    # superset (never fewer). A string is no name.
    sql = "SELECT o.ok, l.qty, o.NOTE AS comment FROM o JOIN l ON o.ok = l.ok WHERE o.note <> 'price'"
    assert read(sql) == {"l": ("ok", "qty", "Comment"), "o": ("ok", "note")}


def test_count_star_and_exists_select_star_read_no_column_of_their_own() -> None:
    assert read("SELECT count(*) AS n FROM o") == {"o": ()}
    sql = "SELECT o.ok FROM o WHERE EXISTS (SELECT * FROM l WHERE l.ok = o.ok AND l.qty > 1)"
    assert read(sql) == {"l": ("ok", "qty"), "o": ("ok",)}


def test_a_struct_field_keeps_the_struct_column() -> None:
    # ``o.s.f``: a field f of o's struct column s; s is a qualifier's name here, and kept.
    assert read("SELECT o.ok, o.s.f AS f FROM o") == {"o": ("ok", "s")}


@pytest.mark.parametrize(
    "sql",
    [
        "SELECT * FROM o",
        "SELECT o.* FROM o JOIN c ON o.ck = c.ck",
        "SELECT ok, count(*) AS n FROM (SELECT * FROM o) x GROUP BY ok",
        "SELECT ok FROM o NATURAL JOIN l",
    ],
)
def test_a_star_or_a_natural_join_reads_every_column(sql: str) -> None:
    plan = analyze_query(sql, columns_of=COLUMNS.get).fast_refresh
    assert plan is None or plan.read_columns is None


def test_without_the_tables_columns_every_column_is_read() -> None:
    plan = analyze_query("SELECT ok, count(*) AS n FROM o GROUP BY ok").fast_refresh
    assert plan is not None and plan.read_columns is None


def test_the_record_carries_them_and_an_old_record_reads_every_column() -> None:
    info = analyze_query(
        "SELECT ok, sum(qty) AS q FROM l GROUP BY ok ORDER BY q DESC LIMIT 3", columns_of=COLUMNS.get
    )
    assert info.fast_refresh is not None and info.fast_refresh.columns_by_table == {"l": ("ok", "qty")}
    assert plan_from_record(plan_record(info.plan)).fast_refresh == info.fast_refresh
    old = fast_plan_record(info.fast_refresh)
    del old["read_columns"]
    assert fast_plan_from_record(old).read_columns is None


def test_every_tpch_query_reads_fewer_columns_than_its_tables_hold() -> None:
    """The 22 queries as written (``bench/tpch/sql``): each table read by some of its columns, and
    lineitem (16 columns) by at most 7 (Q1's)."""
    sql_dir = Path(__file__).resolve().parents[3] / "bench" / "tpch" / "sql"
    for path in sorted(sql_dir.glob("q*.sql")):
        plan = analyze_query(path.read_text(), columns_of=tpch_columns).fast_refresh
        assert plan is not None and plan.columns_by_table is not None, path.stem
        for table, read_of_it in plan.columns_by_table.items():
            held = tpch_columns(table) or ()
            assert 0 < len(read_of_it) <= len(held), (path.stem, table)
        assert len(plan.columns_by_table.get("lineitem", ())) <= 7, path.stem
