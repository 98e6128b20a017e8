"""The 22 TPC-H MVs as a user would create them: REFRESH FAST where the coordinator's analysis gives
the query a FAST plan, REFRESH FORCE otherwise (each run FAST where it can, COMPLETE with the reason
where not); and one refresh of one, as the worker runs it (``SparkRunner.refresh``)."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from bench.common import mv_task
from workers import warehouse
from workers.catalog.errors import MvsError
from workers.config import Settings
from workers.ddl import QueryPlan
from workers.ddl.analysis import analyze_mv_query
from workers.records import Record
from workers.worker.runner import SparkRunner


@dataclass(frozen=True)
class TpchMv:
    name: str
    query: str
    mode: str  # FAST | FORCE | COMPLETE
    task: Record | None  # None: the coordinator refuses the query (``refused`` says why)
    refused: str = ""
    plan: QueryPlan | None = None  # the coordinator's analysis (what the task record holds)


def create(settings: Settings, name: str, query: str, mode: str | None = None) -> TpchMv:
    """MV ``name`` over ``query``: in ``mode``, or FAST where its plan allows and FORCE otherwise.
    Analysed as the coordinator does (the bases' columns read from their Delta logs in ``settings``'
    warehouse); a query it refuses gets no task, and the reason."""
    try:
        info = analyze_mv_query(query, lambda table: warehouse.table_columns(settings, table))
    except MvsError as error:
        return TpchMv(name, query, mode or "FORCE", None, f"refused: {error}")
    chosen = mode or ("FAST" if info.fast_refresh is not None else "FORCE")
    task = mv_task(
        name,
        trigger="ON_DEMAND",
        interval_ms=None,
        query=query,
        base_tables=info.base_tables,
        refresh_mode=chosen,
        plan=info.plan,
    )
    return TpchMv(name, query, chosen, task, plan=info.plan)


@dataclass(frozen=True)
class Run:
    ms: float
    state: str  # COMPLETED | SKIPPED | FAILED
    message: str
    spark_jobs: int | None
    choice: str = ""  # a FORCE run's choice (FAST | COMPLETE), from its planning information
    reason: str = ""  # and why (its estimates)
    # Generated-code compiles in the run (Spark's driver, Janino) and their ms: a fixed cost per plan
    # text the JVM's code cache has not seen.
    compiles: int | None = None
    compile_ms: float | None = None

    @property
    def fast(self) -> bool:
        return self.message.startswith("incremental:")


def refresh(runner: SparkRunner, mv: TpchMv, run_id: str) -> Run:
    """One refresh of ``mv`` at the bases' latest versions; a failed run is a ``FAILED`` Run with the
    coded error as its message (the worker would report it the same way), not an exception."""
    assert mv.task is not None, mv.refused
    compiled = _compiled(runner.spark)
    started = time.perf_counter()
    try:
        result = runner.refresh(mv.task, run_id=run_id, job_group=f"tpch-{mv.name}-{run_id}")
    except MvsError as error:
        return Run((time.perf_counter() - started) * 1000, "FAILED", f"{error.code.name}: {error}", None)
    elapsed = (time.perf_counter() - started) * 1000
    planning = result.planning or {}
    choice, reason = str(planning.get("choice", "")), str(planning.get("reason", ""))
    compiles, ns = (after - before for after, before in zip(_compiled(runner.spark), compiled, strict=True))
    return Run(
        elapsed, result.state, result.message or "", result.spark_jobs, choice, reason, compiles, ns / 1e6
    )


def _compiled(spark: Any) -> tuple[int, int]:
    """The driver JVM's generated-code compiles so far and their time (ns): Spark's codegen metrics."""
    jvm = spark._jvm  # noqa: SLF001 - Spark's own counters, not in PySpark's API
    compiles = jvm.org.apache.spark.metrics.source.CodegenMetrics.METRIC_COMPILATION_TIME().getCount()
    return compiles, jvm.org.apache.spark.sql.catalyst.expressions.codegen.CodeGenerator.compileTime()


def rows_of(spark: Any, frame: Any) -> tuple[list[tuple[str, str]], list[tuple[Any, ...]]]:
    """(column names and types, rows) of a DataFrame, for comparing an MV with its query or twin."""
    columns = [(f.name, f.dataType.simpleString()) for f in frame.schema.fields]
    return columns, [tuple(r) for r in frame.collect()]
