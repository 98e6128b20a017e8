"""The MV query allow-list at the coordinator and in `mvs sql`: every escape class is refused by name,
deep nesting is a clean error, common queries still pass, and a refused query never reaches a worker."""

from __future__ import annotations

import copy
import string
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from sqlglot.dialects.spark import Spark

from workers.config import Settings
from workers.coordinator.handlers import Context, handle_ddl
from workers.ddl import DdlSyntaxError, InvalidQueryError, analyze_query, parse_statement
from workers.ddl.allowlist import BUILTIN_FUNCTIONS, REFLECTION

SQL_KEYWORDS = frozenset(Spark.Tokenizer.KEYWORDS)

ESCAPES = [
    (
        "SELECT reflect('java.lang.Runtime', 'getRuntime') AS r FROM t",
        "function reflect() is not allowed: reflection",
    ),
    (
        "SELECT java_method('java.lang.Runtime', 'getRuntime') AS r FROM t",
        "function java_method() is not allowed",
    ),
    (
        "SELECT try_reflect('java.lang.Runtime', 'getRuntime') AS r FROM t",
        "function try_reflect() is not allowed",
    ),
    (
        "SELECT a FROM t WHERE REFLECT('java.lang.Thread', 'sleep', 1L) IS NULL",
        "function reflect() is not allowed",
    ),
    ("SELECT TRANSFORM(a) USING 'cat' AS (b) FROM t", "script transforms (TRANSFORM ... USING)"),
    ("SELECT * FROM parquet.`/etc`", "reading files by path (parquet.`/etc`) is not allowed"),
    ("SELECT * FROM `/etc/passwd`", "reading files by path"),
    ("SELECT * FROM t JOIN json.`file:/x` j ON 1 = 1", "reading files by path"),
    ("SELECT * FROM range(10)", "table-valued function RANGE(10) is not supported"),
    ("SELECT * FROM t JOIN explode(array(1)) e ON 1 = 1", "table-valued function EXPLODE"),
    (
        "SELECT a FROM t LATERAL VIEW explode(arr) x AS y",
        "LATERAL VIEW and lateral table functions are not allowed",
    ),
    ("SELECT * FROM t, LATERAL explode(t.arr)", "LATERAL VIEW and lateral table functions are not allowed"),
    ("SELECT my_udf(x) AS y FROM t", "function my_udf() is not allowed in an MV query"),
    ("SELECT upper(my_udf(x)) AS y FROM t", "function my_udf() is not allowed"),
    ("SELECT a FROM t WHERE a IN (SELECT my_udf(b) FROM u)", "function my_udf() is not allowed"),
    ("WITH c AS (SELECT my_udf(b) AS b FROM u) SELECT b FROM c", "function my_udf() is not allowed"),
    ("SELECT db.upper(x) AS y FROM t", "qualified function name"),
    ("SELECT input_file_name() AS f FROM t", "function input_file_name() is not allowed"),
    ("SELECT xpath_string(x, '/a') AS f FROM t", "function xpath_string() is not allowed"),
    ("SELECT from_avro(x, '{}') AS f FROM t", "function from_avro() is not allowed"),
    ("SELECT * FROM other_catalog.db.t", "qualified table name other_catalog.db.t is not supported"),
    ("SELECT * FROM db.t", "qualified table name db.t is not supported"),
    ("SELECT a FROM t VERSION AS OF 3", "time travel (VERSION/TIMESTAMP AS OF) is not allowed"),
    ("SELECT a FROM t WHERE a = :p", "query parameters are not allowed"),
    ("SELECT ${x} FROM t", "query parameters and ${...} substitutions are not allowed"),
]


@pytest.mark.parametrize(("sql", "message"), ESCAPES)
def test_every_escape_class_is_refused_by_name(sql: str, message: str) -> None:
    with pytest.raises(InvalidQueryError) as caught:
        analyze_query(sql, extra_functions=())
    assert message in caught.value.message


def test_mvs_sql_refuses_them_too_with_a_position() -> None:
    with pytest.raises(DdlSyntaxError, match=r"function reflect\(\) is not allowed"):
        parse_statement(
            "CREATE MATERIALIZED VIEW m AS SELECT reflect('java.lang.Runtime', 'getRuntime') FROM t"
        )


@pytest.mark.parametrize(
    "sql",
    [
        "SELECT " + "(" * 5000 + "a" + ")" * 5000 + " FROM t",
        "SELECT a FROM " + "(SELECT a FROM " * 3000 + "t" + ") x" * 3000,
        "SELECT a FROM t WHERE " + " AND ".join(["NOT (a = 1"] * 3000) + ")" * 3000,
        "SELECT " + "upper(" * 5000 + "a" + ")" * 5000 + " FROM t",
    ],
    ids=["parentheses", "subqueries", "predicates", "calls"],
)
def test_deep_nesting_is_a_clean_error(sql: str) -> None:
    with pytest.raises(InvalidQueryError, match="query nests too deeply"):
        analyze_query(sql, extra_functions=())


def test_deep_nesting_in_a_statement_is_a_clean_syntax_error() -> None:
    sql = "CREATE MATERIALIZED VIEW m AS SELECT " + "(" * 5000 + "a" + ")" * 5000 + " FROM t"
    with pytest.raises(DdlSyntaxError, match="query nests too deeply"):
        parse_statement(sql)


LEGITIMATE = [
    "SELECT region, sum(amount) AS total FROM sales GROUP BY region",
    "SELECT id, amount FROM orders",
    "SELECT s.id, amount * 2 AS doubled, Region FROM sales s WHERE s.amount > 10 AND region <> 'x'",
    "WITH recent AS (SELECT * FROM t WHERE ts > '2024-01-01') SELECT count(*) AS n FROM recent",
    "SELECT a FROM t UNION ALL SELECT a FROM u INTERSECT SELECT a FROM v EXCEPT SELECT a FROM w",
    "SELECT DISTINCT a FROM t ORDER BY a DESC NULLS LAST LIMIT 10 OFFSET 2",
    "SELECT t.k, count(*) AS n FROM t JOIN u ON t.k = u.k LEFT JOIN v USING (k) "
    "GROUP BY t.k HAVING count(*) > 1",
    "SELECT * FROM t x LEFT SEMI JOIN u y ON x.a = y.a",
    "SELECT a FROM t WHERE EXISTS (SELECT 1 FROM u WHERE u.k = t.k) AND a > ALL (SELECT b FROM v)",
    "SELECT (SELECT max(x) FROM m) AS mx, a FROM t",
    "SELECT a, row_number() OVER (PARTITION BY b ORDER BY c) AS rn, "
    "sum(x) OVER (ORDER BY c ROWS BETWEEN 1 PRECEDING AND CURRENT ROW) AS running FROM t",
    "SELECT a, rank() OVER w AS r FROM t WINDOW w AS (PARTITION BY b ORDER BY c)",
    "SELECT CAST(a AS string) AS s, a::int AS i, try_cast(b AS double) AS d, "
    "CASE WHEN a > 1 THEN 'x' WHEN a IS NULL THEN NULL ELSE 'y' END AS c, "
    "CASE a WHEN 1 THEN 2 END AS e FROM t",
    "SELECT a BETWEEN 1 AND 2 AS b, a NOT IN (1, 2) AS n, s LIKE 'x%' AS l, s RLIKE '^a' AS r, "
    "s ILIKE 'y' AS i, a <=> b AS ns, -a AS neg, a % 2 AS m, a DIV 2 AS q, ~a AS bn, a & 1 AS band, "
    "s || 'x' AS cat, NOT flag AS nf FROM t",
    "SELECT EXTRACT(year FROM d) AS y, date_add(d, 1) AS d1, date_format(d, 'yyyy') AS f, "
    "DATE '2020-01-01' AS dd, TIMESTAMP '2020-01-01 00:00:00' AS ts, INTERVAL 1 DAY AS iv, "
    "current_date() AS cd, current_timestamp() AS ct, to_date(s) AS td, datediff(d, d) AS dd2 FROM t",
    "SELECT lower(s) AS l, upper(s) AS u, substr(s, 1, 2) AS ss, substring(s FROM 1 FOR 2) AS s2, "
    "trim(BOTH 'x' FROM s) AS tr, concat_ws(',', s, s) AS cw, concat(s, s) AS c2, "
    "regexp_replace(s, 'a', 'b') AS rr, "
    "split(s, ',') AS sp, length(s) AS len, coalesce(a, b) AS co, nvl(a, b) AS nv, "
    "if(a > 1, 1, 2) AS iff FROM t",
    "SELECT array(1, 2) AS arr, struct(a, b) AS st, named_struct('x', a) AS ns, map('k', a) AS mp, "
    "arr[0] AS first_el, st.field AS fld, element_at(mp, 'k') AS el, size(arr) AS sz, "
    "transform(arr, x -> x + 1) AS tr, filter(arr, x -> x > 1) AS fl, "
    "aggregate(arr, 0, (acc, x) -> acc + x) AS ag "
    "FROM t",
    "SELECT explode(arr) AS e FROM t",
    "SELECT count(DISTINCT a) AS n, sum(x) FILTER (WHERE a > 1) AS fs, first(x) IGNORE NULLS AS f, "
    "percentile_cont(0.5) WITHIN GROUP (ORDER BY x) AS med, percentile_approx(x, 0.5) AS pa, "
    "collect_list(a) AS cl, approx_count_distinct(a) AS acd, stddev(x) AS sd, max_by(a, x) AS mb FROM t",
    "SELECT a, sum(b) AS s FROM t GROUP BY ROLLUP (a)",
    "SELECT a, sum(b) AS s FROM t GROUP BY GROUPING SETS ((a), ())",
    "SELECT sha2(s, 256) AS h, md5(s) AS m, hash(a) AS hh, xxhash64(a) AS x, "
    "get_json_object(s, '$.a') AS j, from_json(s, 'a INT') AS fj, to_json(struct(a)) AS tj FROM t",
    "SELECT rand() AS r, uuid() AS u, monotonically_increasing_id() AS m FROM t",
    "SELECT /*+ BROADCAST(u) */ t.a FROM t JOIN u ON t.a = u.a",
    "SELECT * FROM t JOIN (VALUES (1, 'a'), (2, 'b')) AS v(k, s) ON t.k = v.k",
    "SELECT 'a\\'b' AS s, `weird col` AS w FROM `T`",
    "SELECT X'AB' AS bin, 1.5BD AS dec, 1e3 AS dbl, TRUE AS yes FROM t",
]


@pytest.mark.parametrize("sql", LEGITIMATE)
def test_common_queries_pass(sql: str) -> None:
    assert analyze_query(sql, extra_functions=()).base_tables


def test_operators_extend_the_list_by_name() -> None:
    sql = "SELECT my_udf(x) AS y, Other_Fn(x) AS z FROM t"
    with pytest.raises(InvalidQueryError, match="my_udf"):
        analyze_query(sql, extra_functions=())
    assert analyze_query(sql, extra_functions=("MY_UDF", "other_fn")).base_tables == ("t",)


def test_mvs_allowed_functions_reaches_settings_and_analyze_query(monkeypatch: pytest.MonkeyPatch) -> None:
    settings_ = Settings.from_env({"MVS_ALLOWED_FUNCTIONS": " My_Udf, ,other "})
    assert settings_.allowed_functions == ("my_udf", "other")
    monkeypatch.setenv("MVS_ALLOWED_FUNCTIONS", "my_udf")
    assert analyze_query("SELECT my_udf(x) AS y FROM t").base_tables == ("t",)  # the env, by default
    monkeypatch.delenv("MVS_ALLOWED_FUNCTIONS")
    with pytest.raises(InvalidQueryError, match="my_udf"):
        analyze_query("SELECT my_udf(x) AS y FROM t")


def test_reflection_is_never_on_the_builtin_list() -> None:
    assert not REFLECTION & BUILTIN_FUNCTIONS


@given(
    st.text(alphabet=string.ascii_lowercase + "_", min_size=1, max_size=20).filter(
        # A keyword before "(" is syntax, not a call (`SELECT distinct(a)` is SELECT DISTINCT (a)).
        lambda name: name not in BUILTIN_FUNCTIONS and name[0] != "_" and name.upper() not in SQL_KEYWORDS
    )
)
@settings(max_examples=200, deadline=None)
def test_any_function_not_on_the_list_is_refused(name: str) -> None:
    sql = f"SELECT {name}(a) AS v FROM t"
    try:
        analyze_query(sql, extra_functions=())
    except InvalidQueryError:
        return  # refused: by name, or because sqlglot reads the name as syntax it refuses
    raise AssertionError(f"{sql!r} was accepted although {name} is not an allowed function")


def _ctx() -> Context:
    return Context(now_ms=1_000, coordinator_epoch=7, table_exists=lambda t: t in {"sales", "t"})


@pytest.mark.parametrize(("sql", "message"), ESCAPES[:14])
def test_a_raw_create_event_with_an_escape_never_reaches_a_worker(sql: str, message: str) -> None:
    """A producer other than `mvs sql` writes the event: the coordinator refuses it (1001) and sends
    no command to any worker."""
    event: dict[str, Any] = copy.deepcopy(
        parse_statement("CREATE MATERIALIZED VIEW m AS SELECT id FROM sales")
    )
    event["mv"]["query"] = sql
    event["sql"] = f"CREATE MATERIALIZED VIEW m AS {sql}"
    tasks: dict[str, Any] = {}
    effects = handle_ddl(event, tasks, _ctx())
    assert effects.results and effects.results[0]["accepted"] is False
    assert effects.results[0]["error"]["code"] == 1001
    assert message in effects.results[0]["error"]["message"]
    assert not effects.manager
    assert not [v for v in effects.catalog.values() if v is not None and v.get("state") != "FAILED"]


def test_a_query_longer_than_the_bound_is_refused_before_parsing() -> None:
    from workers.ddl.query import MAX_QUERY_CHARS

    padding = " " * MAX_QUERY_CHARS
    with pytest.raises(InvalidQueryError, match="at most 65536"):
        analyze_query(f"SELECT id FROM sales{padding}")
