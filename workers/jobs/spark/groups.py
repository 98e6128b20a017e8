"""Spark job groups of runs, and cancelling them.

A run's Spark work happens in its calling thread under ``job_group`` (pinned-thread mode makes
the group a per-thread property). ``cancel_run`` cancels the group's active jobs; because a
cancel can arrive between two Spark jobs of a run (or before the first one), the group is also
marked cancelled and ``check_cancelled`` turns that into ``RunCancelled`` at the run's next step.
Cancellation is best-effort: a job submitted in the instant between a check and the cancel runs on.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager

from pyspark.sql import SparkSession

from workers.jobs.errors import RunCancelled

_lock = threading.Lock()
# Groups currently running in this process → cancelled flag. Only running groups are tracked,
# so cancels of finished runs do not accumulate.
_running: dict[str, bool] = {}


@contextmanager
def job_group(spark: SparkSession, group: str, description: str) -> Iterator[None]:
    """Run the block's Spark jobs under ``group``.

    A failure inside the block after ``cancel_run`` becomes RunCancelled. A block that finishes
    normally is not turned into a failure: its work (e.g. a Delta commit) may already have landed.
    """
    sc = spark.sparkContext
    with _lock:
        if group in _running:
            raise ValueError(f"job group {group!r} is already running in this process")
        _running[group] = False
    sc.setJobGroup(group, description, interruptOnCancel=True)
    try:
        yield
    except RunCancelled:
        raise
    except Exception as exc:
        if _is_cancelled(group):
            raise RunCancelled(f"run {group} cancelled") from exc
        raise
    finally:
        for key in ("spark.jobGroup.id", "spark.job.description", "spark.job.interruptOnCancel"):
            sc.setLocalProperty(key, None)  # type: ignore[arg-type]  # None unsets (documented)
        with _lock:
            _running.pop(group, None)


def _is_cancelled(group: str) -> bool:
    with _lock:
        return _running.get(group, False)


def check_cancelled(group: str) -> None:
    """Raise RunCancelled if ``group`` was cancelled; call between the Spark steps of a run."""
    if _is_cancelled(group):
        raise RunCancelled(f"run {group} cancelled")


def spark_job_ids(spark: SparkSession, group: str) -> list[int]:
    """The Spark jobs run under ``group``: finished, failed and running ones (Spark's status tracker
    keeps the last ``spark.ui.retainedJobs``, 1000 by default). Its listener runs a moment behind the
    scheduler, so a job started in the last instant may not be listed yet."""
    return list(spark.sparkContext.statusTracker().getJobIdsForGroup(group))


def spark_jobs(spark: SparkSession, group: str) -> int:
    """How many Spark jobs ran under ``group`` (see ``spark_job_ids``)."""
    return len(spark_job_ids(spark, group))


def cancel_run(spark: SparkSession, job_group: str) -> bool:
    """Cancel the run of ``job_group``: its active Spark jobs are killed (tasks interrupted).

    Returns True if the group was running in this process (then the run raises RunCancelled).
    """
    with _lock:
        running = job_group in _running
        if running:
            _running[job_group] = True
    spark.sparkContext.cancelJobGroup(job_group)
    return running
