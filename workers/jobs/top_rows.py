"""The rows table of a top-N MV (``<mv>__mvtopn``: its query without ORDER BY … LIMIT, plan kind
``top_n``) written whole: by a COMPLETE refresh beside the MV, or by a FAST run that cannot trust it
(``workers.jobs.fast.top_n``). Either way tagged like an MV commit of the run, plus the inner query's
layout, so the next FAST run trusts it exactly when the MV's newest commit is that run's."""

from __future__ import annotations

import hashlib
from collections.abc import Mapping

from pyspark.sql import DataFrame, SparkSession

from workers import warehouse
from workers.config import Settings
from workers.ddl.plan import TopN
from workers.jobs.delta import arrow as rs_arrow
from workers.jobs.delta import log as deltalog
from workers.jobs.delta import write
from workers.jobs.delta.metadata import CommitId, run_user_metadata, txn_version
from workers.jobs.request import RunRequest
from workers.jobs.spark.guard import guarded_sql

# The view the top n are selected from (the rows table as the run wrote it).
ROWS_VIEW = "__mvs_top_n_rows"


def rows_layout(top: TopN) -> str:
    """What the rows table's rows mean: its query (an ALTERed query makes it untrusted)."""
    return hashlib.sha256(top.inner_query.encode()).hexdigest()[:16]


def rows_commit(request: RunRequest, watermark: Mapping[str, int], top: TopN) -> CommitId:
    """The commit of run ``request``'s rows table, as the MV commit's with the layout added."""
    metadata = run_user_metadata(request, watermark, rows_layout(top))
    return CommitId(request.task_id, txn_version(request.epoch, watermark), metadata)


def rebuild_rows(
    session: SparkSession,
    settings: Settings,
    request: RunRequest,
    top: TopN,
    bases: Mapping[str, DataFrame],
    watermark: Mapping[str, int],
) -> None:
    """The inner query over ``bases`` (temp views of ``session`` already named like the bases, at
    ``watermark``), overwriting the rows table of MV ``request.mv_name``."""
    name = warehouse.top_n_table_name(request.mv_name)
    rows = guarded_sql(
        session, top.inner_query, tables=list(bases), mv_name=name, extra_functions=settings.allowed_functions
    )
    version = deltalog.current_version(session, settings, name)
    write.overwrite(settings, name, version, rows, rows_commit(request, watermark, top))


def first_n(session: SparkSession, settings: Settings, mv_name: str, top: TopN) -> DataFrame:
    """The top n of the rows table of MV ``mv_name`` as it is now, by the query's ORDER BY."""
    name = warehouse.top_n_table_name(mv_name)
    version = deltalog.current_version(session, settings, name)
    # Small (a few thousand rows of a top-N's groups): read whole by delta-rs, no Spark job; else Spark.
    rows = None if version is None else rs_arrow.read_small(session, settings, name, version)
    if rows is None:
        rows = session.read.format("delta").load(warehouse.table_path(settings, name))
    rows.createOrReplaceTempView(ROWS_VIEW)
    selected = f"SELECT * FROM {ROWS_VIEW} ORDER BY {top.order_by} LIMIT {top.limit}"
    return guarded_sql(
        session, selected, tables=[ROWS_VIEW], mv_name=mv_name, extra_functions=settings.allowed_functions
    )
