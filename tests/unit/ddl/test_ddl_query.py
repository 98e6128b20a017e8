"""MV query analysis: validation, base tables, fast-refresh plans, table renaming (workers.ddl.query)."""

from __future__ import annotations

import pytest
import sqlglot

from workers.ddl import (
    AggregateItem,
    FastRefreshPlan,
    InvalidQueryError,
    SelectItem,
    analyze_query,
    plan_from_record,
    plan_record,
)
from workers.ddl.plan import (
    FORMULA,
    JoinInput,
    JoinKey,
    JoinTable,
    QueryPlan,
    derived_column,
    formula_part,
)

# -- validation -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("sql", "message"),
    [
        ("", "query is empty"),
        (" ; ", "query is empty"),
        ("SELECT a FROM t; SELECT b FROM u", "single read-only SELECT; found 2 statements (SELECT, SELECT)"),
        ("SELECT a FROM t; DROP TABLE t", "found 2 statements (SELECT, DROP)"),
        ("INSERT INTO t SELECT * FROM u", "query must be a single read-only SELECT; found INSERT"),
        ("INSERT OVERWRITE t SELECT * FROM u", "found INSERT"),
        ("WITH x AS (SELECT * FROM u) INSERT INTO t SELECT * FROM x", "found INSERT"),
        ("DELETE FROM t WHERE a = 1", "found DELETE"),
        ("UPDATE t SET a = 1", "found UPDATE"),
        ("MERGE INTO t USING u ON t.k = u.k WHEN MATCHED THEN DELETE", "found MERGE"),
        ("CREATE TABLE t2 AS SELECT * FROM t", "found CREATE"),
        ("DROP TABLE t", "found DROP"),
        ("TRUNCATE TABLE t", "found TRUNCATE"),
        ("SET spark.sql.shuffle.partitions = 4", "found SET"),
        ("USE other_db", "found USE"),
        ("CACHE TABLE t", "found CACHE"),
        ("SHOW TABLES", "found SHOW"),
        ("SELECT * INTO t2 FROM t", "found SELECT ... INTO"),
        ("VALUES (1), (2)", "found VALUES"),
        ("SELECT 1", "query must read at least one table (SELECT ... FROM <table>)"),
        ("SELECT 1 AS one, current_date() AS d", "query must read at least one table"),
        ("SELECT a FROM", "could not parse query: Expected table name but got end of query near 'FROM'"),
        ("SELECT a FROM t WHERE", "could not parse query: incomplete WHERE near 'WHERE'"),
        ("SELECT (a FROM t", "could not parse query: Expecting ) near 'FROM'"),
        ("SELECT 'abc FROM t", "could not parse query"),
        ("this is not sql", "query must be a single read-only SELECT; found 'this is not sql'"),
        ("garbage words here", "could not parse query: Invalid expression / Unexpected token near 'here'"),
        ("SELECT * FROM range(10)", "table-valued function RANGE(10) is not supported"),
        ("SELECT * FROM db.t", "qualified table name db.t is not supported"),
        ("SELECT * FROM delta.`/tmp/t`", "reading files by path (delta.`/tmp/t`) is not allowed"),
        ("SELECT * FROM `my-table`", "invalid table name 'my-table'"),
        ("WITH t AS (SELECT * FROM t) SELECT * FROM t", "CTE name 't' is also the name of a table"),
    ],
)
def test_invalid_queries(sql: str, message: str) -> None:
    with pytest.raises(InvalidQueryError) as caught:
        analyze_query(sql)
    assert message in caught.value.message
    assert str(caught.value) == caught.value.message


@pytest.mark.parametrize(
    "sql",
    ["SELECT a + 1 FROM t", "SELECT a, sum(a) FROM t GROUP BY a", "SELECT a AS `x y` FROM t"],
)
def test_output_names_delta_stores_only_with_column_mapping_are_accepted(sql: str) -> None:
    # Spark names an unaliased expression by its text (TPC-H Q18's `sum(l_quantity)`): the MV table
    # gets column mapping (workers.jobs.delta.write.column_mapping), the query stays as written.
    assert analyze_query(sql).base_tables == ("t",)


def test_parse_error_position_is_an_offset_into_the_query() -> None:
    sql = "SELECT a,\n  b\nFROM t WHERE"
    with pytest.raises(InvalidQueryError) as caught:
        analyze_query(sql)
    assert caught.value.position is not None
    assert sql[caught.value.position :] == "WHERE"


@pytest.mark.parametrize(
    "sql",
    [
        "SELECT a FROM t",
        "select a from t;",
        "(SELECT a FROM t)",
        "WITH recent AS (SELECT * FROM t WHERE ts > '2024-01-01') SELECT count(*) AS n FROM recent",
        "SELECT a FROM t UNION ALL SELECT a FROM u",
        "SELECT a FROM t -- trailing comment",
        "SELECT `select` FROM `T`",
    ],
)
def test_valid_queries(sql: str) -> None:
    info = analyze_query(sql)
    assert info.base_tables
    sqlglot.parse_one(info.normalized_sql, dialect="spark")  # normalized SQL is valid Spark SQL


# -- base tables ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("sql", "tables"),
    [
        ("SELECT a FROM Sales", ("sales",)),
        ("SELECT * FROM b JOIN a ON a.k = b.k LEFT JOIN c USING (k)", ("a", "b", "c")),
        ("SELECT * FROM t x, t y", ("t",)),
        ("SELECT * FROM (SELECT * FROM inner_t) sub", ("inner_t",)),
        (
            "SELECT * FROM t WHERE k IN (SELECT k FROM u) AND EXISTS (SELECT 1 FROM v WHERE v.k = t.k)",
            ("t", "u", "v"),
        ),
        ("SELECT (SELECT max(x) FROM m) AS mx, a FROM t", ("m", "t")),
        (
            "WITH a AS (SELECT * FROM sales), b AS (SELECT * FROM a JOIN regions r ON 1=1) SELECT * FROM b",
            ("regions", "sales"),
        ),
        (
            "WITH q AS (SELECT * FROM t) SELECT * FROM q "
            "WHERE x IN (WITH z AS (SELECT 1 AS x FROM u) SELECT x FROM z)",
            ("t", "u"),
        ),
        ("SELECT a FROM t UNION SELECT a FROM u EXCEPT SELECT a FROM v", ("t", "u", "v")),
    ],
)
def test_base_tables(sql: str, tables: tuple[str, ...]) -> None:
    assert analyze_query(sql).base_tables == tables


def test_a_cte_that_shadows_nothing_is_fine() -> None:
    info = analyze_query("WITH big AS (SELECT * FROM orders WHERE amount > 100) SELECT id FROM big")
    assert info.base_tables == ("orders",)
    assert info.fast_refresh is None
    assert info.fast_reason == "WITH clauses (CTEs) are not supported"


# -- fast refresh -----------------------------------------------------------------------------------


def test_projection_plan() -> None:
    info = analyze_query(
        "SELECT s.id, amount * 2 AS doubled, Region FROM sales s WHERE s.amount > 10 AND region <> 'x'"
    )
    assert info.fast_reason == ""
    assert info.fast_refresh == FastRefreshPlan(
        kind="projection",
        base_table="sales",
        group_by=(),
        items=(
            SelectItem("id", "id", "id"),
            SelectItem("doubled", "amount * 2", None),
            SelectItem("region", "Region", "region"),
        ),
        aggregates=(),
        where="s.amount > 10 AND region <> 'x'",  # the user's own text, as Spark will read it
        qualifier="s",
    )
    assert not info.fast_refresh.needs_recompute_on_delete


def test_aggregate_plan() -> None:
    info = analyze_query(
        "SELECT region, Store AS shop, sum(amount) AS total, count(*) AS n, count(amount) AS n_amount, "
        "avg(amount) AS mean, min(amount) AS lo, max(s.amount) AS hi "
        "FROM sales s WHERE amount > 0 GROUP BY region, store"
    )
    plan = info.fast_refresh
    assert plan is not None
    assert (plan.kind, plan.base_table, plan.group_by, plan.where) == (
        "aggregate",
        "sales",
        ("region", "store"),
        "amount > 0",
    )
    assert [item.name for item in plan.items] == [
        "region",
        "shop",
        "total",
        "n",
        "n_amount",
        "mean",
        "lo",
        "hi",
    ]
    assert plan.items[1] == SelectItem("shop", "Store", "store")
    assert plan.aggregates == (
        AggregateItem("SUM", "amount", "total", False),
        AggregateItem("COUNT", None, "n", False),
        AggregateItem("COUNT", "amount", "n_amount", False),
        AggregateItem("AVG", "amount", "mean", False),
        AggregateItem("MIN", "amount", "lo", True),
        AggregateItem("MAX", "amount", "hi", True),
    )
    assert plan.needs_recompute_on_delete


@pytest.mark.parametrize(
    ("sql", "where"),
    [
        (
            "SELECT a FROM t WHERE x = 'it''s' AND (b > 1) -- note\nGROUP BY a",
            "x = 'it''s' AND (b > 1) -- note",
        ),
        ("(SELECT a, count(*) AS n FROM t WHERE a IN (1, 2) GROUP BY a)", "a IN (1, 2)"),
        ("SELECT a FROM t WHERE a > 1;", "a > 1"),
        ("SELECT a FROM t WHERE  a = 'GROUP BY'  ", "a = 'GROUP BY'"),
    ],
)
def test_the_fast_where_is_the_users_text(sql: str, where: str) -> None:
    plan = analyze_query(sql).fast_refresh
    assert plan is not None and plan.where == where and plan.qualifier == "t"


def test_group_by_expressions_are_computed_into_columns_of_their_own() -> None:
    """``GROUP BY year(d)``: the key is computed into a derived column named by its output (as an
    aggregate's argument is), over one table and over a join (the inputs' query selects it)."""
    plan = analyze_query("SELECT year(d) AS y, count(*) AS n FROM t GROUP BY year(d)").fast_refresh
    assert plan is not None and plan.kind == "aggregate"
    assert plan.group_by == (derived_column("y"),)
    assert plan.items[0] == SelectItem("y", "YEAR(d)", derived_column("y"))
    joined = analyze_query(
        "SELECT substring(c.phone, 1, 2) AS cc, o.k, sum(o.v) AS s FROM c JOIN o ON c.k = o.k "
        "GROUP BY substring(c.phone, 1, 2), o.k"
    ).fast_refresh
    assert joined is not None and joined.kind == "join_aggregate"
    assert joined.group_by == (derived_column("cc"), "o.k")
    assert joined.inputs[0] == JoinInput(
        derived_column("cc"), "SUBSTRING(c.phone, 1, 2)", "", derived_column("cc")
    )


def test_an_expression_over_aggregates_is_a_formula_over_hidden_parts() -> None:
    """``100.00 * SUM(…) / SUM(…)``: the output is a FORMULA over its parts' names; each aggregate
    in it is a part the MV does not show (its argument's derived column named by the part)."""
    plan = analyze_query(
        "SELECT 100.00 * sum(CASE WHEN p THEN e END) / sum(e * (1 - d)) AS promo, count(*) AS n FROM t"
    ).fast_refresh
    assert plan is not None and plan.kind == "aggregate" and plan.group_by == ()
    assert [i.name for i in plan.items] == ["promo", "n"]
    first, second = formula_part("promo", 0), formula_part("promo", 1)
    assert plan.aggregates == (
        AggregateItem(FORMULA, None, "promo", False, f"100.00 * `{second}` / `{first}`"),
        AggregateItem("SUM", derived_column(first), first, False, "e * (1 - d)"),
        AggregateItem("SUM", derived_column(second), second, False, "CASE WHEN p THEN e END"),
        AggregateItem("COUNT", None, "n", False),
    )
    assert plan_from_record(plan_record(QueryPlan(plan))).fast_refresh == plan


def test_an_equality_every_branch_of_an_or_holds_joins_the_tables() -> None:
    """TPC-H Q19: ``(p_partkey = l_partkey AND …) OR (l_partkey = p_partkey AND …) OR …``."""
    plan = analyze_query(
        "SELECT sum(l.e) AS revenue FROM l, p WHERE (p.k = l.k AND p.b = 'x') "
        "OR (l.k = p.k AND (p.s > 1 OR p.s < 0)) OR (p.k = l.k AND p.j = l.j AND p.s = 0)"
    ).fast_refresh
    assert plan is not None and plan.kind == "join_aggregate"
    assert plan.join_keys == (JoinKey("p", "k", "l", "k"),)


def test_global_aggregate_and_count_one() -> None:
    plan = analyze_query("SELECT count(1) AS n, sum(x) AS total FROM t").fast_refresh
    assert plan is not None
    assert plan.kind == "aggregate" and plan.group_by == ()
    assert plan.aggregates[0] == AggregateItem("COUNT", None, "n", False)
    assert not plan.needs_recompute_on_delete


def test_join_projection_plan() -> None:
    plan = analyze_query(
        "SELECT o.id, C.Name, o.amount * 2 AS doubled, region FROM orders o JOIN customers c "
        "ON o.customer_id = c.id AND o.shop = c.shop JOIN regions USING (region) WHERE c.active"
    ).fast_refresh
    assert plan is not None
    assert (plan.kind, plan.base_table, plan.qualifier, plan.where) == (
        "join_projection",
        "orders",
        "o",
        "c.active",
    )
    assert plan.base_tables == ("orders", "customers", "regions")
    assert plan.tables == (
        JoinTable("orders", "o"),
        JoinTable("customers", "c"),
        JoinTable("regions", "regions"),
    )
    # USING after the second table names no table (Spark resolves it): no key to narrow reads by.
    assert plan.join_keys == (
        JoinKey("orders", "customer_id", "customers", "id"),
        JoinKey("orders", "shop", "customers", "shop"),
    )
    assert [(i.name, i.column) for i in plan.items] == [
        ("id", "o.id"),
        ("name", "c.name"),
        ("doubled", None),
        ("region", "region"),
    ]
    assert plan.inputs == () and plan.source is None


def test_join_aggregate_plan_keeps_the_users_from_and_where_text() -> None:
    sql = (
        "(SELECT c.region, count(*) AS n, sum(o.amount) AS total, min(amount) AS lo FROM orders o "
        "INNER JOIN customers c ON o.customer_id = c.id WHERE extract(YEAR FROM o.day) > 2020 "
        "GROUP BY c.region)"
    )
    plan = analyze_query(sql).fast_refresh
    assert plan is not None and plan.kind == "join_aggregate"
    assert plan.group_by == ("c.region",)
    assert plan.items[0] == SelectItem("region", "c.region", "c.region")
    assert plan.aggregates == (
        AggregateItem("COUNT", None, "n", False),
        AggregateItem("SUM", "o.amount", "total", False),
        AggregateItem("MIN", "amount", "lo", True),
    )
    assert plan.inputs == (
        JoinInput("c.region", "c.region", "customers", "region"),
        JoinInput("o.amount", "o.amount", "orders", "amount"),
        JoinInput("amount", "amount", "", "amount"),  # unqualified: Spark knows its table
    )
    assert plan.source == (
        "FROM orders o INNER JOIN customers c ON o.customer_id = c.id WHERE extract(YEAR FROM o.day) > 2020"
    )
    assert plan_from_record(plan_record(analyze_query(sql).plan)).fast_refresh == plan


def test_a_join_plan_is_no_plan_for_a_worker_that_knows_only_one_table() -> None:
    """A join kind is new: an older worker (which knows only projection/aggregate) recomputes it."""
    record = plan_record(analyze_query("SELECT t.a FROM t JOIN u USING (k)").plan)
    assert record["fast_refresh"]["kind"] == "join_projection"
    assert record["fast_refresh"]["tables"] == [
        {"table": "t", "qualifier": "t"},
        {"table": "u", "qualifier": "u"},
    ]


@pytest.mark.parametrize(
    ("sql", "reason"),
    [
        ("SELECT a FROM t LEFT JOIN u ON t.k = u.k", "outer joins (LEFT JOIN) are not supported; only inner"),
        ("SELECT a FROM t FULL OUTER JOIN u ON t.k = u.k", "outer joins (FULL JOIN) are not supported"),
        ("SELECT a FROM t LEFT ANTI JOIN u ON t.k = u.k", "LEFT ANTI joins are not supported"),
        ("SELECT a FROM t, u", "u is joined to the other tables by no equality of columns (a cross join)"),
        ("SELECT a FROM t CROSS JOIN u WHERE t.k > u.k", "u is joined to the other tables by no equality"),
        ("SELECT a FROM t JOIN u", "(a cross join); add the join condition to WHERE (u.<column> = "),
        ("SELECT a FROM t, u, v WHERE t.k = u.k", "v is joined to the other tables by no equality"),
        ("SELECT a FROM t, u WHERE t.k = u.k OR t.j = u.j", "u is joined to the other tables by no equality"),
        (
            "SELECT sum(t.a) AS s FROM t, u WHERE (t.k = u.k AND u.b = 1) OR (u.k = t.k AND u.c) OR u.c",
            "u is joined to the other tables by no equality",
        ),
        (
            "SELECT a FROM t NATURAL JOIN u",
            "NATURAL joins are not supported; name the join columns with USING",
        ),
        ("SELECT a FROM t JOIN u ON t.k < u.k", "join condition t.k < u.k is not an equality of columns"),
        (
            "SELECT a FROM t JOIN u ON t.k = u.k OR t.j = u.j",
            "is not an equality of columns; move it to WHERE",
        ),
        ("SELECT a FROM t JOIN u ON t.k = u.k AND u.x > 1", "join condition u.x > 1 is not an equality"),
        ("SELECT a FROM t JOIN u ON t.k = u.k + 1", "is not an equality of columns"),
        ("SELECT a FROM t JOIN u ON t.k <=> u.k", "matches NULL keys; use ="),
        (
            "SELECT a FROM t JOIN u ON k = j",
            "qualify the columns of the join condition k = j with their tables",
        ),
        ("SELECT a FROM t JOIN u ON t.k = t.j", "compares two columns of one table; move it to WHERE"),
        (
            "SELECT a FROM t JOIN u ON t.k = u.k JOIN v ON t.j = u.j",
            "the condition of the join with v does not name it",
        ),
        ("SELECT a FROM t JOIN t x ON t.k = x.k", "it reads t twice (a self-join)"),
        ("SELECT a FROM t JOIN u t ON t.k = t.j", "two tables are read by the same name t"),
        ("SELECT a FROM t JOIN (SELECT k FROM u) x ON t.k = x.k", "subqueries are not supported"),
        (
            "SELECT t.a, u.b, count(*) AS n FROM t JOIN u ON t.k = u.k GROUP BY t.a",
            "column u.b is neither grouped",
        ),
        (
            "SELECT a FROM t UNION SELECT a FROM u",
            "UNION (without ALL) is not supported; use UNION ALL",
        ),
        ("SELECT a FROM (SELECT a FROM t) x", "subqueries are not supported"),
        ("SELECT a FROM t WHERE a IN (SELECT a FROM t)", "subqueries are not supported"),
        ("SELECT DISTINCT a FROM t", "DISTINCT is not supported"),
        (
            "SELECT a, count(*) AS n FROM t GROUP BY a HAVING stddev(b) > 1",
            "HAVING STDDEV(b) is not supported",
        ),
        ("SELECT a FROM t LIMIT 10", "LIMIT without ORDER BY keeps any n rows, which no refresh can"),
        ("SELECT a FROM t SORT BY a", "SORT BY is not supported"),
        ("SELECT a, row_number() OVER (ORDER BY a) AS rn FROM t", "window functions are not supported"),
        ("SELECT a FROM t TABLESAMPLE (10 PERCENT)", "TABLESAMPLE is not supported"),
        ("SELECT a FROM t WHERE rand() < 0.1", "non-deterministic function RAND is not supported"),
        ("SELECT a, now() AS at FROM t", "non-deterministic function NOW is not supported"),
        ("SELECT a FROM t WHERE ts > current_timestamp()", "non-deterministic function CURRENT_TIMESTAMP"),
        ("SELECT a, uuid() AS id FROM t", "non-deterministic function UUID"),
        ("SELECT * FROM t", "SELECT * is not supported; list the output columns"),
        ("SELECT t.* FROM t", "SELECT * is not supported"),
        ("SELECT a, b AS a FROM t", "output column name a is used twice"),
        (
            "SELECT a, sum(count(b)) AS s FROM t GROUP BY a",
            "the argument of SUM(COUNT(b)) must be an expression",
        ),
        (
            "SELECT a, sum(2) AS s FROM t GROUP BY a",
            "the argument of SUM(2) must be an expression of the row",
        ),
        ("SELECT a, count(DISTINCT b) AS n FROM t GROUP BY a", "COUNT(DISTINCT ...) is not supported"),
        (
            "SELECT a, stddev(b) AS s FROM t GROUP BY a",
            "is not supported; select GROUP BY columns and SUM, COUNT",
        ),
        (
            "SELECT count(*) AS n FROM t GROUP BY upper(a)",
            "GROUP BY expression UPPER(a) must also be selected",
        ),
        (
            "SELECT a, count(*) AS n FROM t GROUP BY ROLLUP (a)",
            "ROLLUP, CUBE and GROUPING SETS are not supported",
        ),
        (
            "SELECT a, count(*) AS n FROM t GROUP BY 1",
            "GROUP BY must list columns or expressions of the row's",
        ),
        ("SELECT a, count(*) AS n FROM t GROUP BY a, max(b)", "GROUP BY MAX(b) holds an aggregate"),
        (
            "SELECT a, max(b) - min(b) AS r FROM t GROUP BY a",
            "MAX(b) in the expression MAX(b) - MIN(b) is not",
        ),
        ("SELECT a, sum(b) / a AS r FROM t GROUP BY a", "column a outside the aggregates of SUM(b) / a"),
        ("SELECT b, count(*) AS n FROM t GROUP BY a, b", "GROUP BY column a must also be selected"),
        ("SELECT a, b, count(*) AS n FROM t GROUP BY a", "column b is neither grouped nor aggregated"),
    ],
)
def test_not_fast_refreshable(sql: str, reason: str) -> None:
    info = analyze_query(sql)
    assert info.fast_refresh is None
    assert reason in info.fast_reason
