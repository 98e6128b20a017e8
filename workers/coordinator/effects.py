"""What the coordinator's decisions produce, and the records they share: the decision context,
``Effects`` (catalog records and commands to publish in one transaction), task ids, commands and
new catalog entries. Pure: nothing here touches Kafka.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from workers.catalog.lifecycle import TaskState
from workers.records import Record


@dataclass(frozen=True)
class Context:
    now_ms: int
    coordinator_epoch: int
    table_exists: Callable[[str], bool]  # only ever called with a name that passed the name rule
    # The owner rule (workers.catalog.owners): only a task's creator or an admin may change it.
    owner_rule: bool = False
    admin_principals: frozenset[str] = frozenset()
    # A table's column names from its Delta log (None: unknown); same name rule as ``table_exists``.
    table_columns: Callable[[str], tuple[str, ...] | None] = lambda _name: None


@dataclass
class Effects:
    catalog: dict[str, Record | None] = field(default_factory=dict)  # task id → record, None = tombstone
    manager: list[Record] = field(default_factory=list)
    maintainer: list[Record] = field(default_factory=list)
    results: list[Record] = field(default_factory=list)
    freshness: list[Record] = field(default_factory=list)  # FreshnessEvents (coordinator/freshness.py)

    def merge(self, other: Effects) -> None:
        self.catalog.update(other.catalog)
        self.manager.extend(other.manager)
        self.maintainer.extend(other.maintainer)
        self.results.extend(other.results)
        self.freshness.extend(other.freshness)

    def __bool__(self) -> bool:
        return bool(self.catalog or self.manager or self.maintainer or self.results or self.freshness)


def mv_task_id(name: str) -> str:
    return f"mv:{name}"


def mvlog_task_id(base_table: str) -> str:
    return f"mvlog:{base_table}"


def command(kind: str, task_id: str, epoch: int, ctx: Context) -> Record:
    """What every command carries: an id, the sender's coordinator epoch, and the task epoch it is for."""
    return {
        "command_id": uuid.uuid4().hex,
        "coordinator_epoch": ctx.coordinator_epoch,
        "kind": kind,
        "task_id": task_id,
        "epoch": epoch,
    }


def manager_command(kind: str, task: Record, ctx: Context, *, include_task: bool = True) -> Record:
    return {**command(kind, task["task_id"], task["epoch"], ctx), "task": task if include_task else None}


def maintainer_command(kind: str, task: Record, ctx: Context, safepoint: int | None = None) -> Record:
    return {**command(kind, task["task_id"], task["epoch"], ctx), "safepoint": safepoint}


def new_task(
    task_id: str,
    kind: str,
    name: str,
    ctx: Context,
    *,
    mv: Record | None = None,
    mv_log: Record | None = None,
    created_by: str | None = None,
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
        "checkpoint": {},  # the watermark (base table -> Delta version): its record field name
        "safepoint": None,
        "owner": None,
        "last_run": None,
        "next_run_at": None,
        "created_at": ctx.now_ms,
        "updated_at": ctx.now_ms,
        "created_by": created_by,
    }


# A failed MV reads nothing until resumed (then it may refresh completely); a dropping one never again.
_HOLD_NO_SAFEPOINT = frozenset({TaskState.FAILED.value, TaskState.DROPPING.value})


def safepoint_for(base_table: str, tasks: Mapping[str, Record]) -> int | None:
    """Lowest watermark on ``base_table`` among the live MVs that read it (None: no MV reads it).

    An MV that has not reported a watermark yet holds the safepoint at 0 (keep everything):
    purging must never outrun a reader the coordinator has not heard from.
    """
    marks: list[int] = []
    for task in tasks.values():
        if task["kind"] != "MV" or task["state"] in _HOLD_NO_SAFEPOINT or task.get("mv") is None:
            continue
        if base_table in task["mv"]["base_tables"]:
            marks.append(task["checkpoint"].get(base_table, 0))  # the MV's watermark
    return min(marks) if marks else None


def bootstrap_commands(partitions: int, ctx: Context) -> list[Record]:
    """One BOOTSTRAP per manager partition, so every live manager answers with a full snapshot."""
    return [{**command("BOOTSTRAP", f"__bootstrap__/{p}", 0, ctx), "task": None} for p in range(partitions)]
