"""The coordinator's rules for MVs that read MVs (pipelines): which inputs are MVs of the catalog
(built or not), who reads an MV, what a DROP of one takes with it, and which readers an ALTER of its
columns fails. Pure: catalog entries in; task ids, or records added to the decision's ``Effects``, out.
"""

from __future__ import annotations

from collections.abc import Mapping

from workers.catalog.errors import ErrorCode, MvsError
from workers.catalog.lifecycle import Action, TaskState
from workers.catalog.owners import check_owner
from workers.coordinator.effects import Context, Effects, manager_command, mv_task_id, mvlog_task_id
from workers.ddl import query_output_columns
from workers.records import Record


def live_mv(name: str, tasks: Mapping[str, Record]) -> Record | None:
    """The catalog entry of MV ``name`` unless it is being dropped (its table is going away)."""
    task = tasks.get(mv_task_id(name))
    if task is None or task["state"] == TaskState.DROPPING.value or task.get("mv") is None:
        return None
    return task


def upstream_mvs(tables: list[str], tasks: Mapping[str, Record]) -> list[str]:
    """The tables among ``tables`` that are MVs of the catalog, built or not."""
    return [t for t in tables if live_mv(t, tasks) is not None]


def fail_readers_on_new_columns(
    before: Record, after: Record, tasks: Mapping[str, Record], effects: Effects, ctx: Context
) -> None:
    """An ALTER that changes an MV's output columns fails each MV reading it (FAILED, with the
    reason and the way back), rather than letting their next runs fail or misread the new columns."""
    old, new = (query_output_columns(t["mv"]["query"]) for t in (before, after))
    if old == new or old is None or new is None:
        return  # same columns, or not known from the text (SELECT *): the readers' runs will tell
    name = after["name"]
    message = (
        f"the columns of {name}, which this view reads, changed (ALTER of {name}: "
        f"{', '.join(old)} → {', '.join(new)}); drop this view and create it with a query that "
        "reads them, or RESUME it if its query still fits"
    )
    for reader in readers_of(name, tasks):
        task = dict(tasks[mv_task_id(reader)])
        if task["state"] == TaskState.FAILED.value:
            continue
        task["epoch"] += 1
        task["state"] = TaskState.FAILED.value
        task["error"] = MvsError(ErrorCode.INVALID_CONFIG, message).record(ctx.now_ms)
        task["updated_at"] = ctx.now_ms
        effects.catalog[task["task_id"]] = task
        effects.manager.append(manager_command("ADD_MAINTAINER", task, ctx))


def readers_of(name: str, tasks: Mapping[str, Record]) -> list[str]:
    """The live MVs whose query reads table ``name``, by name."""
    return sorted(
        task["name"]
        for task in tasks.values()
        if task["kind"] == "MV"
        and task.get("mv") is not None
        and task["state"] != TaskState.DROPPING.value
        and name in task["mv"]["base_tables"]
    )


def dropped_with(name: str, event: Record, tasks: Mapping[str, Record], ctx: Context) -> list[str]:
    """The other tasks a DROP of MV ``name`` ends: the MV log on it, and with CASCADE every MV reading
    it, directly or not (and their MV logs); without CASCADE readers refuse the DROP (1001)."""
    readers = readers_of(name, tasks)
    if readers and not event.get("cascade"):
        raise MvsError(
            ErrorCode.INVALID_CONFIG,
            f"{name} is read by {', '.join(readers)}; drop them first or use "
            f"DROP MATERIALIZED VIEW {name} CASCADE",
        )
    names, queue = [name], list(readers)
    while queue:
        reader = queue.pop(0)
        if reader not in names:
            names.append(reader)
            queue.extend(readers_of(reader, tasks))
    dropped = [
        task_id
        for mv in names
        for task_id in (mv_task_id(mv), mvlog_task_id(mv))
        if task_id in tasks and task_id != mv_task_id(name)
    ]
    if ctx.owner_rule:
        for task_id in dropped:
            check_owner(tasks[task_id], Action.DROP, event["issued_by"], ctx.admin_principals)
    return dropped
