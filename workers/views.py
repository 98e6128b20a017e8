"""The machine-readable shapes of the control plane: what ``mvs status|history|tail --output json``
print and what the REST API (``mvs serve``) answers; one function per shape, used by both.

Field names are snake_case and stable (README "Machine-readable output"). A time is two fields:
``<name>`` an ISO-8601 UTC string (``2026-11-22T22:24:18.123Z``) and ``<name>_ms`` the epoch
milliseconds the record holds. Enums are their names (``"NORMAL"``, ``"COMPLETED"``). Pure: no I/O.

The shapes are ``TypedDict``s from ``typing_extensions`` because the API's OpenAPI document is
generated from them (pydantic needs that TypedDict on Python < 3.12).
"""

from __future__ import annotations

import base64
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from typing_extensions import TypedDict

from workers.records import Record
from workers.status import behind_versions

if TYPE_CHECKING:
    from workers.client import HistorySnapshot, StatusSnapshot
    from workers.kafka.messages import Message


class ErrorJson(TypedDict):
    code: int
    message: str
    severity: str
    retryable: bool
    at: str
    at_ms: int


class LastRunJson(TypedDict):
    run_id: str
    trigger: str
    state: str
    started_at: str
    started_at_ms: int
    ended_at: str | None
    ended_at_ms: int | None
    duration_ms: int | None
    rows_written: int | None
    message: str | None


class TriggerJson(TypedDict):
    kind: str
    interval_ms: int | None


class TaskJson(TypedDict):
    task_id: str
    kind: str
    name: str
    state: str
    owner: str | None
    epoch: int
    refresh_mode: str | None
    trigger: TriggerJson | None
    driven_by: TriggerJson | None  # TARGET LAG DOWNSTREAM: the trigger its readers drive (null: none)
    query: str | None
    base_tables: list[str]
    purge_interval_ms: int | None
    watermark: dict[str, int]
    lag_versions: int | None
    next_run_at: str | None
    next_run_at_ms: int | None
    last_run: LastRunJson | None
    error: ErrorJson | None
    created_by: str | None
    created_at: str
    created_at_ms: int
    updated_at: str
    updated_at_ms: int


class RoleJson(TypedDict):
    role: str
    name: str
    state: str
    partitions: list[int]
    tasks: int | None
    ddl_lag: int | None
    last_loop_error: str | None


class StatusJson(TypedDict):
    namespace: str
    generated_at: str
    generated_at_ms: int
    tasks: list[TaskJson]
    roles: list[RoleJson]
    notes: list[str]


class CandidateJson(TypedDict):
    technique: str
    estimated_ms: float | None
    available: bool
    note: str | None


class PlanningJson(TypedDict):
    """What a refresh run considered (RunRecord ``planning``)."""

    choice: str
    reason: str
    candidates: list[CandidateJson]
    change_rows: int | None
    change_bytes: int | None
    base_rows: int | None
    base_bytes: int | None
    base_files: int | None
    mv_rows: int | None


class RunJson(LastRunJson):
    """A run record: its summary (as a task's ``last_run``) and where it ran, what it read, why it
    failed, what it considered (``planning``) and the rows it inserted into / deleted from the MV."""

    task_id: str
    epoch: int
    worker_id: str
    watermark_before: dict[str, int]
    watermark_after: dict[str, int]
    error: ErrorJson | None
    planning: PlanningJson | None
    rows_inserted: int | None
    rows_deleted: int | None


class DdlJson(TypedDict):
    issued_at: str
    issued_at_ms: int
    action: str
    name: str
    sql: str | None
    issued_by: str
    accepted: bool | None
    task_id: str | None
    error: ErrorJson | None


class HistoryJson(TypedDict):
    task_id: str | None
    runs: list[RunJson]
    ddl: list[DdlJson]
    notes: list[str]


class StatementJson(TypedDict):
    event_id: str
    accepted: bool
    task_id: str | None
    error: ErrorJson | None


class TailJson(TypedDict):
    topic: str
    partition: int
    offset: int
    key: str | None
    type: str | None
    timestamp: str | None
    timestamp_ms: int | None
    value: Any
    raw_base64: str | None
    error: str | None


def iso(ms: int | None) -> str | None:
    """Epoch milliseconds → ``2026-11-22T22:24:18.123Z`` (None stays None)."""
    if ms is None:
        return None
    moment = datetime.fromtimestamp(ms / 1000, tz=UTC)
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _iso(ms: int) -> str:
    text = iso(ms)
    assert text is not None
    return text


def _duration_ms(started_ms: int, ended_ms: int | None) -> int | None:
    return None if ended_ms is None else ended_ms - started_ms


def error_json(error: Record | None) -> ErrorJson | None:
    if error is None:
        return None
    return {
        "code": error["code"],
        "message": error["message"],
        "severity": error["severity"],
        "retryable": error["retryable"],
        "at": _iso(error["at"]),
        "at_ms": error["at"],
    }


def last_run_json(run: Record | None) -> LastRunJson | None:
    """A RunSummary (a task's ``last_run``), or the summary part of a RunRecord."""
    if run is None:
        return None
    return {
        "run_id": run["run_id"],
        "trigger": run["trigger"],
        "state": run["state"],
        "started_at": _iso(run["started_at"]),
        "started_at_ms": run["started_at"],
        "ended_at": iso(run.get("ended_at")),
        "ended_at_ms": run.get("ended_at"),
        "duration_ms": _duration_ms(run["started_at"], run.get("ended_at")),
        "rows_written": run.get("rows_written"),
        "message": run.get("message"),
    }


def _trigger_json(trigger: Record | None) -> TriggerJson | None:
    return {"kind": trigger["kind"], "interval_ms": trigger.get("interval_ms")} if trigger else None


def task_json(task: Record, lag_versions: int | None) -> TaskJson:
    """One catalog entry; ``lag_versions`` from ``workers.status.behind_versions``."""
    mv = task.get("mv") or {}
    mv_log = task.get("mv_log") or {}
    trigger = mv.get("trigger")
    return {
        "task_id": task["task_id"],
        "kind": task["kind"],
        "name": task["name"],
        "state": task["state"],
        "owner": task.get("owner"),
        "epoch": task["epoch"],
        "refresh_mode": mv.get("refresh_mode"),
        "trigger": _trigger_json(trigger),
        "driven_by": _trigger_json(mv.get("driven_by")),
        "query": mv.get("query"),
        "base_tables": list(mv.get("base_tables") or ([mv_log["base_table"]] if mv_log else [])),
        "purge_interval_ms": mv_log.get("purge_interval_ms"),
        "watermark": dict(task["checkpoint"]),
        "lag_versions": lag_versions,
        "next_run_at": iso(task.get("next_run_at")),
        "next_run_at_ms": task.get("next_run_at"),
        "last_run": last_run_json(task.get("last_run")),
        "error": error_json(task.get("error")),
        "created_by": task.get("created_by"),
        "created_at": _iso(task["created_at"]),
        "created_at_ms": task["created_at"],
        "updated_at": _iso(task["updated_at"]),
        "updated_at_ms": task["updated_at"],
    }


def _role(
    role: str,
    name: str,
    state: str,
    partitions: list[int],
    tasks: int | None,
    loop_error: str | None,
    ddl_lag: int | None = None,
) -> RoleJson:
    return {
        "role": role,
        "name": name,
        "state": state,
        "partitions": sorted(partitions),
        "tasks": tasks,
        "ddl_lag": ddl_lag,
        "last_loop_error": loop_error,
    }


def roles_json(
    coordinators: Mapping[str, list[int]],
    workers: Mapping[str, list[int]],
    tasks: Mapping[str, Record],
    loop_errors: Mapping[str, str | None],
    ddl_lag: int | None = None,
) -> list[RoleJson]:
    """The live roles, as ``workers.status.members_table`` shows them."""
    roles: list[RoleJson] = []
    for name in sorted(coordinators):
        active = 0 in coordinators[name]
        lag = ddl_lag if active else None
        state = "active" if active else "standby"
        roles.append(_role("coordinator", name, state, coordinators[name], None, loop_errors.get(name), lag))
    for name in sorted(workers):
        owned = sum(1 for task in tasks.values() if task.get("owner") == name)
        roles.append(_role("worker", name, "member", workers[name], owned, loop_errors.get(name)))
    return roles


def snapshot_task_json(snapshot: StatusSnapshot, task_id: str) -> TaskJson:
    """Task ``task_id`` of the snapshot, with its lag against the snapshot's table versions."""
    task = snapshot.tasks[task_id]
    return task_json(task, behind_versions(task, snapshot.latest_version))


def status_json(snapshot: StatusSnapshot, namespace: str) -> StatusJson:
    """``mvs status --output json`` and ``GET /mvs``: every task (by task id), the live roles, and
    what could not be read."""
    tasks = snapshot.tasks
    return {
        "namespace": namespace,
        "generated_at": _iso(snapshot.at_ms),
        "generated_at_ms": snapshot.at_ms,
        "tasks": [snapshot_task_json(snapshot, task_id) for task_id in sorted(tasks)],
        "roles": roles_json(
            snapshot.coordinators, snapshot.workers, tasks, snapshot.loop_errors, snapshot.ddl_lag
        ),
        "notes": list(snapshot.notes),
    }


def run_json(run: Record) -> RunJson:
    summary = last_run_json(run)
    assert summary is not None
    return {
        **summary,
        "task_id": run["task_id"],
        "epoch": run["epoch"],
        "worker_id": run["worker_id"],
        "watermark_before": dict(run["watermark_before"]),
        "watermark_after": dict(run["watermark_after"]),
        "error": error_json(run.get("error")),
        "planning": planning_json(run.get("planning")),
        "rows_inserted": run.get("rows_inserted"),
        "rows_deleted": run.get("rows_deleted"),
    }


def planning_json(planning: Record | None) -> PlanningJson | None:
    if planning is None:
        return None
    return {
        "choice": planning["choice"],
        "reason": planning["reason"],
        "candidates": [
            {
                "technique": c["technique"],
                "estimated_ms": c.get("estimated_ms"),
                "available": c["available"],
                "note": c.get("note"),
            }
            for c in planning["candidates"]
        ],
        "change_rows": planning.get("change_rows"),
        "change_bytes": planning.get("change_bytes"),
        "base_rows": planning.get("base_rows"),
        "base_bytes": planning.get("base_bytes"),
        "base_files": planning.get("base_files"),
        "mv_rows": planning.get("mv_rows"),
    }


def ddl_json(entry: Record) -> DdlJson:
    """One entry of ``MvsClient.ddl_history``: the event and the coordinator's answer
    (``accepted`` None: no answer yet)."""
    answer = entry["answer"]
    return {
        "issued_at": _iso(entry["at"]),
        "issued_at_ms": entry["at"],
        "action": entry["action"],
        "name": entry["name"],
        "sql": entry["sql"],
        "issued_by": entry["issued_by"],
        "accepted": None if answer is None else answer["accepted"],
        "task_id": None if answer is None else answer.get("task_id"),
        "error": None if answer is None else error_json(answer.get("error")),
    }


def history_json(snapshot: HistorySnapshot) -> HistoryJson:
    """``mvs history --output json`` and ``GET /mvs/{name}/history``: runs and DDL, oldest first
    (a part that could not be read is empty, with a note)."""
    return {
        "task_id": snapshot.task_id,
        "runs": [run_json(run) for run in snapshot.runs or []],
        "ddl": [ddl_json(entry) for entry in snapshot.ddl or []],
        "notes": list(snapshot.notes),
    }


def statement_json(result: Record) -> StatementJson:
    """The coordinator's DdlResult for one statement (``mvs sql`` prints it as ``OK``/``ERROR``)."""
    return {
        "event_id": result["event_id"],
        "accepted": result["accepted"],
        "task_id": result.get("task_id"),
        "error": error_json(result.get("error")),
    }


def _plain(value: Any) -> Any:
    """A decoded record as JSON values: bytes as base64, other non-JSON leaves as text."""
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, bytes):
        return base64.b64encode(value).decode("ascii")
    if value is None or isinstance(value, (str, int, float, bool)):
        return value
    return str(value)


def tail_json(message: Message) -> TailJson:
    """One line of ``mvs tail --output json``: where the record is, and its value with the field
    names of its Avro schema (``schemas/``; None for a tombstone). A record without a schema (the
    dlq) or one that did not decode has its bytes in ``raw_base64`` (and ``error`` says why)."""
    return {
        "topic": message.topic,
        "partition": message.partition,
        "offset": message.offset,
        "key": message.key,
        "type": message.record_type,
        "timestamp": iso(message.timestamp),
        "timestamp_ms": message.timestamp,
        "value": _plain(message.value),
        "raw_base64": None if message.raw is None else base64.b64encode(message.raw).decode("ascii"),
        "error": message.error,
    }
