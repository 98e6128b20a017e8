"""FAST eligibility of the shapes of issue 10, item 2: GROUP BY … HAVING over one table or a join
(``workers.ddl.fast_having``) and UNION ALL of projections (``workers.ddl.fast_union``)."""

from __future__ import annotations

import pytest

from workers.ddl import AggregateItem, SelectItem, analyze_query, plan_from_record, plan_record
from workers.ddl.plan import JoinTable

# -- HAVING -----------------------------------------------------------------------------------------


def test_having_plan_is_the_aggregate_plan_of_another_kind() -> None:
    sql = (
        "SELECT k, sum(v) AS total, count(*) AS n FROM sales s WHERE s.v > 0 "
        "GROUP BY k HAVING count(*) > 2 AND max(s.v) < 10 AND total <> 0 AND k IS NOT NULL"
    )
    plan = analyze_query(sql).fast_refresh
    assert plan is not None
    assert (plan.kind, plan.base_table, plan.group_by, plan.where, plan.qualifier) == (
        "aggregate_having",
        "sales",
        ("k",),
        "s.v > 0",  # the user's WHERE text ends at GROUP BY, never takes the HAVING
        "s",
    )
    # The aggregates listed are the selected ones; HAVING's own (MAX(v)) are evaluated by the query.
    assert plan.aggregates == (
        AggregateItem("SUM", "v", "total", False),
        AggregateItem("COUNT", None, "n", False),
    )
    assert plan_from_record(plan_record(analyze_query(sql).plan)).fast_refresh == plan


@pytest.mark.parametrize(
    ("sql", "where"),
    [
        ("SELECT count(*) AS n FROM t WHERE v > 1 HAVING sum(v) > 2", "v > 1"),  # no GROUP BY: one group
        ("SELECT k, min(v) AS lo FROM t WHERE k <> 'HAVING' GROUP BY k HAVING avg(v) > 0", "k <> 'HAVING'"),
        ("SELECT k FROM t GROUP BY k HAVING count(1) >= 2 OR count(v) = 0", None),  # only keys selected
    ],
)
def test_having_shapes_that_are_eligible(sql: str, where: str | None) -> None:
    plan = analyze_query(sql).fast_refresh
    assert plan is not None and plan.kind == "aggregate_having" and plan.where == where


def test_having_over_a_join_is_the_join_aggregate_plan_reading_only_its_keys() -> None:
    """The joined change rows need only the group keys (the query recomputes the values): the plan's
    inputs are the keys', the aggregates in HAVING (``MAX(c.x)``) read none."""
    sql = (
        "SELECT o.k, COUNT(*) AS n, SUM(c.v) AS s_v FROM orders o JOIN customers c ON o.id = c.id "
        "WHERE c.v > 0 GROUP BY o.k HAVING COUNT(*) >= 2 AND MAX(c.x) < 10 AND s_v <> 0 OR o.k IS NULL"
    )
    plan = analyze_query(sql).fast_refresh
    joined = analyze_query(sql[: sql.index(" HAVING")]).fast_refresh
    assert plan is not None and joined is not None and joined.kind == "join_aggregate"
    assert plan.kind == "join_aggregate_having"
    assert plan.base_tables == ("orders", "customers") and plan.where == "c.v > 0"
    assert plan.source == "FROM orders o JOIN customers c ON o.id = c.id WHERE c.v > 0"  # no HAVING
    assert [i.name for i in joined.inputs] == ["o.k", "c.v"]
    assert plan.inputs == joined.inputs[:1]
    assert (plan.group_by, plan.items, plan.aggregates, plan.join_keys) == (
        joined.group_by,
        joined.items,
        joined.aggregates,
        joined.join_keys,
    )
    assert plan_from_record(plan_record(analyze_query(sql).plan)).fast_refresh == plan


@pytest.mark.parametrize(
    "sql",
    [
        # No GROUP BY: the join's one group; WHERE and FROM texts end where HAVING starts.
        "SELECT COUNT(*) AS n FROM t JOIN u USING (k) WHERE u.v > 1 HAVING SUM(t.v) > 2",
        "SELECT u.k2 AS k2, MIN(t.v) AS lo FROM t JOIN u ON t.k = u.k GROUP BY u.k2 HAVING k2 = 1 OR lo > 0",
        "SELECT a.k FROM t a JOIN u b ON a.k = b.k JOIN w c ON c.j = b.j GROUP BY a.k HAVING count(c.v) > 1",
    ],
)
def test_having_over_a_join_shapes_that_are_eligible(sql: str) -> None:
    plan = analyze_query(sql).fast_refresh
    assert plan is not None and plan.kind == "join_aggregate_having"
    assert plan.source is not None and "HAVING" not in plan.source.upper()


def test_a_having_plan_is_no_plan_for_a_worker_that_does_not_know_it() -> None:
    """An older worker (which knows no ``aggregate_having``) refreshes completely, saying why."""
    record = plan_record(analyze_query("SELECT k, count(*) AS n FROM t GROUP BY k HAVING n > 1").plan)
    record["fast_refresh"]["kind"] = "aggregate_having_v2"  # what any unknown kind looks like
    plan = plan_from_record(record)
    assert plan.fast_refresh is None
    assert "does not know fast-refresh plans of kind aggregate_having_v2" in plan.fast_reason


@pytest.mark.parametrize(
    ("sql", "reason"),
    [
        (
            "SELECT k, count(*) AS n FROM t GROUP BY k HAVING stddev(v) > 1",
            "HAVING STDDEV(v) is not supported; HAVING may use SUM, COUNT, AVG, MIN or MAX of a plain "
            "column, COUNT(*), GROUP BY columns and output names",
        ),
        ("SELECT k, count(*) AS n FROM t GROUP BY k HAVING count(DISTINCT v) > 1", "COUNT(DISTINCT ...)"),
        (
            "SELECT k, count(*) AS n FROM t GROUP BY k HAVING sum(avg(v)) > 1",
            "argument of SUM(AVG(v)) must be",
        ),
        ("SELECT k, count(*) AS n FROM t GROUP BY k HAVING v > 1", "HAVING column v is neither grouped"),
        ("SELECT k, count(*) AS n FROM t GROUP BY k HAVING rand() > 0.5", "non-deterministic function RAND"),
        ("SELECT k, count(*) AS n FROM t GROUP BY k HAVING n > (SELECT 1)", "subqueries are not supported"),
        (
            "SELECT v FROM t HAVING v > 1",
            "HAVING without GROUP BY or an aggregate is not supported; use WHERE",
        ),
        # Over a join: the same terms refused, a column must be qualified by a table of the join.
        (
            "SELECT t.k, count(*) AS n FROM t JOIN u ON t.k = u.k GROUP BY t.k HAVING stddev(u.v) > 1",
            "HAVING STDDEV(u.v) is not supported; HAVING may use SUM",
        ),
        (
            "SELECT t.k, count(*) AS n FROM t JOIN u ON t.k = u.k GROUP BY t.k HAVING sum(max(u.v)) > 1",
            "the argument of SUM(MAX(u.v)) must be an expression of the row's columns",
        ),
        (
            "SELECT t.k, count(*) AS n FROM t JOIN u ON t.k = u.k GROUP BY t.k HAVING u.v > 1",
            "HAVING column u.v is neither grouped nor an output",
        ),
        (
            "SELECT t.k, count(*) AS n FROM t JOIN u ON t.k = u.k GROUP BY t.k HAVING n > rand()",
            "non-deterministic function RAND",
        ),
        (
            "SELECT t.k, u.v FROM t JOIN u ON t.k = u.k HAVING u.v > 1",
            "HAVING without GROUP BY or an aggregate is not supported; use WHERE",
        ),
    ],
)
def test_having_shapes_that_are_not(sql: str, reason: str) -> None:
    info = analyze_query(sql)
    assert info.fast_refresh is None
    assert reason in info.fast_reason


# -- UNION ALL --------------------------------------------------------------------------------------


def test_union_all_plan_lists_every_base_once_and_the_first_branchs_columns() -> None:
    sql = (
        "SELECT k, v * 2 AS v2 FROM sales s WHERE s.v > 0 UNION ALL SELECT id, amount + 1 FROM returns "
        "UNION ALL (SELECT k, v FROM sales)"
    )
    plan = analyze_query(sql).fast_refresh
    assert plan is not None
    assert (plan.kind, plan.base_table, plan.base_tables, plan.where) == (
        "union_projection",
        "sales",
        ("sales", "returns"),
        None,
    )
    assert plan.tables == (JoinTable("sales", "sales"), JoinTable("returns", "returns"))
    assert plan.items == (SelectItem("k", "k", "k"), SelectItem("v2", "v * 2", None))
    assert plan_from_record(plan_record(analyze_query(sql).plan)).fast_refresh == plan


@pytest.mark.parametrize(
    ("sql", "reason"),
    [
        ("SELECT a FROM t UNION SELECT a FROM u", "UNION (without ALL) is not supported; use UNION ALL"),
        ("SELECT a FROM t INTERSECT SELECT a FROM u", "INTERSECT is not supported; only UNION ALL is"),
        ("SELECT a FROM t EXCEPT SELECT a FROM u", "EXCEPT is not supported; only UNION ALL is"),
        ("SELECT a FROM t UNION ALL SELECT a, b FROM u", "UNION ALL branch 2 has 2 columns, branch 1 1"),
        (
            "SELECT a FROM t UNION ALL SELECT k, count(*) AS n FROM u GROUP BY k",
            "UNION ALL branch 2 is not a projection of one table (aggregate); each branch must be a "
            "projection/filter of one table (SELECT cols FROM t [WHERE …])",
        ),
        ("SELECT a FROM t UNION ALL SELECT u.a FROM u JOIN v ON u.k = v.k", "(join projection)"),
        (
            "SELECT a FROM t UNION ALL SELECT rand() FROM u",
            "UNION ALL branch 2: non-deterministic function RAND",
        ),
        ("SELECT a FROM t UNION ALL SELECT a FROM (SELECT a FROM u) s", "branch 2: the query must read its"),
        ("SELECT a FROM t UNION ALL SELECT a FROM u LIMIT 3", "LIMIT without ORDER BY keeps any n rows"),
        ("WITH x AS (SELECT a FROM t) SELECT a FROM x UNION ALL SELECT a FROM u", "WITH clauses (CTEs)"),
    ],
)
def test_union_shapes_that_are_not(sql: str, reason: str) -> None:
    info = analyze_query(sql)
    assert info.fast_refresh is None
    assert reason in info.fast_reason
