"""The history of a run as records (seed 001): the RunRecord a maintainer publishes on the runs
topic at each step (PENDING, RUNNING, then COMPLETED / SKIPPED / ERROR / CANCELED), and what an
executor outcome means for the record (the RunSummary a status carries: ``workers.records``)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from workers.catalog.errors import ErrorCode, MvsError
from workers.jobs import RunCancelled
from workers.records import Record
from workers.sched.executor import RunOutcome
from workers.worker.messages import RunContext
from workers.worker.runner import RunResult


@dataclass(frozen=True)
class RunEnd:
    """What a run's record says past its state and times: the rows it wrote, the watermark it left
    (None: the one it started from), its message or error, what it considered (``planning``:
    ``workers.worker.planning``) and the rows it changed in the MV, where its Delta commit says."""

    rows: int | None = None
    after: Mapping[str, int] | None = None
    message: str | None = None
    error: Record | None = None
    planning: Record | None = None
    inserted: int | None = None
    deleted: int | None = None

    @classmethod
    def of(cls, result: RunResult) -> RunEnd:
        """What a run that returned ``result`` ends with."""
        return cls(
            rows=result.rows_written,
            after=result.watermark_after,
            message=result.message,
            planning=result.planning,
            inserted=result.rows_inserted,
            deleted=result.rows_deleted,
        )


NOTHING_MORE = RunEnd()  # a record of state and times only (PENDING, RUNNING)


def run_record(
    run: RunContext,
    state: str,
    *,
    task_id: str,
    worker_id: str,
    started_ms: int | None,
    ended_ms: int | None,
    end: RunEnd = NOTHING_MORE,
) -> Record:
    """The RunRecord of ``run`` in ``state``; a run not yet started shows its queueing time, one
    that changed nothing (no ``end.after``) the watermark it started from, and a failed one the
    error's message."""
    return {
        "run_id": run.run_id,
        "trigger": run.trigger,
        "state": state,
        "started_at": run.queued_ms if started_ms is None else started_ms,
        "ended_at": ended_ms,
        "rows_written": end.rows,
        "message": end.message or (end.error or {}).get("message"),
        "task_id": task_id,
        "epoch": run.epoch,
        "worker_id": worker_id,
        "watermark_before": run.watermark_before,
        "watermark_after": dict(end.after or run.watermark_before),
        "error": end.error,
        "planning": end.planning,
        "rows_inserted": end.inserted,
        "rows_deleted": end.deleted,
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
