"""The names of the bases' columns a FAST plan says its runs hold (``workers.ddl.read_names``): every
word of the query and of the SQL its operator tree runs, a superset of the columns it reads; None
where a star or a NATURAL JOIN may read any column. Carried by the plan's record (an old record:
every column)."""

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


def held(sql: str, table: str) -> list[str] | None:
    """``table``'s columns a run of ``sql``'s plan holds (None: every column)."""
    plan = analyze_query(sql, columns_of=COLUMNS.get).fast_refresh
    assert plan is not None, sql
    if plan.read_names is None:
        return None
    return [c for c in COLUMNS[table] if c.lower() in plan.read_names]


def test_each_table_is_held_with_the_columns_the_query_names() -> None:
    sql = (
        "SELECT c.name, sum(l.price * l.qty) AS total FROM c JOIN o ON c.ck = o.ck "
        "JOIN l ON o.ok = l.ok WHERE o.status = 'F' GROUP BY c.name"
    )
    assert held(sql, "c") == ["ck", "name"]
    assert held(sql, "l") == ["ok", "qty", "price"]
    assert held(sql, "o") == ["ok", "ck", "status"]


def test_a_name_is_kept_whatever_table_it_is_named_of_and_any_case_but_a_string_is_none() -> None:
    # The output named "comment" is no column of l, but l's column of that name is kept: by name, a
    # superset (never fewer; and a column l gains later is kept too, as Spark would resolve it).
    sql = "SELECT o.ok, l.qty, o.NOTE AS comment FROM o JOIN l ON o.ok = l.ok WHERE o.note <> 'price'"
    assert held(sql, "l") == ["ok", "qty", "Comment"]
    assert held(sql, "o") == ["ok", "note"]


def test_a_keyword_that_is_a_column_where_the_table_has_one_is_kept() -> None:
    # Spark reads session_user as o's column when o has one, as the function otherwise.
    plan = analyze_query("SELECT ok, session_user AS su FROM o", columns_of=COLUMNS.get).fast_refresh
    assert plan is not None and plan.read_names is not None and "session_user" in plan.read_names


def test_count_star_and_exists_select_star_read_no_column_of_their_own() -> None:
    assert held("SELECT count(*) AS n FROM o", "o") == []
    sql = "SELECT o.ok FROM o WHERE EXISTS (SELECT * FROM l WHERE l.ok = o.ok AND l.qty > 1)"
    assert held(sql, "l") == ["ok", "qty"]
    assert held(sql, "o") == ["ok"]


def test_a_struct_field_keeps_the_struct_column() -> None:
    assert held("SELECT o.ok, o.s.f AS f FROM o", "o") == ["ok", "s"]


@pytest.mark.parametrize(
    "sql",
    [
        "SELECT * FROM o",
        "SELECT o.* FROM o JOIN c ON o.ck = c.ck",
        "SELECT ok, count(*) AS n FROM (SELECT * FROM o) x GROUP BY ok",
        "SELECT ok FROM o NATURAL JOIN l",
    ],
)
def test_a_star_or_a_natural_join_holds_every_column(sql: str) -> None:
    plan = analyze_query(sql, columns_of=COLUMNS.get).fast_refresh
    assert plan is None or plan.read_names is None


def test_without_the_tables_columns_every_column_is_held() -> None:
    plan = analyze_query("SELECT ok, count(*) AS n FROM o GROUP BY ok").fast_refresh
    assert plan is not None and plan.read_names is None


def test_only_words_are_names() -> None:
    sql = "SELECT o.ok, `sum(x)`, 2 * o.ck AS two FROM o WHERE o.note <> 'status' AND o.ck > 10"
    plan = analyze_query(sql, columns_of=COLUMNS.get).fast_refresh
    assert plan is not None and plan.read_names is not None
    assert {"ok", "ck", "note", "two", "o", "sum(x)", "select"} <= set(plan.read_names)
    assert not {"status", "2", "10", ",", "*", "<>"} & set(plan.read_names)


def test_the_record_carries_them_and_an_old_record_holds_every_column() -> None:
    sql = "SELECT ok, sum(qty) AS q FROM l GROUP BY ok ORDER BY q DESC LIMIT 3"
    info = analyze_query(sql, columns_of=COLUMNS.get)
    assert info.fast_refresh is not None and info.fast_refresh.read_names is not None
    assert plan_from_record(plan_record(info.plan)).fast_refresh == info.fast_refresh
    old = fast_plan_record(info.fast_refresh)
    del old["read_names"]
    assert fast_plan_from_record(old).read_names is None


def test_every_tpch_query_holds_fewer_columns_than_its_tables_have() -> None:
    """The 22 queries as written (``bench/tpch/sql``): lineitem (16 columns) held with at most 7 (Q1's),
    and no table with all of its columns but supplier in Q2 (which selects all but one, and its key)."""
    sql_dir = Path(__file__).resolve().parents[3] / "bench" / "tpch" / "sql"
    for path in sorted(sql_dir.glob("q*.sql")):
        plan = analyze_query(path.read_text(), columns_of=tpch_columns).fast_refresh
        assert plan is not None and plan.read_names is not None, path.stem
        for table in plan.base_tables:
            columns = tpch_columns(table) or ()
            kept = [c for c in columns if c in plan.read_names]
            assert 0 < len(kept) <= (7 if table == "lineitem" else len(columns)), (path.stem, table)
            assert len(kept) < len(columns) or (path.stem, table) == ("q02", "supplier"), (path.stem, table)
