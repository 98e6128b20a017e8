"""``--profile``: each Spark job of a run with the lines of ``workers/`` that started it.

Spark names a job by its call site, the ``callSite.short`` local property of the submitting thread
when set (PySpark sets it for RDD calls only; a DataFrame action's job is "collectToPython at
NativeMethodAccessorImpl.java:0"). While profiling, every py4j call from Python sets that property
first to the innermost ``workers/`` frames of the Python stack (only when it changed: one extra
gateway call per new site), so each job in Spark's status store is named by the mvs code that ran it,
broadcast and subquery jobs included (Spark SQL hands the submitting thread's properties to them).
Times in a profiled run include that overhead: the job counts and names are the figures, not the ms.
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from py4j.java_gateway import JavaMember
from pyspark.sql import SparkSession

from workers.jobs.spark.groups import spark_job_ids

_CALL_SITE = "callSite.short"
_SITE_DEPTH = 5  # innermost workers/ frames named per job: the helper and who called it
_MARK = "/workers/"


@dataclass(frozen=True)
class JobProfile:
    job_id: int
    ms: float
    stages: int
    rows_read: int
    site: str


def _workers_site(frame: Any) -> str:
    """The innermost ``workers/`` frames of the stack from ``frame`` up, innermost first."""
    found: list[str] = []
    while frame is not None and len(found) < _SITE_DEPTH:
        path = frame.f_code.co_filename
        if _MARK in path:
            module = path.rsplit(_MARK, 1)[1].removesuffix(".py")
            found.append(f"{module}:{frame.f_lineno} {frame.f_code.co_name}")
        frame = frame.f_back
    return " < ".join(found) or "(outside workers/)"


@contextmanager
def call_sites(spark: SparkSession) -> Iterator[None]:
    """Within the block, Spark jobs are named by the ``workers/`` lines that started them."""
    local = threading.local()
    original: Callable[..., Any] = JavaMember.__call__
    jsc = spark.sparkContext._jsc  # noqa: SLF001 - the gateway's SparkContext: its local properties

    def traced(self: JavaMember, *args: Any) -> Any:
        if getattr(local, "busy", False):
            return original(self, *args)
        if self.name in ("setCallSite", "setLocalProperty"):
            local.site = None  # someone else set (or cleared) it: ours is set again next call
            return original(self, *args)
        site = _workers_site(sys._getframe(1))  # noqa: SLF001 - the caller's stack
        if site != getattr(local, "site", None):
            local.busy = True
            try:
                jsc.setLocalProperty(_CALL_SITE, site)
            finally:
                local.busy = False
            local.site = site
        return original(self, *args)

    JavaMember.__call__ = traced
    try:
        yield
    finally:
        JavaMember.__call__ = original
        jsc.setLocalProperty(_CALL_SITE, None)


def group_jobs(spark: SparkSession, group: str) -> list[JobProfile]:
    """The Spark jobs run under ``group``, in order, each with its time, stages, input rows and name."""
    store = spark.sparkContext._jsc.sc().statusStore()  # noqa: SLF001 - input rows are only here
    tracker = spark.sparkContext.statusTracker()
    jobs: list[JobProfile] = []
    for job_id in sorted(spark_job_ids(spark, group)):
        try:
            job = store.job(job_id)
            name = str(job.name())
            ms = float(job.completionTime().get().getTime() - job.submissionTime().get().getTime())
        except Exception:  # noqa: BLE001 - evicted from the store, or still running
            name, ms = "?", 0.0
        info = tracker.getJobInfo(job_id)
        stage_ids = list(info.stageIds) if info is not None else []
        rows = 0
        for stage_id in stage_ids:
            try:
                rows += int(store.lastStageAttempt(stage_id).inputRecords())
            except Exception:  # noqa: BLE001 - skipped stage (reused shuffle) or evicted
                continue
        jobs.append(JobProfile(job_id, ms, len(stage_ids), rows, name))
    return jobs


def print_jobs(jobs: list[JobProfile]) -> None:
    for job in jobs:
        figures = f"{job.ms:>8,.0f} ms {job.stages:>2} stages {job.rows_read:>10,} rows"
        print(f"      job {job.job_id:>5} {figures}  {job.site}")
