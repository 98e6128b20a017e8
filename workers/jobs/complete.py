"""Complete refresh of an MV: recompute its query over pinned base versions, overwrite its table.

The data and the watermark it reflects land in one Delta commit (``userMetadata``), and Delta's
idempotent-write id (``txnAppId``/``txnVersion``, see ``workers.jobs.delta.metadata``) makes a replayed
or stale-owner commit a no-op, so a run never needs a lock to be safe.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from pyspark.sql import DataFrame, SparkSession

from workers import warehouse
from workers.config import Settings
from workers.jobs import top_rows
from workers.jobs.delta import files, write
from workers.jobs.delta import log as deltalog
from workers.jobs.delta.metadata import (
    CommitId,
    MvWatermark,
    decode_user_metadata,
    run_user_metadata,
    txn_version,
)
from workers.jobs.rebuilt import Rebuilt
from workers.jobs.request import RunRequest
from workers.jobs.spark import groups
from workers.jobs.spark import session as session_module
from workers.jobs.spark.groups import cancel_run
from workers.jobs.spark.guard import guarded_sql

__all__ = [
    "MvWatermark",
    "RefreshResult",
    "cancel_run",
    "drop_mv_table",
    "read_watermark",
    "refresh_complete",
]


@dataclass(frozen=True)
class RefreshResult:
    applied: bool  # False: Delta skipped the commit (same watermark already applied, or stale epoch)
    rows_written: int
    watermark_before: dict[str, int] = field(default_factory=dict)
    watermark_after: dict[str, int] = field(default_factory=dict)
    delta_version: int | None = None  # MV table version holding the content after the run
    message: str = ""
    spark_jobs: int | None = None  # Spark jobs the run started (its job group's), None if not counted
    # Rows the commit inserted into / deleted from the MV (its operation metrics), None: not known.
    rows_inserted: int | None = None
    rows_deleted: int | None = None
    # FAST: what it spent rebuilding helper state from the bases (``NO_REBUILD``: nothing); None:
    # not measured (a complete refresh, a run that only moved the watermark).
    rebuilt: Rebuilt | None = None


def read_watermark(
    spark: SparkSession | None, settings: Settings, mv_name: str, *, at: int | None = None
) -> MvWatermark | None:
    """The ``mvs`` metadata of the newest MV commit carrying it (later maintenance commits such as
    OPTIMIZE carry none), at version ``at`` or before (None: the latest); None if the table does not
    exist or no refresh committed. ``spark`` may be None for a local warehouse (see
    ``deltalog.iter_commits``). A downstream MV's watermark names an upstream MV's version: what the
    upstream reflected there (``at``) is the base versions the downstream reflects through it."""
    for commit in deltalog.iter_commits(spark, settings, mv_name, newest=at):
        found = decode_user_metadata(commit.user_metadata, commit.version)
        if found is not None:
            return found
    return None


def refresh_complete(spark: SparkSession, settings: Settings, request: RunRequest) -> RefreshResult:
    """Recompute the request's query over its pinned base versions and overwrite the MV table with
    it, idempotently.

    Every Spark job runs in the calling thread under ``request.job_group`` (``cancel_run`` stops it
    and this raises RunCancelled). Raises QueryRefused (``workers.jobs.spark.guard``) when the query may
    not run.

    The user's text runs unchanged in a session of the run's own, where each base table's name is a
    temp view of that table at its pinned version (temp views shadow any catalog table of that name):
    the result is exactly "query at these versions", whatever commits land while it runs. That session
    runs without adaptive execution, which would make a Spark job of every shuffle stage, Delta's
    snapshot loads included: a refresh of a one-base MV is 5 jobs instead of 10 (Delta's state of the
    MV table for the idempotent-write check, the base's state and its file list, the write, the MV's
    files it replaces). The count is in the result (``spark_jobs``).
    """
    what = f"complete refresh of {request.task_id} (run {request.run_id})"
    with groups.job_group(spark, request.job_group, what):
        before = read_watermark(spark, settings, request.mv_name)
        mv_version_before = deltalog.current_version(spark, settings, request.mv_name)
        session = session_module.run_session(spark, adaptive=False)
        pinned = {base: read_at(session, settings, base, version) for base, version in request.pinned.items()}
        try:
            frame = run_query(session, settings, request.query, pinned, mv_name=request.mv_name)
            fast = request.plan.fast_refresh
            # The next FAST run maintains the top-N's rows (``top_rows``): written here, the MV is
            # their top n, and that run need not rebuild them. For FORCE only at the first build,
            # which FORCE's first FAST run (a probe) follows: else it recomputes them instead of the
            # change, and the next run rebuilds their state (TPC-H SF 1 q03, q10, session 34: 4.6 s
            # then 6.9 s, where FAST's runs took 10.4 then 2.6 s). FORCE's later complete runs (by
            # cost: likely again next time; a bulk change; a probe) keep no helper state, as for other
            # plans: a FAST run after one rebuilds it (its REBUILD cost, ``worker.costs``).
            first_build = before is None or mv_version_before is None
            keeps_rows = request.mode == "FAST" or (request.mode == "FORCE" and first_build)
            if fast is not None and fast.top_n is not None and keeps_rows:
                top_rows.rebuild_rows(session, settings, request, fast.top_n, pinned, request.watermark)
                frame = top_rows.first_n(session, settings, request.mv_name, fast.top_n)
            groups.check_cancelled(request.job_group)
            metadata = run_user_metadata(request, request.watermark, technique="COMPLETE")
            commit = CommitId(request.task_id, txn_version(request.epoch, request.watermark), metadata)
            write.overwrite(settings, request.mv_name, mv_version_before, frame, commit)
        finally:
            for view in [*pinned, top_rows.ROWS_VIEW]:
                session.catalog.dropTempView(view)
        result = landed(spark, settings, request, mv_version_before, before)
    return replace(result, spark_jobs=groups.spark_jobs(spark, request.job_group))


def read_at(spark: SparkSession, settings: Settings, name: str, version: int) -> DataFrame:
    """Table ``name`` as of ``version`` (Delta time travel by path; ``files.read_within`` can read it
    narrowed to a few of its files)."""
    reader = spark.read.format("delta").option("versionAsOf", version)
    return files.remember(reader.load(warehouse.table_path(settings, name)), settings, name, version)


def run_query(
    session: SparkSession, settings: Settings, query: str, tables: dict[str, DataFrame], *, mv_name: str
) -> DataFrame:
    """The MV ``query`` exactly as written, in ``session`` (a run's own, see ``run_session``), over
    ``tables``: each registered as a temp view under its base table's name, replacing an earlier one
    (a frame already returned keeps the data it was analyzed with). Checked first by the guard."""
    for base, frame in tables.items():
        frame.createOrReplaceTempView(base)
    return guarded_sql(
        session, query, tables=list(tables), mv_name=mv_name, extra_functions=settings.allowed_functions
    )


def landed(
    spark: SparkSession,
    settings: Settings,
    request: RunRequest,
    mv_version_before: int | None,
    before: MvWatermark | None,
) -> RefreshResult:
    """Did our commit land? Look for it among the commits after the version seen before writing
    (comparing versions alone would mistake another writer's commit for ours). Not landed: Delta's
    idempotent-write fence skipped it (an older epoch, or this watermark already applied)."""
    watermark, epoch, run_id = request.watermark, request.epoch, request.run_id
    watermark_before = dict(before.watermark) if before else {}
    for commit in deltalog.iter_commits(spark, settings, request.mv_name, after=mv_version_before):
        mine = decode_user_metadata(commit.user_metadata, commit.version)
        if mine is not None and mine.run_id == run_id and mine.epoch == epoch and mine.watermark == watermark:
            rows = int(commit.operation_metrics.get("numOutputRows", "0"))
            return RefreshResult(
                applied=True,
                rows_written=rows,
                watermark_before=watermark_before,
                watermark_after=dict(watermark),
                delta_version=commit.version,
                message=f"wrote {rows} rows at version {commit.version}",
                rows_inserted=rows,  # deleted: every row before (``table_size`` of the MV knows them)
            )
    current = read_watermark(spark, settings, request.mv_name)
    if current is not None and current.epoch > epoch:
        why = f"stale epoch {epoch}: epoch {current.epoch} already wrote"
    elif current is not None and current.epoch == epoch and current.watermark == watermark:
        why = "this watermark was already applied"
    else:
        why = f"Delta already recorded a txnVersion >= {txn_version(epoch, watermark)}"
    return RefreshResult(
        applied=False,
        rows_written=0,
        watermark_before=watermark_before,
        watermark_after=dict(current.watermark) if current else {},
        delta_version=deltalog.current_version(spark, settings, request.mv_name),
        message=f"skipped by Delta idempotent write: {why}",
    )


def drop_mv_table(settings: Settings, mv_name: str) -> None:
    """Delete the MV table folder, its helper tables' (``warehouse.helper_tables``; cancel its runs
    first) and its MV log's (``<mv>__mlog``: dropped with the MV, whichever of the two tasks goes
    first). No-op for what does not exist."""
    names = (mv_name, *warehouse.helper_tables(mv_name), warehouse.mlog_table_name(mv_name))
    for name in names:
        warehouse.delete_table(settings, name)
        deltalog.forget_table(settings, name)
