"""Run records and task records as rows of the fleet's Delta tables (pure: record in, row out).

``mvs_refresh_history`` holds one row per run end (a RunRecord in a final state on the runs topic);
``mvs_tasks`` one row per live task (the latest TaskRecord of the compacted catalog). Every row
names the Kafka record it came from (``source_partition``, ``source_offset``): the sink writes a
partition's rows with Delta's idempotent-write id keyed by those offsets
(``workers/worker/history_sink.py``). Columns are in ``HISTORY_COLUMNS`` / ``TASK_COLUMNS`` order,
which the Spark schemas of ``workers/worker/history_table.py`` follow.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from workers.records import Record

# A run's history row is written once it ended; PENDING / RUNNING records are steps on the way.
FINAL_RUN_STATES = frozenset({"COMPLETED", "SKIPPED", "ERROR", "CANCELED"})
# The run message starts with how the MV was refreshed ("incremental: 3 change rows applied …",
# "complete: first build", "skipped: no change").
REFRESH_TYPES = {"incremental": "INCREMENTAL", "complete": "COMPLETE", "skipped": "SKIP"}

HISTORY_COLUMNS = (
    "run_id",
    "task_id",
    "kind",
    "name",
    "state",
    "refresh_type",
    "message",
    "trigger",
    "epoch",
    "worker_id",
    "started_at",
    "ended_at",
    "duration_ms",
    "rows_written",
    "watermark_before",
    "watermark_after",
    "error_code",
    "error_severity",
    "error_retryable",
    "source_partition",
    "source_offset",
    # Planning information (added later: an older table gains these columns on the next append).
    "planning_reason",
    "fast_estimated_ms",
    "complete_estimated_ms",
    "change_rows",
    "base_rows",
    "rows_inserted",
    "rows_deleted",
)
TASK_COLUMNS = (
    "task_id",
    "kind",
    "name",
    "state",
    "epoch",
    "refresh_mode",
    "trigger_kind",
    "trigger_interval_ms",
    "freshness_ms",
    "query",
    "base_tables",
    "checkpoint",
    "owner",
    "error_code",
    "error_message",
    "last_run_id",
    "last_run_state",
    "last_run_started_at",
    "last_run_ended_at",
    "next_run_at",
    "created_at",
    "updated_at",
    "created_by",
    "source_partition",
    "source_offset",
)


def timestamp(ms: int | None) -> datetime | None:
    """Epoch milliseconds as a UTC timestamp (what SQL readers compare and format)."""
    return None if ms is None else datetime.fromtimestamp(ms / 1000, tz=UTC)


def task_parts(task_id: str) -> tuple[str, str]:
    """``mv:sales`` → (``MV``, ``sales``); ``mvlog:t`` → (``MV_LOG``, ``t``)."""
    prefix, _, name = task_id.partition(":")
    return ("MV_LOG" if prefix == "mvlog" else "MV"), name


def refresh_type(state: str, message: str | None) -> str | None:
    """INCREMENTAL / COMPLETE / SKIP, read from the run message; None when it does not say (an error
    before the decision, a purge run)."""
    if state == "SKIPPED":
        return "SKIP"
    head = (message or "").partition(":")[0].strip().lower()
    return REFRESH_TYPES.get(head)


def history_row(record: Mapping[str, Any], partition: int, offset: int) -> dict[str, Any] | None:
    """The ``mvs_refresh_history`` row of a RunRecord, or None for a run not ended yet."""
    state = record["state"]
    if state not in FINAL_RUN_STATES:
        return None
    kind, name = task_parts(record["task_id"])
    error: Record = record.get("error") or {}
    started, ended = record["started_at"], record.get("ended_at")
    return {
        "run_id": record["run_id"],
        "task_id": record["task_id"],
        "kind": kind,
        "name": name,
        "state": state,
        "refresh_type": refresh_type(state, record.get("message")) if kind == "MV" else None,
        "message": record.get("message"),
        "trigger": record["trigger"],
        "epoch": record["epoch"],
        "worker_id": record["worker_id"],
        "started_at": timestamp(started),
        "ended_at": timestamp(ended),
        "duration_ms": None if ended is None else max(0, ended - started),
        "rows_written": record.get("rows_written"),
        "watermark_before": dict(record.get("watermark_before") or {}),
        "watermark_after": dict(record.get("watermark_after") or {}),
        "error_code": error.get("code"),
        "error_severity": error.get("severity"),
        "error_retryable": error.get("retryable"),
        "source_partition": partition,
        "source_offset": offset,
        **planning_columns(record),
    }


def planning_columns(record: Mapping[str, Any]) -> dict[str, Any]:
    """A run's planning information (RunRecord ``planning``, ``rows_inserted`` / ``rows_deleted``) as
    history columns; nulls for a run without (skipped, failed, purge, or recorded before it existed)."""
    planning: Record = record.get("planning") or {}
    estimates = {c["technique"]: c.get("estimated_ms") for c in planning.get("candidates") or []}
    return {
        "planning_reason": planning.get("reason"),
        "fast_estimated_ms": estimates.get("FAST"),
        "complete_estimated_ms": estimates.get("COMPLETE"),
        "change_rows": planning.get("change_rows"),
        "base_rows": planning.get("base_rows"),
        "rows_inserted": record.get("rows_inserted"),
        "rows_deleted": record.get("rows_deleted"),
    }


def task_row(record: Mapping[str, Any], partition: int, offset: int) -> dict[str, Any]:
    """The ``mvs_tasks`` row of a TaskRecord (the catalog's latest value for its key)."""
    mv: Record = record.get("mv") or {}
    trigger: Record = mv.get("trigger") or {}
    error: Record = record.get("error") or {}
    last_run: Record = record.get("last_run") or {}
    return {
        "task_id": record["task_id"],
        "kind": record["kind"],
        "name": record["name"],
        "state": record["state"],
        "epoch": record["epoch"],
        "refresh_mode": mv.get("refresh_mode"),
        "trigger_kind": trigger.get("kind"),
        "trigger_interval_ms": trigger.get("interval_ms"),
        "freshness_ms": mv.get("freshness_ms"),
        "query": mv.get("query"),
        "base_tables": list(mv.get("base_tables") or []),
        "checkpoint": dict(record.get("checkpoint") or {}),
        "owner": record.get("owner"),
        "error_code": error.get("code"),
        "error_message": error.get("message"),
        "last_run_id": last_run.get("run_id"),
        "last_run_state": last_run.get("state"),
        "last_run_started_at": timestamp(last_run.get("started_at")),
        "last_run_ended_at": timestamp(last_run.get("ended_at")),
        "next_run_at": timestamp(record.get("next_run_at")),
        "created_at": timestamp(record["created_at"]),
        "updated_at": timestamp(record["updated_at"]),
        "created_by": record.get("created_by"),
        "source_partition": partition,
        "source_offset": offset,
    }
