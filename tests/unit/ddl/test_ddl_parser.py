"""The `mvs sql` statement grammar → DdlEvent dicts (workers.ddl.parser)."""

from __future__ import annotations

from typing import Any

import pytest

from workers.ddl import DdlError, DdlSyntaxError, InvalidQueryError, apply_alter, parse_statement

QUERY = "SELECT region, sum(amount) AS total FROM sales GROUP BY region"


def parse(sql: str) -> dict[str, Any]:
    return parse_statement(sql, now_ms=1_700_000_000_000, event_id="ev1")


def syntax_error(sql: str) -> DdlSyntaxError:
    with pytest.raises(DdlSyntaxError) as caught:
        parse(sql)
    return caught.value


# -- the envelope ---------------------------------------------------------------------------------


def test_example_from_the_brief() -> None:
    sql = f"CREATE MATERIALIZED VIEW sales_by_region REFRESH COMPLETE EVERY 30 SECONDS AS {QUERY}"
    event = parse_statement(sql, issued_by="alice", now_ms=42, event_id="abc")
    assert event == {
        "schema_version": 1,
        "event_id": "abc",
        "issued_at": 42,
        "issued_by": "alice",
        "action": "CREATE_MV",
        "name": "sales_by_region",
        "mv": {
            "query": QUERY,
            "refresh_mode": "COMPLETE",
            "trigger": {"kind": "EVERY", "interval_ms": 30_000},
            "base_tables": ["sales"],
        },
        "mv_log": None,
        "sql": sql,
        "cascade": None,
    }


def test_generated_event_id_and_time() -> None:
    first = parse_statement("DROP MATERIALIZED VIEW v")
    second = parse_statement("DROP MATERIALIZED VIEW v")
    assert len(first["event_id"]) == 32 and first["event_id"] != second["event_id"]
    assert int(first["event_id"], 16) >= 0
    assert first["issued_at"] > 1_600_000_000_000
    assert first["issued_by"] == "mvs"


# -- CREATE MATERIALIZED VIEW -----------------------------------------------------------------------


def test_create_defaults() -> None:
    event = parse(f"create materialized view v as {QUERY};")
    assert event["mv"] == {
        "query": QUERY,
        "refresh_mode": "FORCE",
        "trigger": {"kind": "EVERY", "interval_ms": 60_000},
        "base_tables": ["sales"],
    }
    assert event["sql"] == f"create materialized view v as {QUERY};"


@pytest.mark.parametrize(
    ("clauses", "mode", "trigger"),
    [
        ("REFRESH COMPLETE", "COMPLETE", {"kind": "EVERY", "interval_ms": 60_000}),
        ("REFRESH FAST", "FAST", {"kind": "EVERY", "interval_ms": 60_000}),
        ("refresh force", "FORCE", {"kind": "EVERY", "interval_ms": 60_000}),
        ("EVERY 5 MINUTES", "FORCE", {"kind": "EVERY", "interval_ms": 300_000}),
        ("REFRESH EVERY 1 SECOND", "FORCE", {"kind": "EVERY", "interval_ms": 1_000}),
        ("REFRESH FAST ON CHANGE", "FAST", {"kind": "ON_CHANGE", "interval_ms": None}),
        ("ON DEMAND", "FORCE", {"kind": "ON_DEMAND", "interval_ms": None}),
        ("REFRESH COMPLETE ON DEMAND", "COMPLETE", {"kind": "ON_DEMAND", "interval_ms": None}),
        ("TARGET LAG '30 seconds'", "FORCE", {"kind": "TARGET_LAG", "interval_ms": 30_000}),
        ("TARGET LAG 2 HOURS", "FORCE", {"kind": "TARGET_LAG", "interval_ms": 7_200_000}),
        ("REFRESH COMPLETE EVERY (INTERVAL 1 DAY)", "COMPLETE", {"kind": "EVERY", "interval_ms": 86_400_000}),
        ("EVERY INTERVAL '3' HOUR", "FORCE", {"kind": "EVERY", "interval_ms": 10_800_000}),
        ("Refresh Complete Every 30 Seconds", "COMPLETE", {"kind": "EVERY", "interval_ms": 30_000}),
    ],
)
def test_create_refresh_clauses(clauses: str, mode: str, trigger: dict[str, Any]) -> None:
    event = parse(f"CREATE MATERIALIZED VIEW v {clauses} AS {QUERY}")
    assert event["action"] == "CREATE_MV"
    assert event["mv"]["refresh_mode"] == mode
    assert event["mv"]["trigger"] == trigger


@pytest.mark.parametrize(
    ("unit", "ms"),
    [
        ("SECOND", 1_000),
        ("seconds", 1_000),
        ("MINUTE", 60_000),
        ("Minutes", 60_000),
        ("hour", 3_600_000),
        ("HOURS", 3_600_000),
        ("day", 86_400_000),
        ("DAYS", 86_400_000),
    ],
)
def test_units(unit: str, ms: int) -> None:
    event = parse(f"CREATE MATERIALIZED VIEW v EVERY 2 {unit} AS {QUERY}")
    assert event["mv"]["trigger"]["interval_ms"] == 2 * ms


def test_names_are_lower_cased_and_may_be_backquoted() -> None:
    assert parse(f"CREATE MATERIALIZED VIEW Sales_By_Region AS {QUERY}")["name"] == "sales_by_region"
    assert parse(f"CREATE MATERIALIZED VIEW `Refresh` AS {QUERY}")["name"] == "refresh"
    assert parse("DROP MATERIALIZED VIEW `_V1`")["name"] == "_v1"


def test_query_keeps_its_text_and_multiline_layout() -> None:
    sql = "CREATE MATERIALIZED VIEW v\n  REFRESH COMPLETE\nAS\n  SELECT a,\n         b\n  FROM t  ;  \n"
    event = parse(sql)
    assert event["mv"]["query"] == "SELECT a,\n         b\n  FROM t"
    assert event["mv"]["base_tables"] == ["t"]
    assert event["sql"] == sql


def test_base_tables_are_sorted_and_unique() -> None:
    event = parse(
        "CREATE MATERIALIZED VIEW v AS SELECT * FROM zeta z JOIN Alpha a ON z.k = a.k JOIN zeta y ON 1=1"
    )
    assert event["mv"]["base_tables"] == ["alpha", "zeta"]


def test_comments_in_the_head_are_ignored() -> None:
    event = parse(f"-- nightly\nCREATE /* fast */ MATERIALIZED VIEW v REFRESH COMPLETE AS {QUERY}")
    assert event["name"] == "v" and event["mv"]["refresh_mode"] == "COMPLETE"


def test_mv_called_log_is_not_an_mv_log() -> None:
    assert parse(f"CREATE MATERIALIZED VIEW log AS {QUERY}")["action"] == "CREATE_MV"
    event = parse(f"CREATE MATERIALIZED VIEW log ON CHANGE AS {QUERY}")
    assert (event["action"], event["name"]) == ("CREATE_MV", "log")
    assert parse("DROP MATERIALIZED VIEW log")["action"] == "DROP_MV"


def test_fast_refresh_is_checked_at_create() -> None:
    error = syntax_error(
        "CREATE MATERIALIZED VIEW v REFRESH FAST AS SELECT a FROM t LEFT JOIN u ON t.k = u.k"
    )
    assert (
        "REFRESH FAST is not possible for this query: outer joins (LEFT JOIN) are not supported"
        in error.message
    )
    # The error points at the construct it names: the table the outer join reads.
    assert error.column == len("CREATE MATERIALIZED VIEW v REFRESH FAST AS SELECT a FROM t LEFT JOIN ") + 1
    # FORCE falls back to complete refresh, so the same query is fine there.
    assert (
        parse("CREATE MATERIALIZED VIEW v AS SELECT a FROM t LEFT JOIN u ON t.k = u.k")["action"]
        == "CREATE_MV"
    )


# -- other statements -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("sql", "action", "name"),
    [
        ("DROP MATERIALIZED VIEW v", "DROP_MV", "v"),
        ("drop materialized view V;", "DROP_MV", "v"),
        ("ALTER MATERIALIZED VIEW v PAUSE", "PAUSE", "v"),
        ("alter materialized view v resume;", "RESUME", "v"),
        ("REFRESH MATERIALIZED VIEW v", "REFRESH", "v"),
        ("CANCEL REFRESH MATERIALIZED VIEW v", "CANCEL", "v"),
        ("ALTER MATERIALIZED VIEW v CANCEL", "CANCEL", "v"),
        ("ALTER MATERIALIZED VIEW v CANCEL REFRESH;", "CANCEL", "v"),
        ("DROP MATERIALIZED VIEW LOG ON Sales", "DROP_MV_LOG", "sales"),
    ],
)
def test_simple_statements(sql: str, action: str, name: str) -> None:
    event = parse(sql)
    assert (event["action"], event["name"], event["mv"], event["mv_log"]) == (action, name, None, None)
    assert event["sql"] == sql


@pytest.mark.parametrize(
    ("clauses", "purge_ms"),
    [
        ("", 60_000),
        (" PURGE EVERY 10 MINUTES", 600_000),
        (" purge every 1 hour;", 3_600_000),
        (" PURGE REPEAT INTERVAL 5 DAY", 5 * 86_400_000),
        (" PURGE REPEAT INTERVAL '5' DAY", 5 * 86_400_000),
        (" PURGE EVERY '2 hours'", 7_200_000),
    ],
)
def test_create_mv_log(clauses: str, purge_ms: int) -> None:
    event = parse(f"CREATE MATERIALIZED VIEW LOG ON Sales{clauses}")
    assert event["action"] == "CREATE_MV_LOG"
    assert event["name"] == "sales"
    assert event["mv"] is None
    assert event["mv_log"] == {"base_table": "sales", "purge_interval_ms": purge_ms}


@pytest.mark.parametrize(
    ("clauses", "mode", "trigger"),
    [
        ("REFRESH COMPLETE", "COMPLETE", {"kind": "EVERY", "interval_ms": 60_000}),
        ("REFRESH FAST EVERY 10 SECONDS", "FAST", {"kind": "EVERY", "interval_ms": 10_000}),
        ("EVERY 2 HOURS", "FORCE", {"kind": "EVERY", "interval_ms": 7_200_000}),
        ("ON DEMAND", "FORCE", {"kind": "ON_DEMAND", "interval_ms": None}),
        ("REFRESH ON CHANGE", "FORCE", {"kind": "ON_CHANGE", "interval_ms": None}),
        ("TARGET LAG '1 minute'", "FORCE", {"kind": "TARGET_LAG", "interval_ms": 60_000}),
    ],
)
def test_alter_refresh(clauses: str, mode: str, trigger: dict[str, Any]) -> None:
    event = parse(f"ALTER MATERIALIZED VIEW v {clauses}")
    assert event["action"] == "ALTER_MV"
    # "" / [] say "query unchanged"; unmentioned mode/trigger hold defaults (see apply_alter).
    assert event["mv"] == {"query": "", "refresh_mode": mode, "trigger": trigger, "base_tables": []}


# -- apply_alter ------------------------------------------------------------------------------------

CURRENT = {
    "query": QUERY,
    "refresh_mode": "COMPLETE",
    "trigger": {"kind": "ON_CHANGE", "interval_ms": None},
    "base_tables": ["sales"],
}


def test_apply_alter_changes_only_what_the_statement_says() -> None:
    only_trigger = apply_alter(CURRENT, parse("ALTER MATERIALIZED VIEW v EVERY 5 MINUTES"))
    assert only_trigger == {**CURRENT, "trigger": {"kind": "EVERY", "interval_ms": 300_000}}
    only_mode = apply_alter(CURRENT, parse("ALTER MATERIALIZED VIEW v REFRESH FORCE"))
    assert only_mode == {**CURRENT, "refresh_mode": "FORCE"}
    both = apply_alter(CURRENT, parse("ALTER MATERIALIZED VIEW v REFRESH FAST ON DEMAND"))
    assert both == {**CURRENT, "refresh_mode": "FAST", "trigger": {"kind": "ON_DEMAND", "interval_ms": None}}


def test_apply_alter_without_sql_takes_the_spec_wholesale() -> None:
    event = {**parse("ALTER MATERIALIZED VIEW v EVERY 5 MINUTES"), "sql": None}
    assert apply_alter(CURRENT, event)["refresh_mode"] == "FORCE"


def test_apply_alter_refuses_fast_for_an_ineligible_query() -> None:
    current = {**CURRENT, "query": "SELECT DISTINCT region FROM sales"}
    with pytest.raises(InvalidQueryError, match="REFRESH FAST is not possible for v: DISTINCT"):
        apply_alter(current, parse("ALTER MATERIALIZED VIEW v REFRESH FAST"))
    with pytest.raises(ValueError, match="ALTER_MV"):
        apply_alter(CURRENT, parse("ALTER MATERIALIZED VIEW v PAUSE"))


# -- errors -----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("sql", "message", "column"),
    [
        ("", "empty statement; expected CREATE, ALTER, DROP, REFRESH or CANCEL", 1),
        ("   ;", "expected CREATE, ALTER, DROP, REFRESH or CANCEL, found ';'", 4),
        ("hello world", "expected CREATE, ALTER, DROP, REFRESH or CANCEL, found 'hello'", 1),
        ("CREATE VIEW v AS SELECT a FROM t", "expected MATERIALIZED after CREATE, found 'VIEW'", 8),
        ("CREATE MATERIALIZED TABLE v", "expected VIEW after CREATE MATERIALIZED, found 'TABLE'", 21),
        (f"CREATE MATERIALIZED VIEW v {QUERY}", "missing AS before the query (found SELECT)", 28),
        (f"CREATE MATERIALIZED VIEW v REFRESH COMPLETE {QUERY}", "missing AS before the query", 45),
        (f"CREATE MATERIALIZED VIEW v EVRY 5 MINUTES AS {QUERY}", "expected REFRESH, AS or a schedule", 28),
        (
            f"CREATE MATERIALIZED VIEW v EVERY 5 MINUTES REFRESH AS {QUERY}",
            "expected AS, found 'REFRESH'",
            44,
        ),
        ("CREATE MATERIALIZED VIEW v AS", "expected a query after AS", 30),
        ("CREATE MATERIALIZED VIEW v AS ;", "expected a query after AS", 32),
        (
            f"CREATE MATERIALIZED VIEW v REFRESH AS {QUERY}",
            "expected COMPLETE, FAST, FORCE or a schedule",
            36,
        ),
        (f"CREATE MATERIALIZED VIEW v REFRESH SLOW AS {QUERY}", "after REFRESH, found 'SLOW'", 36),
        (
            f"CREATE MATERIALIZED VIEW v EVERY 5 WEEKS AS {QUERY}",
            "unknown interval unit 'WEEKS'; use SECOND(S)",
            36,
        ),
        (f"CREATE MATERIALIZED VIEW v EVERY 5 AS {QUERY}", "unknown interval unit 'AS'", 36),
        (f"CREATE MATERIALIZED VIEW v EVERY 0 SECONDS AS {QUERY}", "must be greater than zero", 34),
        (f"CREATE MATERIALIZED VIEW v EVERY -1 MINUTE AS {QUERY}", "must be a positive whole number", 34),
        (f"CREATE MATERIALIZED VIEW v EVERY 1.5 HOURS AS {QUERY}", "must be a whole number, found 1.5", 34),
        (f"CREATE MATERIALIZED VIEW v EVERY MINUTE AS {QUERY}", "expected a number after EVERY", 34),
        (f"CREATE MATERIALIZED VIEW v TARGET LAG '0 minutes' AS {QUERY}", "greater than zero", 40),
        (f"CREATE MATERIALIZED VIEW v TARGET LAG '5 minutes please' AS {QUERY}", "unexpected 'please'", 50),
        (
            f"CREATE MATERIALIZED VIEW v TARGET 5 MINUTES AS {QUERY}",
            "expected LAG after TARGET, found '5'",
            35,
        ),
        (f"CREATE MATERIALIZED VIEW v EVERY (5 MINUTES AS {QUERY}", "expected ) after the interval", 45),
        (f"CREATE MATERIALIZED VIEW v EVERY 999999999999999 DAYS AS {QUERY}", "interval is too large", 34),
        (f"CREATE MATERIALIZED VIEW v ON COMMIT AS {QUERY}", "ON COMMIT is not supported; use ON CHANGE", 31),
        (f"CREATE MATERIALIZED VIEW v ON SUNDAY AS {QUERY}", "expected CHANGE or DEMAND after ON", 31),
        (f"CREATE MATERIALIZED VIEW v REFRESH START WITH now() AS {QUERY}", "START is not supported", 36),
        (f"CREATE MATERIALIZED VIEW IF NOT EXISTS v AS {QUERY}", "IF [NOT] EXISTS is not supported", 26),
        (f"CREATE MATERIALIZED VIEW AS {QUERY}", "found keyword AS; write it in backquotes", 26),
        (
            f"CREATE MATERIALIZED VIEW 1v AS {QUERY}",
            "invalid materialized view name '1v': names start with a letter",
            26,
        ),
        (f"CREATE MATERIALIZED VIEW `my-view` AS {QUERY}", "invalid materialized view name `my-view`", 26),
        (f"CREATE MATERIALIZED VIEW db.v AS {QUERY}", "qualified names (db.name) are not supported", 28),
        (f"CREATE MATERIALIZED VIEW `v AS {QUERY}", "unterminated backquoted name", 26),
        (f"CREATE MATERIALIZED VIEW v TARGET LAG '5 minutes AS {QUERY}", "unterminated string", 39),
        (f"CREATE MATERIALIZED VIEW sales__mlog AS {QUERY}", "reserved for MV logs", 26),
        ("CREATE MATERIALIZED VIEW sales AS SELECT a FROM sales", "cannot read from itself", 35),
        ("DROP MATERIALIZED VIEW", "expected a materialized view name, found end of statement", 23),
        ("DROP MATERIALIZED VIEW v CASCADE NOW", "unexpected 'NOW' after the end of the statement", 34),
        ("DROP MATERIALIZED VIEW LOG ON t CASCADE", "unexpected 'CASCADE' after the end", 33),
        ("DROP MATERIALIZED VIEW v; DROP MATERIALIZED VIEW w", "unexpected 'DROP' after the end", 27),
        ("DROP MATERIALIZED VIEW IF EXISTS v", "IF [NOT] EXISTS is not supported", 24),
        ("ALTER MATERIALIZED VIEW v", "expected REFRESH, a schedule", 26),
        ("ALTER MATERIALIZED VIEW v STOP", "PAUSE, RESUME or CANCEL after the view name, found 'STOP'", 27),
        (
            "ALTER MATERIALIZED VIEW v REFRESH",
            "expected COMPLETE, FAST, FORCE or a schedule after REFRESH",
            34,
        ),
        ("ALTER MATERIALIZED VIEW v PAUSE NOW", "unexpected 'NOW'", 33),
        ("ALTER MATERIALIZED VIEW LOG ON t PURGE EVERY 1 DAY", "an MV log cannot be altered", 25),
        ("REFRESH MATERIALIZED VIEW", "expected a materialized view name", 26),
        ("REFRESH v", "expected MATERIALIZED after REFRESH", 9),
        ("CANCEL MATERIALIZED VIEW v", "expected REFRESH after CANCEL", 8),
        ("CREATE MATERIALIZED VIEW LOG ON", "expected a table name, found end of statement", 32),
        (
            "CREATE MATERIALIZED VIEW LOG ON t PURGE 5 DAYS",
            "expected EVERY or REPEAT INTERVAL after PURGE",
            41,
        ),
        ("CREATE MATERIALIZED VIEW LOG ON t PURGE REPEAT 5 DAYS", "expected INTERVAL after PURGE REPEAT", 48),
        ("CREATE MATERIALIZED VIEW LOG ON t PURGE EVERY 5 FORTNIGHTS", "unknown interval unit", 49),
        ("CREATE MATERIALIZED VIEW LOG ON t AS SELECT 1", "unexpected 'AS' after the end", 35),
        ("CREATE MATERIALIZED VIEW LOG ON t__mlog", "t__mlog is itself an MV log table", 33),
        ("CREATE MATERIALIZED VIEW x /* never closed", "unterminated /* comment", 28),
    ],
)
def test_syntax_errors(sql: str, message: str, column: int) -> None:
    error = syntax_error(sql)
    assert message in error.message
    assert error.column == column, str(error)
    assert error.line == 1
    assert str(error).endswith(f"(line 1, column {column})")
    assert isinstance(error, DdlError) and isinstance(error, ValueError)


@pytest.mark.parametrize(
    ("query", "message"),
    [
        ("SELECT 1", "query must read at least one table (SELECT ... FROM <table>)"),
        ("SELECT a FROM t; SELECT b FROM u", "query must be a single read-only SELECT; found 2 statements"),
        ("INSERT INTO t SELECT * FROM u", "query must be a single read-only SELECT; found INSERT"),
        ("DELETE FROM t WHERE a = 1", "query must be a single read-only SELECT; found DELETE"),
        ("SELECT a FROM t WHERE", "could not parse query: incomplete WHERE near 'WHERE'"),
    ],
)
def test_query_errors_surface_as_syntax_errors(query: str, message: str) -> None:
    error = syntax_error(f"CREATE MATERIALIZED VIEW v AS {query}")
    assert message in error.message
    assert isinstance(error.__cause__, InvalidQueryError)


def test_query_error_position_points_into_the_query() -> None:
    sql = "CREATE MATERIALIZED VIEW v AS\n  SELECT a\n  FROM t WHERE"
    error = syntax_error(sql)
    assert (error.line, error.column) == (3, 10)
    assert sql[error.position :] == "WHERE"


def test_mv_log_on_tables_named_like_trigger_words() -> None:
    assert parse("CREATE MATERIALIZED VIEW LOG ON `change`")["mv_log"]["base_table"] == "change"
    assert parse("DROP MATERIALIZED VIEW LOG ON change")["name"] == "change"


def test_trailing_comment_after_the_semicolon() -> None:
    assert parse("REFRESH MATERIALIZED VIEW v; -- now please")["action"] == "REFRESH"
