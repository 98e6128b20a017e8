"""The state the views show: the catalog brought up to the newest run records (issue 32)."""

from __future__ import annotations

from typing import Any

from workers.records import Record
from workers.task_view import with_newest_runs

RETRYABLE = {"code": 2001, "message": "storage unavailable", "severity": "WARN", "retryable": True, "at": 50}
PERMANENT = {**RETRYABLE, "code": 1003, "retryable": False, "severity": "ERROR"}


def run(
    run_id: str, state: str, started: int, ended: int | None, *, epoch: int = 2, error: Any = None
) -> Record:
    return {
        "run_id": run_id,
        "task_id": "mv:v",
        "epoch": epoch,
        "trigger": "SCHEDULE",
        "state": state,
        "started_at": started,
        "ended_at": ended,
        "rows_written": None,
        "message": None,
        "error": error,
    }


def task(state: str = "NORMAL", last_run: Record | None = None) -> Record:
    summary = (
        None if last_run is None else {k: last_run[k] for k in ("run_id", "state", "started_at", "ended_at")}
    )
    return {"task_id": "mv:v", "state": state, "epoch": 2, "error": None, "last_run": summary}


def shown(catalog: Record, *runs: Record) -> Record:
    return with_newest_runs({"mv:v": catalog}, runs)["mv:v"]


def test_a_failed_run_the_catalog_has_not_heard_of_shows_warning_or_failed_by_its_error() -> None:
    failing = run("r1", "ERROR", 10, 20, error=RETRYABLE)
    catalog = task(last_run=run("r1", "RUNNING", 10, None))  # the heartbeat saying so is on its way
    assert (shown(catalog, failing)["state"], shown(catalog, failing)["error"]) == ("WARNING", RETRYABLE)
    assert shown(catalog, failing)["last_run"]["state"] == "ERROR"
    assert shown(catalog, run("r1", "ERROR", 10, 20, error=PERMANENT))["state"] == "FAILED"


def test_what_the_catalog_knows_or_outranks_is_shown_as_it_is() -> None:
    failing = run("r1", "ERROR", 10, 20, error=RETRYABLE)
    assert shown(task(last_run=failing), failing)["state"] == "NORMAL", "heard of (and then reset)"
    assert shown(task(last_run=run("r2", "RUNNING", 25, None)), failing)["state"] == "NORMAL", "a later run"
    assert shown(task(), run("r1", "ERROR", 10, 20, epoch=1, error=RETRYABLE))["state"] == "NORMAL", (
        "old epoch"
    )
    assert shown(task(), run("r1", "ERROR", 10, 20))["state"] == "NORMAL", "uncoded: a full run queue"
    assert shown(task(), failing, run("r2", "COMPLETED", 21, 30))["state"] == "NORMAL", "a newer success"
    assert shown(task("PAUSED"), failing)["state"] == "PAUSED"
    assert with_newest_runs({}, [failing]) == {}, "a run of a task that is gone"
