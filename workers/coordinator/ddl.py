"""DDL decisions: one DdlEvent and the catalog in, exactly one DdlResult (and, when accepted, the
catalog records and commands) out.

Total: whatever a producer sent, ``handle_ddl`` answers and returns. Bad input is refused explicitly
(``MvsError`` with its seed-002 code); an exception that still escapes is a bug of ours, answered as
"internal error" so the coordinator moves on instead of failing on the record for good.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from workers.catalog.errors import ErrorCode, MvsError
from workers.catalog.lifecycle import Action, TaskState, transition
from workers.catalog.names import mv_log_table_problem, mv_name_problem, name_problem, shown
from workers.catalog.owners import check_owner
from workers.catalog.specs import checked_mv_log_spec, checked_mv_spec, mv_cycle
from workers.coordinator.downstream import drive_downstream
from workers.coordinator.effects import (
    Context,
    Effects,
    maintainer_command,
    manager_command,
    mv_task_id,
    mvlog_task_id,
    new_task,
    safepoint_for,
)
from workers.coordinator.pipelines import dropped_with, fail_readers_on_new_columns, live_mv, upstream_mvs
from workers.ddl import DdlError, QueryInfo, apply_alter, plan_record, query_output_columns
from workers.ddl.analysis import analyze_mv_query
from workers.ddl.parser import SCHEMA_VERSION
from workers.records import Record

log = logging.getLogger(__name__)

DEFAULT_PURGE_INTERVAL_MS = 60_000
# Longest message in a DdlResult: a refusal quoting a producer's input stays readable.
MAX_MESSAGE_CHARS = 1000

_CREATE_ACTIONS = frozenset({"CREATE_MV", "CREATE_MV_LOG"})

_LIFECYCLE_ACTIONS = {
    "ALTER_MV": Action.ALTER,
    "PAUSE": Action.PAUSE,
    "RESUME": Action.RESUME,
    "REFRESH": Action.REFRESH,
    "CANCEL": Action.CANCEL,
    "DROP_MV": Action.DROP,
    "DROP_MV_LOG": Action.DROP,
}


def _event_id(event: Mapping[str, Any]) -> str:
    """The id to answer under; a producer that sent none gets its answer under "" (still one answer)."""
    value = event.get("event_id")
    return value if isinstance(value, str) else ""


def _result(event: Record, task_id: str | None, ctx: Context, error: Record | None = None) -> Record:
    return {
        "event_id": _event_id(event),
        "task_id": task_id,
        "accepted": error is None,
        "error": error,
        "at": ctx.now_ms,
    }


def _refusal(event: Record, task_id: str | None, ctx: Context, error: MvsError) -> Effects:
    record = error.record(ctx.now_ms)
    record["message"] = record["message"][:MAX_MESSAGE_CHARS]
    return Effects(results=[_result(event, task_id, ctx, record)])


def _invalid(message: str) -> MvsError:
    return MvsError(ErrorCode.INVALID_CONFIG, message)


def _table_exists(name: str, ctx: Context) -> bool:
    """``ctx.table_exists`` for a name that passed the name rule (the only kind that may reach a
    path); a storage error answers the DDL with 2001 instead of stopping the coordinator."""
    problem = name_problem(name, "table")
    if problem is not None:
        raise _invalid(problem)
    try:
        return ctx.table_exists(name)
    except OSError as exc:
        raise MvsError(ErrorCode.STORAGE_UNAVAILABLE, f"cannot look up table {name}: {exc}") from exc


def _mv_reads(tasks: Mapping[str, Record]) -> dict[str, list[str]]:
    """MV name → the tables its query reads, for every MV in the catalog."""
    return {
        task["name"]: list(task["mv"]["base_tables"])
        for task in tasks.values()
        if task.get("kind") == "MV" and task.get("mv") is not None
    }


def _analyzed(query: str, ctx: Context, tasks: Mapping[str, Record]) -> QueryInfo:
    """The query's analysis (``workers.ddl.analysis``: the only one; workers take the plan from the
    task record). An MV not built yet has no Delta log: its columns are its own query's output columns."""

    def table_columns(table: str) -> tuple[str, ...] | None:
        columns = ctx.table_columns(table)
        upstream = live_mv(table, tasks) if columns is None else None
        return columns if upstream is None else query_output_columns(upstream["mv"]["query"])

    return analyze_mv_query(query, table_columns)


def _validated_mv_spec(name: str, spec: Record, tasks: Mapping[str, Record], ctx: Context) -> Record:
    """The checked MV spec, with base tables taken from the query itself (a producer's list is not
    trusted): every table it reads is a valid name, an existing table or an MV of the catalog (built
    or not: its first refresh waits for theirs), neither the MV itself nor an MV that (through
    others) reads it."""
    info = _analyzed(spec["query"], ctx, tasks)
    for table in info.base_tables:
        problem = name_problem(table, "table")
        if problem is not None:
            raise _invalid(f"the query of {name} reads a table it may not: {problem}")
    if name in info.base_tables:
        raise _invalid(f"materialized view {name} cannot read from itself")
    cycle = mv_cycle(name, list(info.base_tables), _mv_reads(tasks))
    if cycle is not None:
        raise _invalid(
            f"materialized view {name} would read itself through other views ({' → '.join(cycle)}); "
            "change the query so that no view reads, directly or not, a view that reads it"
        )
    upstream = upstream_mvs(list(info.base_tables), tasks)
    missing = [t for t in info.base_tables if t not in upstream and not _table_exists(t, ctx)]
    if missing:
        raise _invalid(f"unknown base table(s): {', '.join(missing)}")
    if spec["refresh_mode"] == "FAST" and info.fast_refresh is None:
        raise _invalid(
            f"REFRESH FAST is not possible for {name}: {info.fast_reason}; use REFRESH COMPLETE or FORCE"
        )
    # The analysis travels with the task: workers read the plan from the record, never the SQL.
    return {
        **spec,
        "base_tables": list(info.base_tables),
        "plan": plan_record(info.plan),
        "upstream_mvs": upstream,
    }


def _check_mv_name_is_free(name: str, tasks: Mapping[str, Record], ctx: Context) -> None:
    """An MV's table is overwritten by every refresh: its name must not be any other table's."""
    if mvlog_task_id(name) in tasks:
        raise _invalid(
            f"{name} is a base table with an MV log; an MV cannot take a table's name: choose another name"
        )
    if _table_exists(name, ctx):
        raise _invalid(
            f"a table named {name} already exists in the warehouse (a base table, or the data of a "
            "dropped MV not yet removed): choose another name for the materialized view"
        )


def _new_task_id(task_id: str, problem: str | None, tasks: Mapping[str, Record], what: str) -> str:
    """``task_id`` for a new task, unless its name has a ``problem`` (1001) or it exists (1002)."""
    if problem is not None:
        raise _invalid(problem)
    existing = tasks.get(task_id)
    if existing is not None and existing["state"] == TaskState.DROPPING.value:
        raise MvsError(
            ErrorCode.DUPLICATE,
            f"{what} is being dropped: its data is not removed yet (`mvs status` shows it DROPPING); "
            "create it again once it is gone",
        )
    if existing is not None:
        raise MvsError(ErrorCode.DUPLICATE, f"{what} already exists")
    return task_id


def _create_mv(event: Record, tasks: Mapping[str, Record], ctx: Context) -> Effects:
    name = event["name"]
    task_id = _new_task_id(mv_task_id(name), mv_name_problem(name), tasks, f"materialized view {name}")
    if event.get("mv") is None:
        raise _invalid("CREATE_MV event has no mv spec")
    _check_mv_name_is_free(name, tasks, ctx)
    spec = _validated_mv_spec(name, checked_mv_spec(event["mv"]), tasks, ctx)
    task = new_task(task_id, "MV", name, ctx, mv=spec, created_by=event["issued_by"])
    return _added(event, task, ctx)


def _create_mv_log(event: Record, tasks: Mapping[str, Record], ctx: Context) -> Effects:
    table = event["name"]
    what = f"materialized view log on {table}"
    task_id = _new_task_id(mvlog_task_id(table), mv_log_table_problem(table), tasks, what)
    # An MV log on an MV captures its table's changes as on a base table (the MV's writes yield
    # change rows once its table has the change data feed on), so an MV reading it refreshes FAST.
    # Its table may not be built yet: the log's task waits for the MV's first refresh.
    if live_mv(table, tasks) is None and not _table_exists(table, ctx):
        raise _invalid(f"unknown base table: {table}")
    spec = event.get("mv_log") or {"base_table": table, "purge_interval_ms": DEFAULT_PURGE_INTERVAL_MS}
    task = new_task(
        task_id, "MV_LOG", table, ctx, mv_log=checked_mv_log_spec(spec, table), created_by=event["issued_by"]
    )
    task["safepoint"] = safepoint_for(table, tasks)
    return _added(event, task, ctx)


def _added(event: Record, task: Record, ctx: Context) -> Effects:
    return Effects(
        catalog={task["task_id"]: task},
        manager=[manager_command("ADD_MAINTAINER", task, ctx)],
        results=[_result(event, task["task_id"], ctx)],
    )


def _target(event: Record, tasks: Mapping[str, Record]) -> str | None:
    name = event.get("name")
    if not isinstance(name, str):
        return None
    if event.get("action") == "DROP_MV_LOG":
        return mvlog_task_id(name) if mvlog_task_id(name) in tasks else None
    for task_id in (mv_task_id(name), mvlog_task_id(name)):
        if task_id in tasks:
            return task_id
    return None


def _lifecycle(event: Record, tasks: Mapping[str, Record], ctx: Context) -> Effects:
    effects = Effects()
    task_id = _target(event, tasks)
    if task_id is None or (event["action"] == "DROP_MV" and not task_id.startswith("mv:")):
        what = "materialized view log on" if event["action"] == "DROP_MV_LOG" else "materialized view"
        raise MvsError(ErrorCode.NOT_FOUND, f"{what} {shown(event['name'])} does not exist")
    task = dict(tasks[task_id])
    action = _LIFECYCLE_ACTIONS[event["action"]]
    if ctx.owner_rule:
        check_owner(task, action, event["issued_by"], ctx.admin_principals)
    state = TaskState(task["state"])
    step = transition(state, action)
    if step.noop:
        effects.results.append(_result(event, task_id, ctx))
        return effects
    if step.raise_epoch:
        task["epoch"] += 1
    task["updated_at"] = ctx.now_ms
    if step.new_state is TaskState.DROPPING:
        _drop(task, effects, ctx)
        if task["kind"] == "MV":
            for other in dropped_with(task["name"], event, tasks, ctx):
                if tasks[other]["state"] != TaskState.DROPPING.value:  # else already on its way
                    _drop({**tasks[other], "epoch": tasks[other]["epoch"] + 1}, effects, ctx)
    elif action is Action.REFRESH and step.new_state is state:
        effects.maintainer.append(maintainer_command("REFRESH_NOW", task, ctx))
    elif action is Action.CANCEL:
        effects.maintainer.append(maintainer_command("CANCEL_RUN", task, ctx))
    else:
        # A new definition or state under a new epoch (a REFRESH of a FAILED task resumes it: the
        # owner runs a new epoch at once).
        if action is Action.ALTER:
            task["mv"] = _altered_spec(task, event, tasks, ctx)
            fail_readers_on_new_columns(tasks[task_id], task, tasks, effects, ctx)
        task["state"] = step.new_state.value
        if step.new_state is TaskState.NORMAL:
            task["error"] = None
        effects.catalog[task_id] = task
        effects.manager.append(manager_command("ADD_MAINTAINER", task, ctx))
    effects.results.append(_result(event, task_id, ctx))
    return effects


def _drop(task: Record, effects: Effects, ctx: Context) -> None:
    """Durable: the task stays, DROPPING, until its owner (whichever worker has it by then) reports its
    data removed at its (raised) epoch (heartbeats.py); only then is the name free."""
    task["state"] = TaskState.DROPPING.value
    task["error"] = None
    task["next_run_at"] = None
    task["updated_at"] = ctx.now_ms
    effects.catalog[task["task_id"]] = task
    effects.manager.append(manager_command("REMOVE_MAINTAINER", task, ctx))


def _altered_spec(task: Record, event: Record, tasks: Mapping[str, Record], ctx: Context) -> Record:
    if task["kind"] != "MV" or event.get("mv") is None:
        raise _invalid("ALTER needs new refresh settings for a materialized view")
    change = {**event, "mv": checked_mv_spec(event["mv"], query_may_be_empty=True)}
    try:
        spec = apply_alter(task["mv"], change)
    except DdlError as exc:
        raise _invalid(str(exc)) from exc
    spec = checked_mv_spec(spec)
    if spec["query"] == task["mv"]["query"]:
        # Same query, same analysis; a record from before plans were stored gets one now.
        plan = task["mv"].get("plan") or plan_record(_analyzed(spec["query"], ctx, tasks).plan)
        base_tables = list(task["mv"]["base_tables"])
        return {
            **spec,
            "base_tables": base_tables,
            "plan": plan,
            "upstream_mvs": upstream_mvs(base_tables, tasks),
        }
    return _validated_mv_spec(task["name"], spec, tasks, ctx)


def _event_problem(event: Mapping[str, Any]) -> str | None:
    """What is missing or mistyped in a DDL event (a raw producer's), or None."""
    if not _event_id(event):
        return "a DDL event needs a non-empty event_id"
    action = event.get("action")
    if action not in _CREATE_ACTIONS and action not in _LIFECYCLE_ACTIONS:
        return f"unknown DDL action {shown(action)}"
    for key in ("name", "issued_by"):
        if not isinstance(event.get(key), str):
            return f"a DDL event needs a string {key}"
    if not isinstance(event.get("sql"), str | None):
        return "sql must be a string or null"
    return None


def handle_ddl(event: Record, tasks: Mapping[str, Record], ctx: Context) -> Effects:
    """Validate one DDL event against the catalog and decide its effects: always exactly one
    DdlResult, and catalog records only for an accepted event (a refusal leaves nothing behind).

    Total: whatever a producer sent, this answers and returns. Bad input is refused explicitly
    (``MvsError`` with its code); an exception that still escapes is a bug of ours, answered as
    "internal error" so the coordinator moves on instead of failing on the record for good.
    """
    try:
        return _decide(event, tasks, ctx)
    except Exception as exc:
        log.exception("internal error on DDL event %s", _event_id(event))
        error = _invalid(f"internal error: {type(exc).__name__}: {exc}; the DDL was not applied")
        return _refusal(event, None, ctx, error)


def _decide(event: Record, tasks: Mapping[str, Record], ctx: Context) -> Effects:
    if event.get("schema_version") != SCHEMA_VERSION:
        version = event.get("schema_version")
        error = MvsError(
            ErrorCode.UNSUPPORTED_VERSION,
            f"DDL schema_version {shown(version)} is not supported (expected {SCHEMA_VERSION})",
        )
        return _refusal(event, None, ctx, error)
    problem = _event_problem(event)
    if problem is not None:
        return _refusal(event, None, ctx, _invalid(problem))
    try:
        if event["action"] == "CREATE_MV":
            effects = _create_mv(event, tasks, ctx)
        elif event["action"] == "CREATE_MV_LOG":
            effects = _create_mv_log(event, tasks, ctx)
        else:
            effects = _lifecycle(event, tasks, ctx)
        drive_downstream(tasks, effects, ctx)  # readers came, went or changed their triggers
        return effects
    except MvsError as exc:
        return _refusal(event, _target(event, tasks) or _created_task_id(event), ctx, exc)


def _created_task_id(event: Record) -> str | None:
    """The task a refused CREATE was for (so ``mvs history <task>`` shows the refusal), when its
    name is one a task could have."""
    name, action = event["name"], event["action"]
    if action == "CREATE_MV" and mv_name_problem(name) is None:
        return mv_task_id(name)
    if action == "CREATE_MV_LOG" and mv_log_table_problem(name) is None:
        return mvlog_task_id(name)
    return None
