"""The coordinator's handlers against events any producer may write: names, specs, missing fields,
and errors inside a decision — every one gets exactly one answer, and a refusal writes nothing."""

from typing import Any

import pytest

from tests.support.coordinator_cases import CREATE, TABLES, apply, checked_ctx, mv_spec, raw_event, refusal
from workers.catalog.names import MAX_NAME_LENGTH
from workers.coordinator.handlers import Context, handle_ddl
from workers.records import Record


@pytest.mark.parametrize(
    ("name", "why"),
    [
        ("", "cannot be empty"),
        ("../etc", "invalid materialized view name"),
        ("a/b", "invalid materialized view name"),
        ("x" * 10_000, "10000 characters long; the limit is 128"),
        ("x" * 129, "the limit is 128"),
        ("vü", "invalid materialized view name"),
        ("1abc", "invalid materialized view name"),
        ("a.b", "invalid materialized view name"),
        ("By_Region", "use 'by_region'"),
        ("sales__mlog", "reserved for MV log tables"),
    ],
)
def test_raw_create_with_a_bad_name_is_refused_without_touching_storage(name: str, why: str) -> None:
    effects = handle_ddl(raw_event("CREATE_MV", name, mv=mv_spec()), {}, checked_ctx(TABLES))
    error = refusal(effects)
    assert error["code"] == 1001 and why in error["message"]
    assert len(error["message"]) < 400  # a 10 000-character name is not echoed whole


def test_the_longest_valid_name_is_accepted() -> None:
    name = "v" * MAX_NAME_LENGTH
    effects = handle_ddl(raw_event("CREATE_MV", name, mv=mv_spec()), {}, checked_ctx(TABLES))
    assert effects.results[0]["accepted"] and f"mv:{name}" in effects.catalog


def test_an_mv_named_like_a_base_table_or_mv_log_is_refused() -> None:
    refused = refusal(handle_ddl(raw_event("CREATE_MV", "sales", mv=mv_spec()), {}, checked_ctx(TABLES)))
    assert refused["code"] == 1001 and "a table named sales already exists" in refused["message"]
    # A base table whose folder went away but whose MV log task is still in the catalog.
    tasks: dict[str, Record] = {}
    apply("CREATE MATERIALIZED VIEW LOG ON orders", tasks)
    event = raw_event("CREATE_MV", "orders", mv=mv_spec())
    refused = refusal(handle_ddl(event, tasks, checked_ctx({"sales"})))
    assert "orders is a base table with an MV log" in refused["message"]


def test_an_mv_reading_itself_or_closing_a_cycle_is_refused() -> None:
    refused = refusal(
        handle_ddl(raw_event("CREATE_MV", "loop", mv=mv_spec("SELECT * FROM loop")), {}, checked_ctx(TABLES))
    )
    assert "cannot read from itself" in refused["message"]
    # a reads sales, b reads a (an MV over an MV is fine) — then a altered to read b closes a cycle.
    tasks: dict[str, Record] = {}
    tables = {*TABLES, "a", "b"}
    # Each MV's table exists once it refreshed: a's before b is created, b's before the ALTER.
    for name, query, existing in (
        ("a", "SELECT id FROM sales", TABLES),
        ("b", "SELECT id FROM a", TABLES | {"a"}),
    ):
        effects = handle_ddl(raw_event("CREATE_MV", name, mv=mv_spec(query)), tasks, checked_ctx(existing))
        assert effects.results[0]["accepted"], effects.results
        tasks.update(effects.catalog)  # type: ignore[arg-type]
    alter = raw_event("ALTER_MV", "a", mv=mv_spec("SELECT id FROM b"))
    refused = refusal(handle_ddl(alter, tasks, checked_ctx(tables)))
    assert refused["code"] == 1001 and "a → b → a" in refused["message"]
    assert tasks["mv:a"]["mv"]["base_tables"] == ["sales"]


@pytest.mark.parametrize(
    ("spec", "why"),
    [
        (mv_spec(interval_ms=0), "EVERY interval must be greater than zero"),
        (mv_spec(interval_ms=-5), "greater than zero"),
        (mv_spec(interval_ms=2**63 - 1), "longer than the limit of 366 days"),
        (mv_spec(kind="TARGET_LAG", interval_ms=None), "TARGET LAG needs an interval"),
        (mv_spec(kind="HOURLY"), "unknown trigger kind"),
        ({**mv_spec(), "refresh_mode": "SOMETIMES"}, "unknown refresh mode"),
        ({**mv_spec(), "refresh_mode": "FAST", "query": "SELECT DISTINCT id FROM sales"}, "REFRESH FAST"),
        (mv_spec(query=""), "has no query"),
        (mv_spec(query="DROP TABLE sales"), ""),
        (mv_spec(query="SELECT * FROM `a/b`"), "reading files by path"),
        ({"query": "SELECT id FROM sales"}, "unknown refresh mode"),
        ("not a record", "must be a record"),
    ],
)
def test_raw_mv_specs_are_checked_value_by_value(spec: Any, why: str) -> None:
    error = refusal(handle_ddl(raw_event("CREATE_MV", "v", mv=spec), {}, checked_ctx(TABLES)))
    assert error["code"] == 1001 and why in error["message"]


def test_on_change_and_on_demand_ignore_an_interval() -> None:
    event = raw_event("CREATE_MV", "v", mv=mv_spec(kind="ON_DEMAND", interval_ms=-1))
    effects = handle_ddl(event, {}, checked_ctx(TABLES))
    assert effects.catalog["mv:v"]["mv"]["trigger"] == {"kind": "ON_DEMAND", "interval_ms": None}  # type: ignore[index]


@pytest.mark.parametrize(
    ("mv_log", "why"),
    [
        ({"base_table": "orders", "purge_interval_ms": 1000}, "for table 'orders' but the event names sales"),
        ({"base_table": "sales", "purge_interval_ms": 0}, "PURGE interval must be greater than zero"),
        ({"base_table": "sales", "purge_interval_ms": 2**63 - 1}, "limit of 366 days"),
    ],
)
def test_raw_mv_log_specs_are_checked(mv_log: Record, why: str) -> None:
    error = refusal(handle_ddl(raw_event("CREATE_MV_LOG", "sales", mv_log=mv_log), {}, checked_ctx(TABLES)))
    assert why in error["message"]


@pytest.mark.parametrize("missing", ["event_id", "action", "name", "issued_by", "schema_version"])
def test_an_event_missing_a_field_gets_one_refusal(missing: str) -> None:
    event = raw_event("CREATE_MV", "v", mv=mv_spec())
    del event[missing]
    error = refusal(handle_ddl(event, {}, checked_ctx(TABLES)))
    assert error["code"] == (6001 if missing == "schema_version" else 1001)


def test_an_alter_with_missing_fields_is_refused() -> None:
    tasks: dict[str, Record] = {}
    apply(CREATE, tasks)
    for mv in ({"refresh_mode": "COMPLETE"}, {**mv_spec(query=""), "trigger": None}, None):
        error = refusal(handle_ddl(raw_event("ALTER_MV", "by_region", mv=mv), tasks, checked_ctx(TABLES)))
        assert error["code"] == 1001


def test_a_bug_inside_a_decision_becomes_an_internal_error_answer() -> None:
    def broken(name: str) -> bool:
        raise RuntimeError("boom")

    bad_ctx = Context(now_ms=1, coordinator_epoch=1, table_exists=broken)
    error = refusal(handle_ddl(raw_event("CREATE_MV", "v", mv=mv_spec()), {}, bad_ctx))
    assert error["message"].startswith("internal error: RuntimeError: boom")


def test_a_storage_error_looking_up_a_table_is_a_2001_answer() -> None:
    def unreachable(name: str) -> bool:
        raise PermissionError("denied")

    bad_ctx = Context(now_ms=1, coordinator_epoch=1, table_exists=unreachable)
    assert refusal(handle_ddl(raw_event("CREATE_MV", "v", mv=mv_spec()), {}, bad_ctx))["code"] == 2001
