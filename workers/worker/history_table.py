"""The fleet's own Delta tables: ``mvs_refresh_history`` (appended) and ``mvs_tasks`` (merged).

Written by the history sink (``workers/worker/history_sink.py``). Run history is appended one
Kafka partition at a time, under Delta's idempotent-write id ``txnAppId =
mvs_refresh_history:runs-<partition>``, ``txnVersion = the offset of the batch's last record``.
Delta records that pair in the commit and skips a write whose version is not above it;
``recorded_offset`` reads it back (from the log, no job), so a sink that restarts or takes a
partition over drops the records already written before it writes, and a second writer of the same
partition at the same time fails Delta's conflict check (``ConcurrentTransactionException``)
instead of writing twice. Task states are one MERGE per batch, monotonic by source offset
(``merge_tasks``).

Rows come from the pure handlers of ``workers/worker/history_rows.py``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from delta.tables import DeltaTable
from pyspark.sql import Column, SparkSession
from pyspark.sql.types import (
    ArrayType,
    BooleanType,
    DoubleType,
    IntegerType,
    LongType,
    MapType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from workers import warehouse
from workers.catalog.names import REFRESH_HISTORY_TABLE, TASKS_TABLE
from workers.config import Settings
from workers.jobs import job_group
from workers.jobs.spark.session import run_session

_S, _L, _T = StringType(), LongType(), TimestampType()
_VERSIONS = MapType(StringType(), LongType())

HISTORY_SCHEMA = StructType(
    [
        StructField("run_id", _S, False),
        StructField("task_id", _S, False),
        StructField("kind", _S, False),
        StructField("name", _S, False),
        StructField("state", _S, False),
        StructField("refresh_type", _S),
        StructField("message", _S),
        StructField("trigger", _S),
        StructField("epoch", _L),
        StructField("worker_id", _S),
        StructField("started_at", _T),
        StructField("ended_at", _T),
        StructField("duration_ms", _L),
        StructField("rows_written", _L),
        StructField("watermark_before", _VERSIONS),
        StructField("watermark_after", _VERSIONS),
        StructField("error_code", IntegerType()),
        StructField("error_severity", _S),
        StructField("error_retryable", BooleanType()),
        StructField("source_partition", IntegerType(), False),
        StructField("source_offset", _L, False),
        StructField("planning_reason", _S),
        StructField("fast_estimated_ms", DoubleType()),
        StructField("complete_estimated_ms", DoubleType()),
        StructField("change_rows", _L),
        StructField("base_rows", _L),
        StructField("rows_inserted", _L),
        StructField("rows_deleted", _L),
    ]
)
TASKS_SCHEMA = StructType(
    [
        StructField("task_id", _S, False),
        StructField("kind", _S, False),
        StructField("name", _S, False),
        StructField("state", _S, False),
        StructField("epoch", _L),
        StructField("refresh_mode", _S),
        StructField("trigger_kind", _S),
        StructField("trigger_interval_ms", _L),
        StructField("freshness_ms", _L),
        StructField("query", _S),
        StructField("base_tables", ArrayType(StringType())),
        StructField("checkpoint", _VERSIONS),
        StructField("owner", _S),
        StructField("error_code", IntegerType()),
        StructField("error_message", _S),
        StructField("last_run_id", _S),
        StructField("last_run_state", _S),
        StructField("last_run_started_at", _T),
        StructField("last_run_ended_at", _T),
        StructField("next_run_at", _T),
        StructField("created_at", _T),
        StructField("updated_at", _T),
        StructField("created_by", _S),
        StructField("source_partition", IntegerType(), False),
        StructField("source_offset", _L, False),
    ]
)
_JOB_GROUP = "mvs-history-sink"


def recorded_offset(spark: SparkSession, settings: Settings, table: str, app_id: str) -> int:
    """The last source offset written to ``table`` under ``app_id`` (-1: none, or no table yet).

    Read from Delta's log (the snapshot's SetTransaction actions): no Spark job."""
    if warehouse.is_local(settings) and not warehouse.table_exists(settings, table):
        return -1
    jvm = spark.sparkContext._jvm
    assert jvm is not None  # a live session always has its gateway
    path = warehouse.table_path(settings, table)
    log = jvm.org.apache.spark.sql.delta.DeltaLog.forTable(spark._jsparkSession, path)  # noqa: SLF001
    none = jvm.scala.Option.empty()
    snapshot = log.update(False, none, none)
    if snapshot.version() < 0:
        return -1
    found = snapshot.transactions().get(app_id)
    return int(found.get()) if found.isDefined() else -1


def append_history(
    spark: SparkSession, settings: Settings, rows: Sequence[dict[str, Any]], *, app_id: str, last_offset: int
) -> None:
    """Append run-history rows in one commit (the table is created by the first append)."""
    path = warehouse.table_path(settings, REFRESH_HISTORY_TABLE)
    with job_group(spark, _JOB_GROUP, f"append {len(rows)} runs to {REFRESH_HISTORY_TABLE}"):
        (
            spark.createDataFrame(list(rows), schema=HISTORY_SCHEMA)
            .write.format("delta")
            .mode("append")
            .option("txnAppId", app_id)
            .option("txnVersion", str(last_offset))
            .option("mergeSchema", "true")  # a table written before the planning columns gains them
            .save(path)
        )


def merge_tasks(
    spark: SparkSession, settings: Settings, rows: Sequence[dict[str, Any]], removed: Sequence[dict[str, Any]]
) -> None:
    """Upsert task rows and delete removed tasks in one MERGE keyed by task id.

    ``rows`` hold at most one row per task (its newest record), ``removed`` the tombstones as
    ``{task_id, source_partition, source_offset}``. A row only replaces one from an older record
    (lower offset of the same catalog partition: a task id always hashes to one partition), so a
    batch replayed after a crash, or written twice, changes nothing: the table converges on the
    compacted topic's meaning without an idempotent-write id."""
    path = warehouse.table_path(settings, TASKS_TABLE)
    session = run_session(spark)
    with job_group(session, _JOB_GROUP, f"merge {len(rows) + len(removed)} tasks into {TASKS_TABLE}"):
        if not DeltaTable.isDeltaTable(session, path):
            session.createDataFrame([], schema=TASKS_SCHEMA).write.format("delta").mode("ignore").save(path)
        schema = StructType([*TASKS_SCHEMA.fields, StructField("_removed", BooleanType(), False)])
        source = session.createDataFrame(
            [{**row, "_removed": False} for row in rows] + [_removed_row(tomb) for tomb in removed],
            schema=schema,
        )
        columns: dict[str, str | Column] = {name: f"s.{name}" for name in TASKS_SCHEMA.fieldNames()}
        newer = "s.source_partition <> t.source_partition OR s.source_offset > t.source_offset"
        (
            DeltaTable.forPath(session, path)
            .alias("t")
            .merge(source.alias("s"), "t.task_id = s.task_id")
            .whenMatchedDelete(condition=f"s._removed AND ({newer})")
            .whenMatchedUpdate(condition=f"NOT s._removed AND ({newer})", set=columns)
            .whenNotMatchedInsert(condition="NOT s._removed", values=columns)
            .execute()
        )


def _removed_row(tombstone: dict[str, Any]) -> dict[str, Any]:
    """The source row of a tombstone: the task id and its record's position (other columns null,
    the non-null ones placeholders)."""
    row: dict[str, Any] = dict.fromkeys(TASKS_SCHEMA.fieldNames())
    row.update(kind="", name="", state="", _removed=True)
    row.update(tombstone)
    return row
