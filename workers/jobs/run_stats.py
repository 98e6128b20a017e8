"""What one run cost Spark: its jobs and the rows its stages read (benchmarks and profiling).

A run's Spark work happens under its job group (``workers.jobs.spark.groups``), so the group's jobs are
the run's. Rows read are the input records of those jobs' stages (data files and Delta log actions
alike), from Spark's status store, plus the rows delta-rs read for the run (``rs_arrow``); the store
keeps the latest ``spark.ui.retainedJobs`` / ``retainedStages`` (1000 by default), so ask soon after
the run.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from pyspark.sql import SparkSession

from workers.jobs.delta import arrow as rs_arrow
from workers.jobs.spark.groups import spark_job_ids


@dataclass(frozen=True)
class RunStats:
    jobs: int
    rows_read: int


def group_stats(spark: SparkSession, group: str, *, step: str | None = None) -> RunStats:
    """Spark jobs run under ``group`` and the input records of their stages; with ``step``, only the
    jobs of the run's step of that name (``Scope.step``: the job description names it)."""
    tracker = spark.sparkContext.statusTracker()
    job_ids = spark_job_ids(spark, group)
    if step is not None:
        job_ids = [j for j in job_ids if step in _description(spark, j)]
    stage_ids: set[int] = set()
    for job_id in job_ids:
        info = tracker.getJobInfo(job_id)
        if info is not None:
            stage_ids.update(info.stageIds)
    # Input records are not in PySpark's StatusTracker; the JVM status store has them.
    store = spark.sparkContext._jsc.sc().statusStore()  # noqa: SLF001
    rows = 0
    for stage_id in stage_ids:
        try:
            rows += int(store.lastStageAttempt(stage_id).inputRecords())
        except Exception:  # noqa: BLE001 - evicted from the store (or never ran): nothing to add
            continue
    return RunStats(jobs=len(job_ids), rows_read=rows + rs_arrow.rows_read(group, step))


def _description(spark: SparkSession, job_id: int) -> str:
    store = spark.sparkContext._jsc.sc().statusStore()  # noqa: SLF001
    try:
        described = store.job(job_id).description()
    except Exception:  # noqa: BLE001 - evicted from the store
        return ""
    return str(described.get()) if described.isDefined() else ""


# The steps a FAST run names in its job descriptions (``workers.jobs.fast.refresh._step``).
_STEP = re.compile(
    r"read the change rows|compute the change to the MV|commit the helper state|commit \([^)]*\)"
)


def step_profile(spark: SparkSession, group: str) -> dict[str, tuple[int, float]]:
    """Where a run's time went: per step (named in its jobs' descriptions; "other" for jobs before the
    first step, e.g. planning reads), its Spark jobs and their summed wall time in ms."""
    store = spark.sparkContext._jsc.sc().statusStore()  # noqa: SLF001
    profile: dict[str, tuple[int, float]] = {}
    for job_id in spark_job_ids(spark, group):
        found = _STEP.search(_description(spark, job_id))
        step = found.group(0) if found else "other"
        try:
            job = store.job(job_id)
            ms = float(job.completionTime().get().getTime() - job.submissionTime().get().getTime())
        except Exception:  # noqa: BLE001 - evicted, or still running: counted without its time
            ms = 0.0
        jobs, total = profile.get(step, (0, 0.0))
        profile[step] = (jobs + 1, total + ms)
    return profile
