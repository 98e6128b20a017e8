"""The task state the views show (``mvs status``, ``GET /mvs``, the status page): the catalog's,
brought up to the newest run records.

A failed run's record reaches the runs topic before its owner's heartbeat has reached the catalog
through the coordinator (issue 32): for that moment the history would say a run failed while the
catalog still said NORMAL. So a NORMAL task whose newest ended run, at the catalog's epoch, is a
coded ERROR the catalog has not heard of yet is shown as its maintainer already holds it: WARNING
(retrying) for a retryable error, FAILED for a permanent one, with that error and run. Pure.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from workers.catalog.lifecycle import TaskState
from workers.records import Record, run_summary

_ENDED = frozenset({"COMPLETED", "SKIPPED", "ERROR", "CANCELED"})


def newest_ended_runs(runs: Iterable[Record]) -> dict[str, Record]:
    """Task id → its run record that ended last."""
    newest: dict[str, Record] = {}
    for run in runs:
        ended = run.get("ended_at")
        if run["state"] not in _ENDED or ended is None:
            continue
        known = newest.get(run["task_id"])
        if known is None or ended >= known["ended_at"]:
            newest[run["task_id"]] = run
    return newest


def _heard_of(task: Record, run: Record) -> bool:
    """Whether the catalog's last run is this run's end or a later one (its start, at least)."""
    last = task.get("last_run")
    if last is None:
        return False
    if last["run_id"] == run["run_id"]:
        return bool(last["state"] == run["state"])
    return bool(last["started_at"] >= run["ended_at"])


def with_newest_runs(tasks: Mapping[str, Record], runs: Iterable[Record]) -> dict[str, Record]:
    """``tasks`` (the catalog) with each NORMAL task whose newest ended run failed unheard of shown
    WARNING (retryable) or FAILED (permanent), that run as its last and its error as the task's."""
    shown = dict(tasks)
    for task_id, run in newest_ended_runs(runs).items():
        task = tasks.get(task_id)
        error = run.get("error")
        if task is None or task["state"] != TaskState.NORMAL.value or run["state"] != "ERROR":
            continue
        if error is None or run["epoch"] != task["epoch"] or _heard_of(task, run):
            continue  # uncoded (a full run queue: not the task's fault), an older epoch's, or known
        state = TaskState.WARNING if error["retryable"] else TaskState.FAILED
        shown[task_id] = {**task, "state": state.value, "error": error, "last_run": run_summary(run)}
    return shown
