"""The coordinator's decisions, as plain functions: a record in, the records to send out.

Nothing here touches Kafka; the coordinator loop publishes an ``Effects`` in one transaction
together with the offset of the record that caused it.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from workers.catalog.errors import ErrorCode, MvsError, task_error
from workers.catalog.lifecycle import Action, TaskState, transition
from workers.ddl import DdlError, analyze_query, apply_alter

Record = dict[str, Any]
SCHEMA_VERSION = 1

_LIFECYCLE_ACTIONS = {
    "ALTER_MV": Action.ALTER,
    "PAUSE": Action.PAUSE,
    "RESUME": Action.RESUME,
    "REFRESH": Action.REFRESH,
    "CANCEL": Action.CANCEL,
    "DROP_MV": Action.DROP,
    "DROP_MV_LOG": Action.DROP,
}


@dataclass(frozen=True)
class Context:
    now_ms: int
    coordinator_epoch: int
    table_exists: Callable[[str], bool]


@dataclass
class Effects:
    catalog: dict[str, Record | None] = field(default_factory=dict)  # task id → record, None = tombstone
    manager: list[Record] = field(default_factory=list)
    maintainer: list[Record] = field(default_factory=list)
    results: list[Record] = field(default_factory=list)

    def merge(self, other: Effects) -> None:
        self.catalog.update(other.catalog)
        self.manager.extend(other.manager)
        self.maintainer.extend(other.maintainer)
        self.results.extend(other.results)

    def __bool__(self) -> bool:
        return bool(self.catalog or self.manager or self.maintainer or self.results)


def mv_task_id(name: str) -> str:
    return f"mv:{name}"


def mvlog_task_id(base_table: str) -> str:
    return f"mvlog:{base_table}"


def _result(event: Record, task_id: str | None, ctx: Context, error: Record | None = None) -> Record:
    return {
        "event_id": event["event_id"],
        "task_id": task_id,
        "accepted": error is None,
        "error": error,
        "at": ctx.now_ms,
    }


def _command(kind: str, task_id: str, epoch: int, ctx: Context) -> Record:
    """What every command carries: an id, the sender's coordinator epoch, and the task epoch it is for."""
    return {
        "command_id": uuid.uuid4().hex,
        "coordinator_epoch": ctx.coordinator_epoch,
        "kind": kind,
        "task_id": task_id,
        "epoch": epoch,
    }


def _manager_command(kind: str, task: Record, ctx: Context, *, include_task: bool = True) -> Record:
    return {**_command(kind, task["task_id"], task["epoch"], ctx), "task": task if include_task else None}


def maintainer_command(kind: str, task: Record, ctx: Context, safepoint: int | None = None) -> Record:
    return {**_command(kind, task["task_id"], task["epoch"], ctx), "safepoint": safepoint}


def new_task(
    task_id: str,
    kind: str,
    name: str,
    ctx: Context,
    *,
    mv: Record | None = None,
    mv_log: Record | None = None,
) -> Record:
    return {
        "task_id": task_id,
        "kind": kind,
        "name": name,
        "mv": mv,
        "mv_log": mv_log,
        "state": TaskState.NORMAL.value,
        "epoch": 1,
        "error": None,
        "checkpoint": {},
        "safepoint": None,
        "owner": None,
        "last_run": None,
        "next_run_at": None,
        "created_at": ctx.now_ms,
        "updated_at": ctx.now_ms,
    }


def _validated_mv_spec(spec: Record, ctx: Context) -> Record:
    """The MV spec with base tables taken from the query itself (a producer's list is not trusted)."""
    try:
        info = analyze_query(spec["query"])
    except DdlError as exc:
        raise MvsError(ErrorCode.INVALID_CONFIG, str(exc)) from exc
    missing = [t for t in info.base_tables if not ctx.table_exists(t)]
    if missing:
        raise MvsError(ErrorCode.INVALID_CONFIG, f"unknown base table(s): {', '.join(missing)}")
    return {**spec, "base_tables": list(info.base_tables)}


def _create(event: Record, tasks: Mapping[str, Record], ctx: Context) -> Effects:
    is_mv = event["action"] == "CREATE_MV"
    task_id = mv_task_id(event["name"]) if is_mv else mvlog_task_id(event["name"])
    effects = Effects()
    if task_id in tasks:
        what = "materialized view" if is_mv else "materialized view log on"
        error = task_error(ErrorCode.DUPLICATE, f"{what} {event['name']} already exists", at_ms=ctx.now_ms)
        effects.results.append(_result(event, task_id, ctx, error))
        return effects
    try:
        if is_mv:
            if event.get("mv") is None:
                raise MvsError(ErrorCode.INVALID_CONFIG, "CREATE_MV event has no mv spec")
            task = new_task(task_id, "MV", event["name"], ctx, mv=_validated_mv_spec(event["mv"], ctx))
        else:
            if not ctx.table_exists(event["name"]):
                raise MvsError(ErrorCode.INVALID_CONFIG, f"unknown base table: {event['name']}")
            spec = event.get("mv_log") or {"base_table": event["name"], "purge_interval_ms": 60_000}
            task = new_task(task_id, "MV_LOG", event["name"], ctx, mv_log=spec)
            task["safepoint"] = safepoint_for(event["name"], tasks)
    except MvsError as exc:
        # A bad definition fails only its own task, where `mvs status` shows it.
        task = new_task(
            task_id,
            "MV" if is_mv else "MV_LOG",
            event["name"],
            ctx,
            mv=event.get("mv"),
            mv_log=event.get("mv_log"),
        )
        task.update(state=TaskState.FAILED.value, error=exc.record(ctx.now_ms))
        effects.catalog[task_id] = task
        effects.results.append(_result(event, task_id, ctx, task["error"]))
        return effects
    effects.catalog[task_id] = task
    effects.manager.append(_manager_command("ADD_MAINTAINER", task, ctx))
    effects.results.append(_result(event, task_id, ctx))
    return effects


def _target(event: Record, tasks: Mapping[str, Record]) -> str | None:
    if event["action"] == "DROP_MV_LOG":
        return mvlog_task_id(event["name"]) if mvlog_task_id(event["name"]) in tasks else None
    for task_id in (mv_task_id(event["name"]), mvlog_task_id(event["name"])):
        if task_id in tasks:
            return task_id
    return None


def _lifecycle(event: Record, tasks: Mapping[str, Record], ctx: Context) -> Effects:
    effects = Effects()
    task_id = _target(event, tasks)
    if task_id is None or (event["action"] == "DROP_MV" and not task_id.startswith("mv:")):
        what = "materialized view log on" if event["action"] == "DROP_MV_LOG" else "materialized view"
        error = task_error(ErrorCode.NOT_FOUND, f"{what} {event['name']} does not exist", at_ms=ctx.now_ms)
        effects.results.append(_result(event, None, ctx, error))
        return effects
    task = dict(tasks[task_id])
    action = _LIFECYCLE_ACTIONS[event["action"]]
    step = transition(TaskState(task["state"]), action)
    if step.noop:
        effects.results.append(_result(event, task_id, ctx))
        return effects
    if step.raise_epoch:
        task["epoch"] += 1
    task["updated_at"] = ctx.now_ms
    if step.new_state is None:
        effects.catalog[task_id] = None
        effects.manager.append(_manager_command("REMOVE_MAINTAINER", task, ctx, include_task=False))
    elif action is Action.REFRESH:
        effects.maintainer.append(maintainer_command("REFRESH_NOW", task, ctx))
    elif action is Action.CANCEL:
        effects.maintainer.append(maintainer_command("CANCEL_RUN", task, ctx))
    else:
        if action is Action.ALTER:
            task["mv"] = _altered_spec(task, event, ctx)
        task["state"] = step.new_state.value
        if step.new_state is TaskState.NORMAL:
            task["error"] = None
        effects.catalog[task_id] = task
        effects.manager.append(_manager_command("ADD_MAINTAINER", task, ctx))
    effects.results.append(_result(event, task_id, ctx))
    return effects


def _altered_spec(task: Record, event: Record, ctx: Context) -> Record:
    if task["kind"] != "MV" or event.get("mv") is None:
        raise MvsError(ErrorCode.INVALID_CONFIG, "ALTER needs new refresh settings for a materialized view")
    try:
        spec = apply_alter(task["mv"], event)
    except DdlError as exc:
        raise MvsError(ErrorCode.INVALID_CONFIG, str(exc)) from exc
    return _validated_mv_spec(spec, ctx) if spec["query"] != task["mv"]["query"] else spec


def handle_ddl(event: Record, tasks: Mapping[str, Record], ctx: Context) -> Effects:
    """Validate one DDL event against the catalog and decide its effects."""
    if event.get("schema_version") != SCHEMA_VERSION:
        error = task_error(
            ErrorCode.UNSUPPORTED_VERSION,
            f"DDL schema_version {event.get('schema_version')} is not supported (expected 1)",
            at_ms=ctx.now_ms,
        )
        return Effects(results=[_result(event, None, ctx, error)])
    try:
        if event["action"] in ("CREATE_MV", "CREATE_MV_LOG"):
            return _create(event, tasks, ctx)
        return _lifecycle(event, tasks, ctx)
    except MvsError as exc:
        return Effects(results=[_result(event, _target(event, tasks), ctx, exc.record(ctx.now_ms))])


def safepoint_for(base_table: str, tasks: Mapping[str, Record]) -> int | None:
    """Lowest watermark on ``base_table`` among the live MVs that read it (None: no MV reads it).

    An MV that has not reported a watermark yet holds the safepoint at 0 (keep everything):
    purging must never outrun a reader the coordinator has not heard from.
    """
    marks: list[int] = []
    for task in tasks.values():
        if task["kind"] != "MV" or task["state"] == TaskState.FAILED.value or task.get("mv") is None:
            continue
        if base_table in task["mv"]["base_tables"]:
            marks.append(task["checkpoint"].get(base_table, 0))
    return min(marks) if marks else None


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


def handle_heartbeat(heartbeat: Record, tasks: Mapping[str, Record], ctx: Context) -> Effects:
    """Fold a manager's maintainer statuses into the catalog; stale epochs are ignored."""
    effects = Effects()
    for status in heartbeat["statuses"]:
        task = tasks.get(status["task_id"])
        if task is None or status["epoch"] != task["epoch"]:
            continue  # a removed task, or a report from before the latest (re)start: stale
        updated = dict(task)
        # A status from a worker the task was not issued to is a claim (new, restarted or moved
        # task): that worker waits for an epoch naming it before it runs anything.
        moved = task["owner"] != heartbeat["worker_id"]
        updated["owner"] = heartbeat["worker_id"]
        updated["last_run"] = status["last_run"] or task["last_run"]
        updated["next_run_at"] = status["next_run_at"]
        # Checkpoints only move forward (a late heartbeat cannot pull one back).
        checkpoint = dict(task["checkpoint"])
        for table, version in status["checkpoint"].items():
            checkpoint[table] = max(version, checkpoint.get(table, -1))
        updated["checkpoint"] = checkpoint
        if task["state"] in (TaskState.NORMAL.value, TaskState.WARNING.value):
            updated["state"] = status["state"]
            updated["error"] = status["error"]
        if moved:
            # A new owner: raise the epoch so anything an old owner still sends or commits is stale.
            updated["epoch"] = task["epoch"] + 1
            effects.manager.append(_manager_command("ADD_MAINTAINER", updated, ctx))
        comparable = ("owner", "last_run", "next_run_at", "checkpoint", "state", "error", "epoch")
        if any(updated[k] != task[k] for k in comparable):
            updated["updated_at"] = ctx.now_ms
            effects.catalog[updated["task_id"]] = updated
    if effects.catalog:
        effects.merge(refresh_safepoints(tasks, effects.catalog, ctx))
    return effects


def restart_silent_tasks(
    tasks: Mapping[str, Record],
    silent_workers: set[str],
    restarts: Mapping[str, int],
    ctx: Context,
    *,
    max_restarts: int = 3,
) -> Effects:
    """Tasks whose owner stopped heartbeating: Warning (4002) and a restart under a new epoch, or
    Failed (4001) once a task has been restarted ``max_restarts`` times (it keeps crashing)."""
    effects = Effects()
    for task_id, task in tasks.items():
        if task["owner"] not in silent_workers or task["state"] not in (
            TaskState.NORMAL.value,
            TaskState.WARNING.value,
        ):
            continue
        updated = {**task, "epoch": task["epoch"] + 1, "owner": None, "updated_at": ctx.now_ms}
        if restarts.get(task_id, 0) >= max_restarts:
            updated["state"] = TaskState.FAILED.value
            updated["error"] = task_error(
                ErrorCode.MAINTAINER_CRASH,
                f"owner {task['owner']} went silent {max_restarts + 1} times; drop and re-create the task",
                at_ms=ctx.now_ms,
                severity="FATAL",
            )
            updated["error"]["retryable"] = False
        else:
            updated["state"] = TaskState.WARNING.value
            updated["error"] = task_error(
                ErrorCode.HEARTBEAT_TIMEOUT,
                f"no heartbeat from owner {task['owner']}; restarting",
                at_ms=ctx.now_ms,
            )
        effects.catalog[task_id] = updated
        effects.manager.append(_manager_command("ADD_MAINTAINER", updated, ctx))
    return effects


def recovered_tasks(heartbeat: Record, restarted_at: Mapping[str, int]) -> set[str]:
    """Tasks restarted at ``restarted_at`` (wall ms) that the heartbeat shows ending a run well since
    (COMPLETED, or SKIPPED: the MV was already current): their restart count starts over, so only
    restarts in a row (a task that keeps killing its workers) make a task Failed, not unrelated
    worker deaths over its lifetime."""
    recovered = set()
    for status in heartbeat["statuses"]:
        since, last = restarted_at.get(status["task_id"]), status["last_run"]
        ok = last is not None and last["state"] in ("COMPLETED", "SKIPPED")
        if since is not None and ok and (last["ended_at"] or 0) > since:
            recovered.add(status["task_id"])
    return recovered


def bootstrap_commands(partitions: int, ctx: Context) -> list[Record]:
    """One BOOTSTRAP per manager partition, so every live manager answers with a full snapshot."""
    return [{**_command("BOOTSTRAP", f"__bootstrap__/{p}", 0, ctx), "task": None} for p in range(partitions)]
