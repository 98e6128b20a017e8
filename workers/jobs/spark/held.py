"""Small frames computed once and held by the driver, without lineage back to Delta.

A FAST run works on small data (the change rows, the per-group delta, the affected MV rows): holding
each such frame once means later reads of it run no job of their own (filters and projections of a
local relation are folded by the optimizer, a collect is served from the driver), and a MERGE that
plans its source several times re-reads no change data and rebuilds no time-travel snapshot.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F

from workers.jobs.spark.columns import q

# The most rows one frame holds on the driver; beyond it the frame is kept on the executors instead
# (``localCheckpoint``), so the worker's memory bounds no change size (a bulk load, a backfill).
DRIVER_ROWS_LIMIT = 100_000
# The most rows held as a local relation, whose filters and projections the optimizer folds (later
# reads of it run no job). Every analyzer and optimizer rule also walks a local relation's rows, so
# past a few thousand rows that costs more than the job it saves: more are held as an RDD of the rows,
# still on the driver (the same queries over 110,000 rows: 1.3 s as a local relation, 0.3 s so).
LOCAL_ROWS = 20_000


def hold(session: SparkSession, frame: DataFrame) -> DataFrame:
    """``frame`` computed once (one Spark job) and held: on the driver (rows stay JVM values, no Python
    round trip: exact for every type) as a local relation or, past ``LOCAL_ROWS``, an RDD of the rows;
    past ``DRIVER_ROWS_LIMIT`` rows, as a local checkpoint on the executors (computed once more,
    unless the caller says ``hold_counted(..., large=True)``)."""
    return hold_counted(session, frame)[0]


def hold_counted(session: SparkSession, frame: DataFrame, *, large: bool = False) -> tuple[DataFrame, int]:
    """``hold`` and the number of rows held (known for free on the driver, one count of the checkpoint
    otherwise). ``large``: the caller expects more than ``DRIVER_ROWS_LIMIT`` rows (a rebuild's
    frame over whole bases), so the frame is checkpointed first and computed once: collected first
    and found too large, it is computed again for the checkpoint (TPC-H SF 1 Q4's rebuild of its key
    counts: 2.4 s, then 3.0 s more for the same 1.4M rows). Held on the driver all the same where it
    turns out small (two short jobs over the checkpoint more)."""
    if large:
        checkpoint = frame.localCheckpoint(eager=True)
        count = checkpoint.count()
        if count > DRIVER_ROWS_LIMIT:
            return checkpoint, count
        return _on_driver(session, checkpoint._jdf.collectAsList(), frame), count  # noqa: SLF001
    rows = frame._jdf.limit(DRIVER_ROWS_LIMIT + 1).collectAsList()  # noqa: SLF001 - JVM-side collect
    if rows.size() > DRIVER_ROWS_LIMIT:
        checkpoint = frame.localCheckpoint(eager=True)
        return checkpoint, checkpoint.count()
    return _on_driver(session, rows, frame), int(rows.size())


def _on_driver(session: SparkSession, rows: Any, like: DataFrame) -> DataFrame:
    """The JVM ``rows`` (a ``java.util.List`` of rows of ``like``'s schema) as a frame held on the
    driver: a local relation, or past ``LOCAL_ROWS`` an RDD of them."""
    if int(rows.size()) > LOCAL_ROWS:
        context = session.sparkContext
        rows = context._jsc.parallelize(rows, context.defaultParallelism)  # noqa: SLF001
    made = session._jsparkSession.createDataFrame(rows, like._jdf.schema())  # noqa: SLF001
    return DataFrame(made, session)


def hold_distinct(session: SparkSession, frame: DataFrame) -> tuple[DataFrame, int]:
    """``hold_counted`` of ``frame``'s distinct rows. Where ``frame`` is projections and filters of
    rows held on the driver (the optimizer folds them into a local relation), its rows are collected
    without a job and made distinct there (``Row`` equality, as Spark's ``distinct``), else by one job."""
    if not _is_local(frame):
        return hold_counted(session, frame.distinct())
    rows = frame._jdf.collectAsList()  # noqa: SLF001 - a local relation: served by the driver, no job
    jvm = session._jvm  # noqa: SLF001
    distinct = jvm.java.util.ArrayList(jvm.java.util.LinkedHashSet(rows))  # type: ignore[union-attr]
    return _on_driver(session, distinct, frame), int(distinct.size())


def narrowed(session: SparkSession, frame: DataFrame, columns: Sequence[str]) -> DataFrame:
    """``frame`` with only ``columns`` (of its own, in its order). Where ``frame`` is held as a local
    relation its rows are projected once, here, without a job: every query over them would project
    them again, row by row, before it plans (``ConvertToLocalRelation``). Else a lazy projection,
    which Spark's scans prune."""
    if len(columns) == len(frame.columns):
        return frame
    projected = frame.selectExpr(*[q(c) for c in columns])  # a call per name (a Column: two)
    if not _is_local(projected):
        return projected
    rows = projected._jdf.collectAsList()  # noqa: SLF001 - a local relation: served by the driver, no job
    return _on_driver(session, rows, projected)


# Analyzed plan nodes the optimizer may fold, with the local relation under them, into a local
# relation (``ConvertToLocalRelation``: projections, filters, limits; aliases and hints go).
_FOLDED = frozenset(
    {"Project", "Filter", "SubqueryAlias", "View", "ResolvedHint", "GlobalLimit", "LocalLimit"}
)


def _is_local(frame: DataFrame) -> bool:
    """Whether ``frame``'s optimized plan is a local relation (reading it runs no Spark job). Asked of
    the optimizer only where the analyzed plan is a chain of ``_FOLDED`` nodes down to one local
    relation: optimizing a plan to learn it is not one cost 0.1-0.4 s where it is large (TPC-H SF 1
    Q21's keys of a join), and its distinct is optimized again to compute it (``hold_distinct``)."""
    execution = frame._jdf.queryExecution()  # noqa: SLF001
    node = execution.analyzed()
    while (name := str(node.getClass().getSimpleName())) in _FOLDED:
        children = node.children()
        if children.size() != 1:
            return False
        node = children.head()
    if name != "LocalRelation":
        return False
    return bool(execution.optimizedPlan().getClass().getSimpleName() == "LocalRelation")


def sums(frame: DataFrame, *values: Column) -> list[int]:
    """The sum of each of the integer ``values`` over ``frame``'s rows (0 for none). Counted on the
    driver when ``frame`` is projections and filters of rows held there (the optimizer folds them into
    a local relation: no Spark job), else by one aggregate."""
    projected = frame.select(*[F.coalesce(v.cast("long"), F.lit(0)) for v in values])
    if _is_local(projected):
        rows = projected.collect()
        return [sum(int(row[i]) for row in rows) for i in range(len(values))]
    found = projected.agg(*[F.sum(c) for c in projected.columns]).collect()[0]
    return [int(v or 0) for v in found]


def rebind(frame: DataFrame, session: SparkSession) -> DataFrame:
    """A held frame used from another session of the same SparkContext (a run session of its own):
    its plan (local rows, a checkpoint, an RDD of Arrow batches) holds no state a query reads from
    the session that made it (an RDD's node keeps a reference to it, for size defaults), the new
    frame takes ``session``'s SQL conf for whatever is built on it."""
    if frame.sparkSession is session:
        return frame
    plan = frame._jdf.queryExecution().logical()  # noqa: SLF001
    dataset = session.sparkContext._jvm.org.apache.spark.sql.classic.Dataset  # type: ignore[union-attr]  # noqa: SLF001
    return DataFrame(dataset.ofRows(session._jsparkSession, plan), session)  # noqa: SLF001
