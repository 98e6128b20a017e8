"""FAST planning of SQL as Spark reads it (issue 28, part B, step 1): a join's unqualified columns
resolved against its tables' columns (``workers.ddl.resolve``), comma joins whose equalities are in
WHERE, ORDER BY accepted and not stored, and refusals that point at the construct they name."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from workers.coordinator.handlers import Context, handle_ddl
from workers.ddl import AggregateItem, analyze_query, parse_statement, plan_from_record, plan_record
from workers.ddl.errors import DdlSyntaxError
from workers.ddl.plan import JoinKey, JoinTable, derived_column
from workers.records import Record

# TPC-H's columns, as the coordinator reads them from the Delta logs.
COLUMNS = {
    "customer": ("c_custkey", "c_name", "c_mktsegment", "c_nationkey"),
    "orders": ("o_orderkey", "o_custkey", "o_orderdate", "o_shippriority", "o_totalprice"),
    "lineitem": ("l_orderkey", "l_extendedprice", "l_discount", "l_shipdate", "l_quantity"),
    "nation": ("n_nationkey", "n_name", "c_name"),  # c_name: a column two tables have
}


def columns_of(table: str) -> Sequence[str] | None:
    return COLUMNS.get(table)


# Q3 of TPC-H as written, but for its aggregate's argument (a plain column here: the resolution alone).
Q3 = (
    "SELECT l_orderkey, o_orderdate, o_shippriority, SUM(l_extendedprice) AS revenue "
    "FROM customer, orders, lineitem "
    "WHERE c_mktsegment = 'BUILDING' AND c_custkey = o_custkey AND l_orderkey = o_orderkey "
    "AND o_orderdate < date '1995-03-15' AND l_shipdate > date '1995-03-15' "
    "GROUP BY l_orderkey, o_orderdate, o_shippriority ORDER BY revenue DESC, o_orderdate"
)


def test_a_comma_join_with_unqualified_columns_is_a_join_aggregate_keyed_by_its_where() -> None:
    info = analyze_query(Q3, columns_of=columns_of)
    plan = info.fast_refresh
    assert plan is not None, info.fast_reason
    assert plan.kind == "join_aggregate"
    assert plan.tables == tuple(JoinTable(t, t) for t in ("customer", "orders", "lineitem"))
    assert plan.join_keys == (
        JoinKey("customer", "c_custkey", "orders", "o_custkey"),
        JoinKey("lineitem", "l_orderkey", "orders", "o_orderkey"),
    )
    # The keys and aggregate inputs carry their tables; the job runs the user's own FROM … WHERE text,
    # which ends before GROUP BY (ORDER BY is not stored: it is not part of any plan text).
    assert plan.group_by == ("lineitem.l_orderkey", "orders.o_orderdate", "orders.o_shippriority")
    assert {(i.name, i.table, i.column) for i in plan.inputs} >= {
        ("lineitem.l_extendedprice", "lineitem", "l_extendedprice")
    }
    assert plan.source is not None and plan.source.startswith("FROM customer, orders, lineitem WHERE")
    assert plan.source.endswith("l_shipdate > date '1995-03-15'")


def test_without_the_tables_columns_the_join_is_left_to_the_analysis_that_has_them() -> None:
    """``mvs sql`` has no warehouse: it does not refuse REFRESH FAST for what the coordinator, which
    reads the columns, may accept."""
    info = analyze_query(Q3)
    assert info.fast_refresh is None and info.fast_needs_columns
    assert "joined to the other tables by no equality" in info.fast_reason
    event = parse_statement(f"CREATE MATERIALIZED VIEW q3 REFRESH FAST AS {Q3}")
    assert event["action"] == "CREATE_MV"
    # A refusal no column could lift is still the client's.
    with pytest.raises(DdlSyntaxError, match="outer joins"):
        parse_statement("CREATE MATERIALIZED VIEW v REFRESH FAST AS SELECT a FROM t LEFT JOIN u ON k = j")


@pytest.mark.parametrize(
    "sql",
    [
        "SELECT c_name, o_totalprice FROM customer JOIN orders ON c_custkey = o_custkey",
        "SELECT c_name, o_totalprice FROM customer c JOIN orders ON c_custkey = o_custkey",
        "SELECT c_name, o_totalprice FROM customer CROSS JOIN orders WHERE o_custkey = c.c_custkey",
    ],
)
def test_unqualified_join_conditions_resolve_to_their_tables(sql: str) -> None:
    plan = analyze_query(sql.replace("c.c_custkey", "c_custkey"), columns_of=columns_of).fast_refresh
    assert plan is not None and plan.kind == "join_projection"
    assert [(k.left_table, k.left_column, k.right_table, k.right_column) for k in plan.join_keys] in (
        [("customer", "c_custkey", "orders", "o_custkey")],
        [("orders", "o_custkey", "customer", "c_custkey")],
    )


def test_having_and_group_by_over_unqualified_join_columns() -> None:
    sql = (
        "SELECT o_orderdate, COUNT(*) AS n FROM customer JOIN orders ON c_custkey = o_custkey "
        "GROUP BY o_orderdate HAVING COUNT(*) > 1 AND o_orderdate IS NOT NULL AND n < 9"
    )
    plan = analyze_query(sql, columns_of=columns_of).fast_refresh
    assert plan is not None and plan.kind == "join_aggregate_having"
    assert plan.group_by == ("orders.o_orderdate",)


def test_an_ambiguous_column_is_refused_where_it_is() -> None:
    sql = "SELECT c_name FROM customer JOIN nation ON c_nationkey = n_nationkey"
    info = analyze_query(sql, columns_of=columns_of)
    assert info.fast_refresh is None
    assert (
        info.fast_reason
        == "column c_name is ambiguous: customer and nation both have it; qualify it (customer.c_name)"
    )
    assert info.fast_position == sql.index("c_name")


@pytest.mark.parametrize(
    ("sql", "construct"),
    [
        ("SELECT a, sum(max(b)) AS s FROM t GROUP BY a", "max(b)"),
        ("SELECT a, count(*) AS n FROM t GROUP BY upper(a)", "upper(a)"),
        ("SELECT a FROM t JOIN u ON t.k < u.k", "t.k < u.k"),
        ("SELECT a, rand() AS r FROM t", "rand()"),
        ("SELECT a FROM t WHERE a IN (SELECT b FROM u)", "b FROM u"),  # its first name: no keyword kept
        ("SELECT a, count(*) AS n FROM t GROUP BY a HAVING stddev(b) > 1", "stddev(b)"),
    ],
)
def test_a_refusal_points_at_the_construct_it_names(sql: str, construct: str) -> None:
    info = analyze_query(sql)
    assert info.fast_refresh is None
    assert info.fast_position == sql.index(construct), info.fast_reason


def test_create_refresh_fast_points_at_the_aggregate_it_refuses() -> None:
    prefix = "CREATE MATERIALIZED VIEW v REFRESH FAST AS SELECT a, "
    with pytest.raises(DdlSyntaxError) as caught:
        parse_statement(f"{prefix}b / sum(c) AS s FROM t GROUP BY a")
    assert "column b outside the aggregates of b / SUM(c) is not supported" in caught.value.message
    assert caught.value.column == len(prefix) + 1


@pytest.mark.parametrize(
    ("sql", "kind", "where"),
    [
        ("SELECT a, b FROM t WHERE a > 1 ORDER BY b DESC", "projection", "a > 1"),
        ("SELECT sum(b) AS s FROM t WHERE b > 0 ORDER BY s", "aggregate", "b > 0"),
        ("SELECT a, count(*) AS n FROM t WHERE b > 0 GROUP BY a ORDER BY n DESC, a", "aggregate", "b > 0"),
        ("SELECT a FROM t WHERE a > 1 UNION ALL SELECT b FROM u ORDER BY a", "union_projection", None),
    ],
)
def test_order_by_is_accepted_and_not_part_of_the_plan(sql: str, kind: str, where: str | None) -> None:
    plan = analyze_query(sql).fast_refresh
    assert plan is not None and plan.kind == kind and plan.where == where


def test_the_coordinator_resolves_columns_from_the_tables_it_reads() -> None:
    """The coordinator's analysis is the one that travels: it asks the Delta logs (here a stand-in
    for them) for the columns of exactly the tables the query reads."""
    asked: list[str] = []

    def table_columns(table: str) -> tuple[str, ...] | None:
        asked.append(table)
        return COLUMNS.get(table)

    context = Context(
        now_ms=1_000, coordinator_epoch=7, table_exists=lambda t: t in COLUMNS, table_columns=table_columns
    )
    tasks: dict[str, Record] = {}
    effects = handle_ddl(parse_statement(f"CREATE MATERIALIZED VIEW q3 REFRESH FAST AS {Q3}"), tasks, context)
    assert effects.results[0]["accepted"] is True, effects.results[0]
    plan = next(iter(effects.catalog.values()))["mv"]["plan"]["fast_refresh"]
    assert plan["kind"] == "join_aggregate"
    assert sorted(set(asked)) == ["customer", "lineitem", "orders"]
    # Without the columns (a table whose log cannot be read) FAST is refused with the reason.
    blind = Context(now_ms=1_000, coordinator_epoch=7, table_exists=lambda t: t in COLUMNS)
    refused = handle_ddl(parse_statement(f"CREATE MATERIALIZED VIEW q3 REFRESH FAST AS {Q3}"), {}, blind)
    assert refused.results[0]["accepted"] is False
    assert "no equality of columns" in refused.results[0]["error"]["message"]


# -- step 2: aggregates of expressions ----------------------------------------------------------------


def test_an_aggregate_of_an_expression_names_the_column_the_job_derives() -> None:
    sql = (
        "SELECT l_returnflag, SUM(l_extendedprice * (1 - l_discount)) AS revenue, "
        "SUM(CASE WHEN l_quantity > 10 THEN 1 ELSE 0 END) AS big, COUNT(*) AS n FROM lineitem l "
        "WHERE l.l_shipdate <= date '1998-09-02' GROUP BY l_returnflag"
    )
    plan = analyze_query(sql).fast_refresh
    assert plan is not None and plan.kind == "aggregate"
    assert plan.aggregates == (
        AggregateItem(
            "SUM", derived_column("revenue"), "revenue", False, "l_extendedprice * (1 - l_discount)"
        ),
        AggregateItem(
            "SUM", derived_column("big"), "big", False, "CASE WHEN l_quantity > 10 THEN 1 ELSE 0 END"
        ),
        AggregateItem("COUNT", None, "n", False),
    )
    assert plan_from_record(plan_record(analyze_query(sql).plan)).fast_refresh == plan


def test_a_join_aggregate_of_an_expression_reads_it_as_an_input() -> None:
    sql = (
        "SELECT o_orderdate, SUM(l_extendedprice * (1 - l_discount)) AS revenue, "
        "MIN(o_totalprice - l_quantity) AS lo FROM orders, lineitem WHERE l_orderkey = o_orderkey "
        "GROUP BY o_orderdate"
    )
    plan = analyze_query(sql, columns_of=columns_of).fast_refresh
    assert plan is not None and plan.kind == "join_aggregate"
    inputs = {i.name: (i.sql, i.table) for i in plan.inputs}
    assert inputs[derived_column("revenue")] == ("lineitem.l_extendedprice * (1 - lineitem.l_discount)", "")
    assert inputs[derived_column("lo")] == ("orders.o_totalprice - lineitem.l_quantity", "")
    assert plan.aggregates[1].needs_recompute_on_delete
