"""Heartbeat decisions: fold a manager's maintainer statuses into the catalog, re-derive MV-log
safepoints, restart the tasks of owners that went silent.

Total: a malformed status is skipped (and logged), the others still count; an exception that still
escapes is a bug of ours, logged, and the heartbeat changes nothing.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping

from workers.catalog.errors import ErrorCode, task_error
from workers.catalog.lifecycle import TaskState
from workers.catalog.names import shown
from workers.coordinator.effects import (
    Context,
    Effects,
    maintainer_command,
    manager_command,
    safepoint_for,
)
from workers.records import Record

log = logging.getLogger(__name__)


def refresh_safepoints(
    tasks: Mapping[str, Record], changed: Mapping[str, Record | None], ctx: Context
) -> Effects:
    """Re-derive the safepoint of every MV log and tell each purge task whose safepoint moved."""
    effects = Effects()
    view = {**tasks, **{k: v for k, v in changed.items() if v is not None}}
    for task_id in [k for k, v in changed.items() if v is None]:
        view.pop(task_id, None)
    for task_id, task in view.items():
        if task["kind"] != "MV_LOG":
            continue
        safepoint = safepoint_for(task["name"], view)
        if safepoint != task.get("safepoint"):
            updated = {**task, "safepoint": safepoint, "updated_at": ctx.now_ms}
            effects.catalog[task_id] = updated
            effects.maintainer.append(maintainer_command("SAFEPOINT", updated, ctx, safepoint=safepoint))
    return effects


_TASK_STATES = frozenset(state.value for state in TaskState)


def _is_long(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _status_problem(status: object) -> str | None:
    """What is missing or mistyped in a heartbeat's MaintainerStatus, or None."""
    if not isinstance(status, Mapping):
        return "a status must be a record"
    if not isinstance(status.get("task_id"), str) or not _is_long(status.get("epoch")):
        return "a status needs a task_id and an epoch"
    if status.get("state") not in _TASK_STATES:
        return f"unknown task state {shown(status.get('state'))}"
    watermark = status.get("checkpoint")  # the record's name for the watermark
    if not isinstance(watermark, Mapping) or not all(
        isinstance(k, str) and _is_long(v) for k, v in watermark.items()
    ):
        return "a checkpoint (watermark) maps table names to Delta versions"
    if not isinstance(status.get("last_run"), Mapping | None) or not isinstance(
        status.get("error"), Mapping | None
    ):
        return "last_run and error must be records or null"
    if not (status.get("next_run_at") is None or _is_long(status.get("next_run_at"))):
        return "next_run_at must be a time in ms or null"
    return None


def handle_heartbeat(heartbeat: Record, tasks: Mapping[str, Record], ctx: Context) -> Effects:
    """Fold a manager's maintainer statuses into the catalog; stale epochs are ignored.

    Total: a malformed status is skipped (and logged), the others still count; an exception that
    still escapes is a bug of ours, logged, and the heartbeat changes nothing.
    """
    try:
        return _fold_heartbeat(heartbeat, tasks, ctx)
    except Exception:
        log.exception("internal error on a heartbeat from %r; ignored", heartbeat.get("worker_id"))
        return Effects()


def _fold_heartbeat(heartbeat: Record, tasks: Mapping[str, Record], ctx: Context) -> Effects:
    effects = Effects()
    worker_id, statuses = heartbeat.get("worker_id"), heartbeat.get("statuses")
    if not isinstance(worker_id, str) or not isinstance(statuses, list):
        log.warning("ignoring a heartbeat without worker_id or statuses")
        return effects
    for status in statuses:
        problem = _status_problem(status)
        if problem is not None:
            log.warning("ignoring a status in the heartbeat of %r: %s", worker_id, problem)
            continue
        task = tasks.get(status["task_id"])
        if task is None or status["epoch"] != task["epoch"]:
            continue  # a removed task, or a report from before the latest (re)start: stale
        if status["state"] == TaskState.DROPPED.value:
            if task["state"] == TaskState.DROPPING.value and task["owner"] == worker_id:
                # The owner at the drop's epoch removed the data: only now is the name free.
                effects.catalog[task["task_id"]] = None
            continue
        updated = dict(task)
        # A status from a worker the task was not issued to is a claim (new, restarted or moved
        # task): that worker waits for an epoch naming it before it runs anything.
        moved = task["owner"] != worker_id
        updated["owner"] = worker_id
        updated["last_run"] = status["last_run"] or task["last_run"]
        updated["next_run_at"] = status["next_run_at"]
        # Watermarks (the records' ``checkpoint`` field) only move forward: a late heartbeat cannot
        # pull one back.
        watermark = dict(task["checkpoint"])
        for table, version in status["checkpoint"].items():
            watermark[table] = max(version, watermark.get(table, -1))
        updated["checkpoint"] = watermark
        if task["state"] in (TaskState.NORMAL.value, TaskState.WARNING.value):
            updated["state"] = status["state"]
            updated["error"] = status["error"]
        if moved:
            # A new owner: raise the epoch so anything an old owner still sends or commits is stale.
            updated["epoch"] = task["epoch"] + 1
            effects.manager.append(manager_command("ADD_MAINTAINER", updated, ctx))
        comparable = ("owner", "last_run", "next_run_at", "checkpoint", "state", "error", "epoch")
        if any(updated[k] != task[k] for k in comparable):
            updated["updated_at"] = ctx.now_ms
            effects.catalog[updated["task_id"]] = updated
    if effects.catalog:
        effects.merge(refresh_safepoints(tasks, effects.catalog, ctx))
    return effects


# A dropping task is restarted too: the worker that takes it over finishes removing its data.
_RESTARTED_STATES = frozenset({TaskState.NORMAL.value, TaskState.WARNING.value, TaskState.DROPPING.value})


def restart_silent_tasks(
    tasks: Mapping[str, Record],
    silent_workers: set[str],
    restarts: Mapping[str, int],
    ctx: Context,
    *,
    max_restarts: int = 3,
) -> Effects:
    """Tasks whose owner stopped heartbeating: Warning (4002) and a restart under a new epoch, or
    Failed (4001) once a task has been restarted ``max_restarts`` times (it keeps crashing); a
    dropping task stays DROPPING under a new epoch, for the next owner to finish."""
    effects = Effects()
    for task_id, task in tasks.items():
        if task["owner"] not in silent_workers or task["state"] not in _RESTARTED_STATES:
            continue
        updated = {**task, "epoch": task["epoch"] + 1, "owner": None, "updated_at": ctx.now_ms}
        if task["state"] != TaskState.DROPPING.value:  # a drop stays one, for the next owner to finish
            updated.update(_silent_owner_outcome(task, restarts.get(task_id, 0), max_restarts, ctx))
        effects.catalog[task_id] = updated
        effects.manager.append(manager_command("ADD_MAINTAINER", updated, ctx))
    return effects


def _silent_owner_outcome(task: Record, restarts: int, max_restarts: int, ctx: Context) -> Record:
    """The state and error of a task whose owner went silent after ``restarts`` restarts in a row."""
    if restarts >= max_restarts:
        error = task_error(
            ErrorCode.MAINTAINER_CRASH,
            f"owner {task['owner']} went silent {max_restarts + 1} times; drop and re-create the task",
            at_ms=ctx.now_ms,
            severity="FATAL",
        )
        return {"state": TaskState.FAILED.value, "error": {**error, "retryable": False}}
    error = task_error(
        ErrorCode.HEARTBEAT_TIMEOUT, f"no heartbeat from owner {task['owner']}; restarting", at_ms=ctx.now_ms
    )
    return {"state": TaskState.WARNING.value, "error": error}


def recovered_tasks(heartbeat: Record, restarted_at: Mapping[str, int]) -> set[str]:
    """Tasks restarted at ``restarted_at`` (wall ms) that the heartbeat shows ending a run well since
    (COMPLETED, or SKIPPED: the MV was already current): their restart count starts over, so only
    restarts in a row (a task that keeps killing its workers) make a task Failed, not unrelated
    worker deaths over its lifetime."""
    recovered = set()
    statuses = heartbeat.get("statuses")
    for status in statuses if isinstance(statuses, list) else []:
        if _status_problem(status) is not None or status["task_id"] not in restarted_at:
            continue
        last = status["last_run"]
        ok = last is not None and last.get("state") in ("COMPLETED", "SKIPPED")
        ended_at = last.get("ended_at") if last is not None else None
        if ok and isinstance(ended_at, int) and ended_at > restarted_at[status["task_id"]]:
            recovered.add(status["task_id"])
    return recovered
