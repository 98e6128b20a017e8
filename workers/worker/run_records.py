"""The history of a run as records (seed 001): the RunRecord a maintainer publishes on the runs
topic at each step (PENDING, RUNNING, then COMPLETED / SKIPPED / ERROR / CANCELED), and what an
executor outcome means for the record (the RunSummary a status carries: ``workers.records``)."""

from __future__ import annotations

from workers.catalog.errors import ErrorCode, MvsError
from workers.jobs import RunCancelled
from workers.records import Record
from workers.sched.executor import RunOutcome
from workers.worker.messages import RunContext


def run_record(
    run: RunContext,
    state: str,
    *,
    task_id: str,
    worker_id: str,
    started_ms: int | None,
    ended_ms: int | None,
    rows: int | None,
    after: dict[str, int] | None,
    message: str | None,
    error: Record | None,
    planning: Record | None = None,
    inserted: int | None = None,
    deleted: int | None = None,
) -> Record:
    """The RunRecord of ``run`` in ``state``; a run not yet started shows its queueing time, one
    that changed nothing (no ``after``) the watermark it started from, and a failed one the error's
    message. ``planning``: what a refresh considered (``workers.worker.planning``); ``inserted`` /
    ``deleted``: the rows it changed in the MV, where its Delta commit says."""
    return {
        "run_id": run.run_id,
        "trigger": run.trigger,
        "state": state,
        "started_at": run.queued_ms if started_ms is None else started_ms,
        "ended_at": ended_ms,
        "rows_written": rows,
        "message": message or (error or {}).get("message"),
        "task_id": task_id,
        "epoch": run.epoch,
        "worker_id": worker_id,
        "watermark_before": run.watermark_before,
        "watermark_after": dict(after or run.watermark_before),
        "error": error,
        "planning": planning,
        "rows_inserted": inserted,
        "rows_deleted": deleted,
    }


def was_cancelled(outcome: RunOutcome) -> bool:
    """Cancelled (a CANCEL command, a newer epoch, a stop), not timed out."""
    return not outcome.timed_out and (outcome.canceled or isinstance(outcome.error, RunCancelled))


def run_failure(outcome: RunOutcome, timeout_s: float) -> MvsError | None:
    """The coded error of a failed run, None when it completed or was cancelled. A timeout is
    retryable storage trouble; an exception without a code is a crash of ours."""
    if outcome.timed_out:
        return MvsError(
            ErrorCode.STORAGE_UNAVAILABLE, f"run exceeded its timeout of {timeout_s:g}s and was cancelled"
        )
    if was_cancelled(outcome) or outcome.error is None:
        return None
    if isinstance(outcome.error, MvsError):
        return outcome.error
    return MvsError(ErrorCode.MAINTAINER_CRASH, f"{type(outcome.error).__name__}: {outcome.error}")
