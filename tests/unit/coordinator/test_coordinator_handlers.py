"""The coordinator's decisions as plain functions: DDL → catalog records, commands and results.

Events from raw producers (names, specs, missing fields): test_coordinator_raw_events.py."""

import pytest

from tests.support.coordinator_cases import CREATE, TABLES, apply, checked_ctx, ctx, refusal, worker_status
from workers.codec import get_codec
from workers.coordinator.handlers import (
    Context,
    handle_ddl,
    handle_heartbeat,
    recovered_tasks,
    restart_silent_tasks,
    safepoint_for,
)
from workers.ddl import parse_statement
from workers.records import Record


def test_create_mv_records_task_and_tells_a_manager() -> None:
    tasks: dict[str, Record] = {}
    effects = apply(CREATE, tasks)
    task = tasks["mv:by_region"]
    assert (task["state"], task["epoch"], task["mv"]["base_tables"]) == ("NORMAL", 1, ["sales"])
    assert [c["kind"] for c in effects.manager] == ["ADD_MAINTAINER"]
    assert effects.manager[0]["coordinator_epoch"] == 7
    assert effects.results[0]["accepted"] is True


def test_duplicate_create_is_refused_and_leaves_the_task_alone() -> None:
    tasks: dict[str, Record] = {}
    apply(CREATE, tasks)
    before = dict(tasks["mv:by_region"])
    effects = apply(CREATE, tasks)
    assert effects.results[0]["error"]["code"] == 1002
    assert not effects.catalog and not effects.manager
    assert tasks["mv:by_region"] == before


def test_a_refused_create_leaves_nothing_behind_and_the_name_stays_free() -> None:
    tasks: dict[str, Record] = {}
    effects = apply("CREATE MATERIALIZED VIEW v AS SELECT * FROM nowhere", tasks)
    assert effects.results[0]["accepted"] is False
    assert effects.results[0]["error"]["code"] == 1001 and "nowhere" in effects.results[0]["error"]["message"]
    assert not effects.catalog and not effects.manager and tasks == {}
    assert effects.results[0]["task_id"] == "mv:v"  # `mvs history mv:v` shows the refusal
    again = apply("CREATE MATERIALIZED VIEW v AS SELECT * FROM sales", tasks)
    assert again.results[0]["accepted"] and tasks["mv:v"]["state"] == "NORMAL"


def test_drop_of_missing_mv_is_not_found() -> None:
    effects = apply("DROP MATERIALIZED VIEW ghost", {})
    assert effects.results[0]["error"]["code"] == 1003


def test_drop_is_durable_until_the_owner_reports_the_data_removed_at_its_epoch() -> None:
    tasks: dict[str, Record] = {}
    apply(CREATE, tasks)
    tasks.update(_owned(tasks, "w1"))
    effects = apply("DROP MATERIALIZED VIEW by_region", tasks)
    dropping = tasks["mv:by_region"]
    assert (dropping["state"], dropping["epoch"], dropping["owner"]) == ("DROPPING", 2, "w1")
    assert effects.manager[0]["kind"] == "REMOVE_MAINTAINER" and effects.manager[0]["task"] == dropping
    assert apply("DROP MATERIALIZED VIEW by_region", tasks).results[0]["accepted"], "a repeated drop: no-op"
    refused = apply("ALTER MATERIALIZED VIEW by_region PAUSE", tasks).results[0]["error"]
    assert refused["code"] == 1001 and "being dropped" in refused["message"]
    again = apply(CREATE, tasks).results[0]["error"]
    assert again["code"] == 1002 and "is being dropped" in again["message"], "the name is not free yet"

    def dropped(worker: str, epoch: int) -> Record:
        status = {**worker_status(dropping, epoch, {}), "state": "DROPPED"}
        return {"worker_id": worker, "statuses": [status], "removed": []}

    assert not handle_heartbeat(dropped("w1", 1), tasks, ctx()).catalog, "an older epoch's report"
    assert not handle_heartbeat(dropped("w2", 2), tasks, ctx()).catalog, "not the owner's report"
    assert handle_heartbeat(dropped("w1", 2), tasks, ctx()).catalog == {"mv:by_region": None}


def test_a_dropping_task_whose_owner_went_silent_is_restarted_still_dropping() -> None:
    tasks: dict[str, Record] = {}
    apply(CREATE, tasks)
    tasks.update(_owned(tasks, "w1"))
    apply("DROP MATERIALIZED VIEW by_region", tasks)
    effects = restart_silent_tasks(tasks, {"w1"}, {"mv:by_region": 3}, ctx())
    restarted = effects.catalog["mv:by_region"]
    assert restarted is not None and (restarted["state"], restarted["owner"]) == ("DROPPING", None)
    assert restarted["epoch"] == 3 and restarted["error"] is None, "a drop never becomes FAILED"
    assert effects.manager[0]["kind"] == "ADD_MAINTAINER"
    claim = {**worker_status(restarted, 3, {}), "state": "DROPPING"}
    moved = handle_heartbeat(
        {"worker_id": "w2", "statuses": [claim], "removed": []}, {"mv:by_region": restarted}, ctx()
    )
    taken = moved.catalog["mv:by_region"]
    assert taken is not None and (taken["state"], taken["owner"], taken["epoch"]) == ("DROPPING", "w2", 4)


def test_pause_resume_raise_epoch_and_repeated_pause_is_noop() -> None:
    tasks: dict[str, Record] = {}
    apply(CREATE, tasks)
    apply("ALTER MATERIALIZED VIEW by_region PAUSE", tasks)
    assert (tasks["mv:by_region"]["state"], tasks["mv:by_region"]["epoch"]) == ("PAUSED", 2)
    again = apply("ALTER MATERIALIZED VIEW by_region PAUSE", tasks)
    assert again.results[0]["accepted"] and not again.catalog
    refused = apply("REFRESH MATERIALIZED VIEW by_region", tasks)
    assert refused.results[0]["error"]["code"] == 1001
    apply("ALTER MATERIALIZED VIEW by_region RESUME", tasks)
    assert (tasks["mv:by_region"]["state"], tasks["mv:by_region"]["epoch"]) == ("NORMAL", 3)


def test_alter_changes_trigger_and_raises_epoch() -> None:
    tasks: dict[str, Record] = {}
    apply(CREATE, tasks)
    apply("ALTER MATERIALIZED VIEW by_region REFRESH COMPLETE ON CHANGE", tasks)
    assert tasks["mv:by_region"]["mv"]["trigger"]["kind"] == "ON_CHANGE"
    assert tasks["mv:by_region"]["epoch"] == 2


def test_refresh_and_cancel_become_maintainer_commands() -> None:
    tasks: dict[str, Record] = {}
    apply(CREATE, tasks)
    assert apply("REFRESH MATERIALIZED VIEW by_region", tasks).maintainer[0]["kind"] == "REFRESH_NOW"
    assert apply("CANCEL REFRESH MATERIALIZED VIEW by_region", tasks).maintainer[0]["kind"] == "CANCEL_RUN"


def test_unsupported_schema_version() -> None:
    event = parse_statement(CREATE)
    event["schema_version"] = 2
    effects = handle_ddl(event, {}, ctx())
    assert effects.results[0]["error"]["code"] == 6001 and not effects.catalog


def test_heartbeat_moves_checkpoint_forward_only_and_ignores_stale_epochs() -> None:
    tasks: dict[str, Record] = {}
    apply(CREATE, tasks)
    task = tasks["mv:by_region"]
    hb = {"worker_id": "w1", "statuses": [worker_status(task, 1, {"sales": 5})], "removed": []}
    tasks.update(handle_heartbeat(hb, tasks, ctx()).catalog)
    assert tasks["mv:by_region"]["checkpoint"] == {"sales": 5}
    assert tasks["mv:by_region"]["owner"] == "w1"
    late = {"worker_id": "w1", "statuses": [worker_status(task, 1, {"sales": 3})], "removed": []}
    tasks.update(handle_heartbeat(late, tasks, ctx()).catalog)
    assert tasks["mv:by_region"]["checkpoint"] == {"sales": 5}
    stale = {"worker_id": "w2", "statuses": [worker_status(task, 0, {"sales": 9})], "removed": []}
    assert not handle_heartbeat(stale, tasks, ctx()).catalog


def test_safepoint_is_lowest_watermark_and_is_sent_to_the_purge_task() -> None:
    tasks: dict[str, Record] = {}
    apply("CREATE MATERIALIZED VIEW LOG ON sales", tasks)
    apply(CREATE, tasks)
    apply("CREATE MATERIALIZED VIEW big AS SELECT * FROM sales WHERE amount > 10", tasks)
    assert safepoint_for("sales", tasks) == 0  # MVs that have not reported hold everything
    for name, version in (("mv:by_region", 4), ("mv:big", 2)):
        hb = {
            "worker_id": "w",
            "statuses": [worker_status(tasks[name], 1, {"sales": version})],
            "removed": [],
        }
        effects = handle_heartbeat(hb, tasks, ctx())
        tasks.update({k: v for k, v in effects.catalog.items() if v is not None})
    assert tasks["mvlog:sales"]["safepoint"] == 2
    assert effects.maintainer[-1]["kind"] == "SAFEPOINT" and effects.maintainer[-1]["safepoint"] == 2
    assert safepoint_for("orders", tasks) is None


def _owned(tasks: dict[str, Record], owner: str) -> dict[str, Record]:
    return {k: {**t, "owner": owner, "state": "NORMAL"} for k, t in tasks.items()}


def test_silent_owner_restarts_its_task_then_fails_it_after_three_restarts_in_a_row() -> None:
    tasks: dict[str, Record] = {}
    apply(CREATE, tasks)
    tasks = _owned(tasks, "w1")
    effects = restart_silent_tasks(tasks, {"w1"}, {}, ctx())
    restarted = effects.catalog["mv:by_region"]
    assert restarted["state"] == "WARNING" and restarted["error"]["code"] == 4002
    assert restarted["epoch"] == tasks["mv:by_region"]["epoch"] + 1 and restarted["owner"] is None
    assert effects.manager[0]["kind"] == "ADD_MAINTAINER"
    failed = restart_silent_tasks(tasks, {"w1"}, {"mv:by_region": 3}, ctx()).catalog["mv:by_region"]
    assert failed["state"] == "FAILED" and failed["error"]["code"] == 4001
    assert failed["error"]["retryable"] is False
    assert not restart_silent_tasks(tasks, {"w2"}, {}, ctx())  # a live owner keeps its task


def test_a_run_completed_after_a_restart_clears_the_restart_count() -> None:
    tasks: dict[str, Record] = {}
    apply(CREATE, tasks)
    status = worker_status(tasks["mv:by_region"], 2, {"sales": 1})
    restarted_at = {"mv:by_region": 5_000}

    def beat(state: str, ended_at: int) -> Record:
        last = {"state": state, "ended_at": ended_at}
        return {"worker_id": "w2", "statuses": [{**status, "last_run": last}], "removed": []}

    assert recovered_tasks(beat("COMPLETED", 4_000), restarted_at) == set()  # before the restart
    assert recovered_tasks(beat("ERROR", 6_000), restarted_at) == set()
    assert recovered_tasks(beat("COMPLETED", 6_000), restarted_at) == {"mv:by_region"}
    assert recovered_tasks(beat("SKIPPED", 6_000), restarted_at) == {"mv:by_region"}  # already current
    assert recovered_tasks(beat("COMPLETED", 6_000), {}) == set()


# -- FAILED → back -------------------------------------------------------------------------------------
def _failed(tasks: dict[str, Record], task_id: str) -> None:
    error = {"code": 1003, "message": "base table gone", "severity": "ERROR", "retryable": False, "at": 1}
    tasks[task_id] = {**tasks[task_id], "state": "FAILED", "error": error}


@pytest.mark.parametrize(
    "statement", ["ALTER MATERIALIZED VIEW by_region RESUME", "REFRESH MATERIALIZED VIEW by_region"]
)
def test_resume_or_refresh_brings_a_failed_mv_back_under_a_new_epoch(statement: str) -> None:
    tasks: dict[str, Record] = {}
    apply(CREATE, tasks)
    _failed(tasks, "mv:by_region")
    effects = apply(statement, tasks)
    task = tasks["mv:by_region"]
    assert effects.results[0]["accepted"]
    assert (task["state"], task["epoch"], task["error"]) == ("NORMAL", 2, None)
    # The owner gets the new epoch and runs it at once; no separate REFRESH_NOW is needed.
    assert [c["kind"] for c in effects.manager] == ["ADD_MAINTAINER"] and effects.manager[0]["epoch"] == 2
    assert not effects.maintainer


def test_a_failed_task_still_refuses_pause_and_alter() -> None:
    tasks: dict[str, Record] = {}
    apply(CREATE, tasks)
    _failed(tasks, "mv:by_region")
    error = apply("ALTER MATERIALIZED VIEW by_region PAUSE", tasks).results[0]["error"]
    assert error["code"] == 1001 and "can only be resumed, refreshed or dropped" in error["message"]


# -- owner rule ----------------------------------------------------------------------------------------
def test_created_by_records_the_issuer() -> None:
    effects = handle_ddl(parse_statement(CREATE, issued_by="User:alice"), {}, ctx())
    assert effects.catalog["mv:by_region"]["created_by"] == "User:alice"  # type: ignore[index]
    assert (
        get_codec().decode(get_codec().encode("TaskRecord", effects.catalog["mv:by_region"]))[1]["created_by"]
        == "User:alice"
    )


def _owned_by_alice(owner_rule: bool) -> tuple[dict[str, Record], Context]:
    rule_ctx = checked_ctx(TABLES, owner_rule=owner_rule, admins=frozenset({"User:admin"}))
    tasks: dict[str, Record] = {}
    tasks.update(handle_ddl(parse_statement(CREATE, issued_by="User:alice"), tasks, rule_ctx).catalog)  # type: ignore[arg-type]
    return tasks, rule_ctx


@pytest.mark.parametrize(
    ("statement", "guarded"),
    [
        ("ALTER MATERIALIZED VIEW by_region PAUSE", True),
        ("ALTER MATERIALIZED VIEW by_region REFRESH COMPLETE ON CHANGE", True),
        ("CANCEL REFRESH MATERIALIZED VIEW by_region", True),
        ("DROP MATERIALIZED VIEW by_region", True),
        ("REFRESH MATERIALIZED VIEW by_region", False),
    ],
)
def test_owner_rule_lets_only_the_creator_or_an_admin_change_an_mv(statement: str, guarded: bool) -> None:
    tasks, rule_ctx = _owned_by_alice(owner_rule=True)
    bob = handle_ddl(parse_statement(statement, issued_by="User:bob"), tasks, rule_ctx)
    if guarded:
        error = refusal(bob)
        assert error["code"] == 1001
        assert error["message"].startswith("permission denied: 'User:bob' may not")
        assert "its creator User:alice" in error["message"]
    else:
        assert bob.results[0]["accepted"]
    for principal in ("User:alice", "User:admin"):
        assert handle_ddl(parse_statement(statement, issued_by=principal), tasks, rule_ctx).results[0][
            "accepted"
        ]


def test_owner_rule_off_lets_anyone_and_guards_refresh_of_a_failed_task_when_on() -> None:
    tasks, open_ctx = _owned_by_alice(owner_rule=False)
    assert handle_ddl(
        parse_statement("DROP MATERIALIZED VIEW by_region", issued_by="x"), tasks, open_ctx
    ).results[0]["accepted"]
    tasks, rule_ctx = _owned_by_alice(owner_rule=True)
    _failed(tasks, "mv:by_region")
    refresh = parse_statement("REFRESH MATERIALIZED VIEW by_region", issued_by="User:bob")
    assert "permission denied" in refusal(handle_ddl(refresh, tasks, rule_ctx))["message"]


def test_owner_rule_fails_closed_for_tasks_without_a_recorded_creator() -> None:
    tasks, rule_ctx = _owned_by_alice(owner_rule=True)
    tasks["mv:by_region"]["created_by"] = None  # a record from before creators were kept
    pause = parse_statement("ALTER MATERIALIZED VIEW by_region PAUSE", issued_by="User:alice")
    assert "no recorded creator" in refusal(handle_ddl(pause, tasks, rule_ctx))["message"]
    admin = parse_statement("ALTER MATERIALIZED VIEW by_region PAUSE", issued_by="User:admin")
    assert handle_ddl(admin, tasks, rule_ctx).results[0]["accepted"]


# -- heartbeats from anyone -----------------------------------------------------------------------------
def test_malformed_heartbeat_statuses_are_skipped_and_good_ones_still_count() -> None:
    tasks: dict[str, Record] = {}
    apply(CREATE, tasks)
    good = worker_status(tasks["mv:by_region"], 1, {"sales": 4})
    bad = [
        {"task_id": "mv:by_region"},
        "junk",
        {**good, "state": "EXPLODED"},
        {**good, "checkpoint": {"s": "1"}},
    ]
    effects = handle_heartbeat({"worker_id": "w1", "statuses": [*bad, good]}, tasks, ctx())
    assert effects.catalog["mv:by_region"]["checkpoint"] == {"sales": 4}  # type: ignore[index]
    assert not handle_heartbeat({"statuses": [good]}, tasks, ctx())
    assert not handle_heartbeat({}, tasks, ctx())
    assert recovered_tasks({"statuses": ["junk", {"task_id": 1}]}, {"mv:by_region": 1}) == set()
