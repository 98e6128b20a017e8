"""``ORDER BY … LIMIT n`` (plan kind ``top_n``, ``workers.ddl.fast_top``): a FAST plan around the FAST
plan of the query without them, whatever its kind; LIMIT without ORDER BY, OFFSET, LIMIT inside a
subquery and an ORDER BY over anything but output columns refused by name, where they are."""

from __future__ import annotations

import pytest

from tests.support.fast_checks import top_n_difference
from workers.ddl import QueryPlan, analyze_query
from workers.ddl.plan import plan_from_record, plan_record

COLUMNS = {"t": ("k", "v", "g"), "u": ("k", "w")}


def columns(table: str) -> tuple[str, ...] | None:
    return COLUMNS.get(table)


@pytest.mark.parametrize(
    ("sql", "inner_kind", "inner_query", "order_by", "limit"),
    [
        (
            "SELECT k, SUM(v) AS s FROM t GROUP BY k ORDER BY s DESC, k LIMIT 3",
            "aggregate",
            "SELECT k, SUM(v) AS s FROM t GROUP BY k",
            "s DESC, k",
            3,
        ),
        (
            "SELECT t.k, SUM(u.w) AS s FROM t JOIN u ON t.k = u.k GROUP BY t.k\nORDER BY s LIMIT 10;",
            "join_aggregate",
            "SELECT t.k, SUM(u.w) AS s FROM t JOIN u ON t.k = u.k GROUP BY t.k",
            "s",
            10,
        ),
        ("SELECT k, v FROM t WHERE v > 0 ORDER BY v DESC NULLS LAST LIMIT 5", "projection", None, None, 5),
        ("SELECT k FROM t UNION ALL SELECT k FROM u ORDER BY k LIMIT 2", "union_projection", None, None, 2),
        (
            "WITH x AS (SELECT k, v FROM t) SELECT a.k, COUNT(*) AS n FROM x a JOIN x b ON a.k = b.v "
            "GROUP BY a.k ORDER BY n DESC, 1 LIMIT 4",
            "tree",
            None,
            "n DESC, 1",
            4,
        ),
    ],
)
def test_order_by_limit_wraps_the_plan_of_the_query_without_them(
    sql: str, inner_kind: str, inner_query: str | None, order_by: str | None, limit: int
) -> None:
    plan = analyze_query(sql, columns_of=columns).fast_refresh
    assert plan is not None and plan.kind == "top_n" and plan.top_n is not None
    top = plan.top_n
    assert top.inner.kind == inner_kind and top.limit == limit
    assert sql.startswith(top.inner_query) and "ORDER BY" not in top.inner_query.upper()
    assert inner_query is None or top.inner_query == inner_query
    assert order_by is None or top.order_by == order_by
    # The inner plan is the one the query without ORDER BY … LIMIT gets.
    assert top.inner == analyze_query(top.inner_query, columns_of=columns).fast_refresh
    assert plan.base_tables == top.inner.base_tables
    assert plan_from_record(plan_record(QueryPlan(plan))).fast_refresh == plan


@pytest.mark.parametrize(
    ("sql", "construct", "words"),
    [
        ("SELECT k, v FROM t LIMIT 3", "3", "LIMIT without ORDER BY keeps any n rows"),
        ("SELECT k, v FROM t ORDER BY k LIMIT 3 OFFSET 1", "1", "OFFSET is not maintained"),
        ("SELECT k FROM (SELECT k FROM t ORDER BY k LIMIT 3) s", "3", "LIMIT inside a subquery"),
        (
            "SELECT k, SUM(v) AS s FROM t GROUP BY k ORDER BY SUM(v) DESC LIMIT 3",
            "SUM(v) DESC",
            "ORDER BY SUM(v) is not an output column",
        ),
        ("SELECT k FROM t ORDER BY v LIMIT 3", "v LIMIT", "ORDER BY v: with LIMIT, ORDER BY may name only"),
        ("SELECT t.k FROM t ORDER BY t.k LIMIT 3", "t.k LIMIT", "(unqualified)"),
        ("SELECT k FROM t ORDER BY rand() LIMIT 3", "rand()", "non-deterministic function RAND"),
        # The inner query's own refusal, at its place (the inner text is a prefix of the query's).
        ("SELECT k, v FROM t WHERE rand() > 0.5 ORDER BY k LIMIT 3", "rand()", "RAND"),
    ],
)
def test_a_top_n_refusal_names_the_construct_and_where_it_is(sql: str, construct: str, words: str) -> None:
    info = analyze_query(sql, columns_of=columns)
    assert info.fast_refresh is None and words in info.fast_reason, info.fast_reason
    assert info.fast_position is not None
    assert sql[info.fast_position :].startswith(construct), sql[info.fast_position :]


def test_the_oracle_takes_any_of_the_tied_rows_at_the_boundary() -> None:
    # (row, rank, how many rows sort before or with it) for values 9, 7, 7, 7, 5 in descending order.
    ranked = [(("a", 9), 1, 1), (("b", 7), 2, 4), (("c", 7), 2, 4), (("d", 7), 2, 4), (("e", 5), 5, 5)]
    assert top_n_difference([("a", 9), ("c", 7)], ranked, 2) is None
    assert top_n_difference([("a", 9), ("d", 7)], ranked, 2) is None
    assert "missing" in (top_n_difference([("b", 7), ("c", 7)], ranked, 2) or "")
    assert "not in the top 2" in (top_n_difference([("a", 9), ("e", 5)], ranked, 2) or "")
    assert "1 rows, not 2" in (top_n_difference([("a", 9)], ranked, 2) or "")
    assert top_n_difference([r for r, _, _ in ranked], ranked, 10) is None  # fewer rows than n: all
