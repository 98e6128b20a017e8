"""What one run cost Spark: its jobs and the rows its stages read (benchmarks and profiling).

A run's Spark work happens under its job group (``workers.jobs.groups``), so the group's jobs are
the run's. Rows read are the input records of those jobs' stages (data files and Delta log
actions alike), from Spark's status store; it keeps the latest ``spark.ui.retainedJobs`` /
``retainedStages`` (1000 by default), so ask soon after the run.
"""

from __future__ import annotations

from dataclasses import dataclass

from pyspark.sql import SparkSession

from workers.jobs.groups import spark_job_ids


@dataclass(frozen=True)
class RunStats:
    jobs: int
    rows_read: int


def group_stats(spark: SparkSession, group: str, *, step: str | None = None) -> RunStats:
    """Spark jobs run under ``group`` and the input records of their stages; with ``step``, only the
    jobs of the run's step of that name (``incremental._step``: the job description names it)."""
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
    return RunStats(jobs=len(job_ids), rows_read=rows)


def _description(spark: SparkSession, job_id: int) -> str:
    store = spark.sparkContext._jsc.sc().statusStore()  # noqa: SLF001
    try:
        described = store.job(job_id).description()
    except Exception:  # noqa: BLE001 - evicted from the store
        return ""
    return str(described.get()) if described.isDefined() else ""
