"""The worker's own guard on real Spark + Delta: escapes are refused (1001, permanent) even when the
coordinator is bypassed, a refresh means exactly what Spark reads in the user's text, and the worker
session has the settings that close escapes."""

from __future__ import annotations

import uuid
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from tests.support.run_requests import run_request
from workers import demo_tables as tables
from workers import warehouse
from workers.config import Settings
from workers.ddl.allowlist import BUILTIN_FUNCTIONS
from workers.ddl.query import analyze_query
from workers.jobs import complete as refresh
from workers.jobs.changes import mvlog
from workers.jobs.fast.refresh import fast_refresh_blocker, refresh_incremental
from workers.jobs.spark import guard
from workers.jobs.spark.guard import QueryRefused, check_expression, check_parsed, guarded_sql
from workers.jobs.spark.session import run_session

pytestmark = pytest.mark.integration

SCHEMA = "id long, amount long, sales string, arr array<long>"
ROWS = [
    {"id": 1, "amount": 1, "sales": "a'b", "arr": [1, 2]},
    {"id": 2, "amount": 2, "sales": "x", "arr": [3]},
    {"id": 3, "amount": 3, "sales": "a\\b", "arr": []},
    {"id": 4, "amount": 4, "sales": "Y", "arr": [4, 5, 6]},
]


def _refresh(
    spark: Any, s: Settings, query: str, *, mv: str = "mv", bases: tuple[str, ...] = ("sales",)
) -> Any:
    """A complete refresh of a query the coordinator never saw (not analysed)."""
    request = run_request(s, mv, query, job_group=f"{mv}-r1", bases=bases)
    return refresh.refresh_complete(spark, s, request)


@pytest.fixture
def sales(spark: Any, local_settings: Settings) -> Settings:
    tables.create_table(spark, local_settings, "sales", ROWS, SCHEMA)
    return local_settings


ESCAPES = [
    (
        "SELECT reflect('java.lang.Runtime', 'getRuntime') AS r FROM sales",
        "function reflect() is not allowed",
    ),
    (
        "SELECT java_method('java.lang.System', 'getenv') AS r FROM sales",
        "function java_method() is not allowed",
    ),
    ("SELECT try_reflect('java.lang.Runtime', 'getRuntime') AS r FROM sales", "function try_reflect()"),
    ("SELECT TRANSFORM(id) USING 'cat' AS (b) FROM sales", "script transforms (TRANSFORM ... USING)"),
    ("SELECT * FROM parquet.`/etc`", "reading files by path"),
    ("SELECT * FROM range(10)", "table-valued functions are not allowed"),
    ("SELECT id FROM sales LATERAL VIEW explode(arr) x AS y", "LATERAL VIEW is not allowed"),
    ("SELECT * FROM sales, LATERAL explode(sales.arr)", "LATERAL subqueries and lateral table functions"),
    ("SELECT my_udf(id) AS v FROM sales", "function my_udf() is not allowed"),
    ("SELECT * FROM other_catalog.db.sales", "qualified table name other_catalog.db.sales is not allowed"),
    ("SELECT * FROM sales VERSION AS OF 0", "time travel"),
    ("SELECT * FROM IDENTIFIER('sales')", "IDENTIFIER(...) is not allowed"),
    (
        "SELECT id FROM sales WHERE id IN (SELECT id FROM secrets)",
        "reads secrets, which is not one of its base",
    ),
    (
        "WITH c AS (SELECT reflect('java.lang.Runtime', 'getRuntime') AS r FROM sales) SELECT * FROM c",
        "function reflect() is not allowed",
    ),
    (
        "SELECT id, rank() OVER w AS r FROM sales "
        "WINDOW w AS (PARTITION BY java_method('java.lang.System', 'getenv') ORDER BY id)",
        "function java_method() is not allowed",
    ),
    ("SELECT " + "(" * 3000 + "id" + ")" * 3000 + " FROM sales", "nests too deeply"),
]


@pytest.mark.parametrize(("query", "message"), ESCAPES)
def test_worker_refuses_escapes_without_the_coordinator(
    spark: Any, sales: Settings, query: str, message: str
) -> None:
    with pytest.raises(QueryRefused) as caught:
        _refresh(spark, sales, query)
    assert (caught.value.code, caught.value.retryable) == (1001, False)
    assert message in str(caught.value)
    assert not warehouse.table_exists(sales, "mv")


def test_a_query_reading_the_mv_itself_is_refused(spark: Any, sales: Settings) -> None:
    assert _refresh(spark, sales, "SELECT id FROM sales", mv="mv_self").applied
    with pytest.raises(QueryRefused, match="reads the MV's own table mv_self") as caught:
        _refresh(spark, sales, "SELECT id FROM mv_self", mv="mv_self", bases=("mv_self",))
    assert caught.value.code == 1001
    with pytest.raises(QueryRefused, match="reads the MV's own table mv_self"):
        _refresh(spark, sales, "SELECT s.id FROM sales s JOIN mv_self m ON s.id = m.id", mv="mv_self")


def test_fast_refresh_path_is_guarded_too(spark: Any, sales: Settings) -> None:
    """A record whose plan does not match its query (forged, or from a buggy coordinator): the
    incremental path runs the query through the same guard before using it."""
    mvlog.create_mv_log(spark, sales, "sales")
    assert _refresh(spark, sales, "SELECT id AS r FROM sales").applied
    tables.append(spark, sales, "sales", ROWS[:1])
    forged = run_request(sales, "mv", "SELECT id AS r FROM sales", mode="FORCE").plan
    assert forged.fast_refresh is not None
    request = run_request(
        sales,
        "mv",
        "SELECT reflect('java.lang.Runtime', 'getRuntime') AS r FROM sales",
        mode="FORCE",
        bases=["sales"],
        plan=forged,
        run="r2",
    )
    with pytest.raises(QueryRefused, match="function reflect"):
        fast_refresh_blocker(spark, sales, request)
    with pytest.raises(QueryRefused, match="function reflect"):
        refresh_incremental(spark, sales, request)


# Texts that sqlglot (re-rendering) and Spark could read differently: the MV must hold what Spark
# computes for the text itself over the pinned table.
SAME_MEANING = [
    # sqlglot renders this as PERCENTILE_APPROX: 2 instead of 2.5 over 1..4
    "SELECT percentile_cont(0.5) WITHIN GROUP (ORDER BY amount) AS med FROM sales",
    # a column named like its table, and the table twice under aliases
    "SELECT sales.sales AS s, t.amount FROM sales JOIN sales t ON sales.id = t.id",
    "SELECT s.id, t.sales FROM sales s JOIN sales t ON s.id = t.id + 1",
    # string escapes and backquoted, differently cased names
    "SELECT id FROM SALES WHERE `Sales` = 'a\\'b' OR `SALES` = 'a\\\\b'",
    "SELECT `id` AS `The_Id`, upper(Sales) AS u FROM `sales`",
    "SELECT id, explode(arr) AS e FROM sales",
    "SELECT id, amount / 3 AS third, 7 DIV 2 AS q, 'it''s' AS lit FROM sales",
]


@pytest.mark.parametrize("query", SAME_MEANING)
def test_refresh_holds_what_spark_reads_in_the_text(spark: Any, sales: Settings, query: str) -> None:
    result = _refresh(spark, sales, query)
    assert result.applied and result.watermark_after == {"sales": 0}
    session = run_session(spark)  # the text, run directly by Spark over the same pinned table
    pinned = session.read.format("delta").option("versionAsOf", 0).load(warehouse.table_path(sales, "sales"))
    pinned.createTempView("sales")
    expected = sorted((tuple(r) for r in session.sql(query).collect()), key=repr)
    got = sorted((tuple(r.values()) for r in tables.read_table(spark, sales, "mv")), key=repr)
    assert got == expected and got


def test_percentile_cont_is_not_rewritten(spark: Any, sales: Settings) -> None:
    _refresh(spark, sales, SAME_MEANING[0])
    assert tables.read_table(spark, sales, "mv") == [{"med": 2.5}]


def test_operator_allowed_udf_runs_and_others_do_not(spark: Any, sales: Settings) -> None:
    spark.udf.register("mvs_test_double", lambda v: None if v is None else v * 2, "long")
    query = "SELECT id, mvs_test_double(amount) AS doubled FROM sales"
    with pytest.raises(QueryRefused, match=r"mvs_test_double\(\) is not allowed"):
        _refresh(spark, sales, query)
    allowed = replace(sales, allowed_functions=("mvs_test_double",))
    assert _refresh(spark, allowed, query).applied
    assert sorted(r["doubled"] for r in tables.read_table(spark, allowed, "mv")) == [2, 4, 6, 8]


def test_run_sessions_cannot_read_files_by_path(spark: Any, sales: Settings, tmp_path: Path) -> None:
    assert spark.conf.get("spark.sql.variable.substitute") == "false"
    session = run_session(spark)  # where every MV query runs
    assert session.conf.get("spark.sql.runSQLOnFiles") == "false"
    path = warehouse.table_path(sales, "sales")
    with pytest.raises(Exception, match="(?i)table or view|cannot be found|not found"):
        session.sql(f"SELECT * FROM delta.`{path}`").collect()


def test_runs_leave_no_views_behind(spark: Any, sales: Settings) -> None:
    before = {t.name for t in spark.catalog.listTables()}
    assert _refresh(spark, sales, "SELECT id FROM sales").applied
    with pytest.raises(QueryRefused):
        _refresh(spark, sales, "SELECT my_udf(id) AS v FROM sales")
    assert {t.name for t in spark.catalog.listTables()} == before
    assert "sales" not in before


def test_an_accepted_parse_is_remembered_only_for_its_tables_mv_and_functions(spark: Any) -> None:
    # check_parsed skips the walk of a text it accepted before, but only under the same key.
    text = "SELECT my_udf(id) AS v FROM sales"
    check_parsed(spark, text, tables=["sales"], mv_name="mv", extra_functions=["my_udf"])
    check_parsed(spark, text, tables=["sales"], mv_name="mv", extra_functions=["my_udf"])
    with pytest.raises(QueryRefused, match="my_udf"):
        check_parsed(spark, text, tables=["sales"], mv_name="mv")
    with pytest.raises(QueryRefused, match="reads sales, which is not one of its base tables"):
        check_parsed(spark, text, tables=["other"], mv_name="mv", extra_functions=["my_udf"])
    with pytest.raises(QueryRefused, match="reads the MV's own table sales"):
        check_parsed(spark, text, tables=["sales"], mv_name="sales", extra_functions=["my_udf"])


def test_an_accepted_expression_is_remembered_only_for_its_functions(
    spark: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A FAST run checks its WHERE and aggregate arguments on their own, every run: walked once.
    walks: list[str] = []
    walk = guard._check_expression  # noqa: SLF001 - counted, not replaced
    monkeypatch.setattr(guard, "_check_expression", lambda s, t, n: walks.append(t) or walk(s, t, n))
    text = f"my_udf(id) > {uuid.uuid4().int % 1000}"  # a text no other test checked
    for _ in range(3):
        check_expression(spark, text, extra_functions=["my_udf"])
    assert len(walks) == 1
    with pytest.raises(QueryRefused, match="my_udf"):
        check_expression(spark, text)  # not remembered for other functions
    with pytest.raises(QueryRefused, match="my_udf"):
        check_expression(spark, text)  # nor a refusal remembered as accepted
    assert len(walks) == 3


def test_an_analyzed_plan_is_walked_once_per_text_views_and_functions(
    spark: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    walks: list[str] = []
    walk = guard._check_analyzed  # noqa: SLF001 - counted, not replaced
    monkeypatch.setattr(guard, "_check_analyzed", lambda s, f, t, n: walks.append("walk") or walk(s, f, t, n))
    text = f"SELECT lower(name) AS n_{uuid.uuid4().hex} FROM people"  # a text no other test checked

    def people(session: Any) -> Any:
        session.createDataFrame([("Ann",)], "name string").createOrReplaceTempView("people")
        return session

    run = people(run_session(spark))
    for _ in range(3):
        assert guarded_sql(run, text, tables=["people"], mv_name="mv").collect()[0][0] == "ann"
    assert len(walks) == 1  # the run's later checks of the same text over the same views are remembered
    assert guarded_sql(people(run_session(spark)), text, tables=["people"], mv_name="mv").collect()
    assert len(walks) == 1  # and the next run's
    assert guarded_sql(run, text.replace("lower", "upper"), tables=["people"], mv_name="mv").collect()
    assert len(walks) == 2
    assert guarded_sql(run, text, tables=["people", "other"], mv_name="mv").collect()
    assert len(walks) == 3  # other views
    # Where a name resolves otherwise, the text is walked again: ``other`` a temp view now (before: a
    # catalog table would have been read under that name), a function registered since.
    again = people(run_session(spark))
    again.createDataFrame([(1,)], "id int").createOrReplaceTempView("other")
    assert guarded_sql(again, text, tables=["people", "other"], mv_name="mv").collect()
    assert len(walks) == 4
    probed = people(run_session(spark))
    probed.udf.register("mvs_guard_probe", lambda v: v, "string")
    for _ in range(2):
        assert guarded_sql(probed, text, tables=["people"], mv_name="mv").collect()
    assert len(walks) == 5


def test_every_allowed_name_is_a_spark_builtin(spark: Any) -> None:
    registry = spark._jsparkSession.sessionState().functionRegistry()
    names: set[str] = set()
    iterator = registry.listFunction().iterator()
    while iterator.hasNext():
        names.add(str(iterator.next().funcName()).lower())
    assert BUILTIN_FUNCTIONS - names == set()
    assert not {"reflect", "java_method", "try_reflect"} & BUILTIN_FUNCTIONS


def test_fast_refresh_applies_the_where_as_spark_reads_it(spark: Any, local_settings: Settings) -> None:
    """The incremental path filters change rows with the user's own WHERE text (qualified by the
    table's alias, with quote-doubling Spark reads as adjacent literals: 'it''s' is 'its')."""
    s = local_settings
    row = {"arr": []}
    tables.create_table(
        spark,
        s,
        "sales",
        [{**row, "id": 1, "amount": 1, "sales": "its"}, {**row, "id": 2, "amount": 2, "sales": "it's"}],
        SCHEMA,
    )
    mvlog.create_mv_log(spark, s, "sales")
    query = (
        "SELECT sales, count(*) AS n, sum(amount) AS total FROM sales s "
        "WHERE s.sales <> 'it''s' AND s.amount > 0 GROUP BY sales"
    )
    plan = analyze_query(query).fast_refresh
    assert plan is not None and plan.where == "s.sales <> 'it''s' AND s.amount > 0"
    assert refresh.refresh_complete(spark, s, run_request(s, "mv", query, mode="FORCE")).applied
    tables.append(
        spark,
        s,
        "sales",
        [{**row, "id": 3, "amount": 3, "sales": "its"}, {**row, "id": 4, "amount": 4, "sales": "it's"}],
    )
    request = run_request(s, "mv", query, mode="FORCE", run="r2")
    assert fast_refresh_blocker(spark, s, request) is None
    result = refresh_incremental(spark, s, request)
    assert result.applied and result.message.startswith("incremental:"), result.message
    session = run_session(spark)
    version = result.watermark_after["sales"]
    pinned = (
        session.read.format("delta").option("versionAsOf", version).load(warehouse.table_path(s, "sales"))
    )
    pinned.createTempView("sales")
    expected = sorted(tuple(r) for r in session.sql(query).collect())
    assert (
        sorted(tuple(r.values()) for r in tables.read_table(spark, s, "mv")) == expected == [("it's", 2, 6)]
    )
