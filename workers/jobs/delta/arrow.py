"""Rows read by delta-rs (Arrow) handed to Spark with exactly the types Spark's own read would give."""

from __future__ import annotations

import functools
import json
import logging
import threading
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
from deltalake import DeltaTable, QueryBuilder
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.types import StructType

from workers import warehouse
from workers.config import Settings
from workers.jobs.delta import log as deltalog
from workers.jobs.spark.held import LOCAL_ROWS, rebind
from workers.jobs.spark.session import Checksum, active_spark, confs, on_jvm_lost

log = logging.getLogger(__name__)

# The largest table (data files, bytes) delta-rs reads whole for Spark: an MV whose touched rows a run
# filters on the driver (``rs_commit``), a small base a join run reads at a pinned version.
READ_LIMIT_BYTES = 16 << 20

# Rows delta-rs read, by (job group, job description) of the run that asked (``run_stats`` adds them to
# the rows Spark's stages read); the latest groups only.
_RECORDED_GROUPS = 1000
_rows_read: OrderedDict[tuple[str, str], int] = OrderedDict()
_rows_lock = threading.Lock()


def record_read(rows: int) -> None:
    """Count ``rows`` read by delta-rs for the calling thread's Spark job group and step, if any."""
    spark = active_spark()
    if spark is None:
        return
    context = spark.sparkContext
    group = context.getLocalProperty("spark.jobGroup.id")
    if not group:
        return
    key = (group, context.getLocalProperty("spark.job.description") or "")
    with _rows_lock:
        _rows_read[key] = _rows_read.get(key, 0) + rows
        _rows_read.move_to_end(key)
        while len(_rows_read) > _RECORDED_GROUPS:
            _rows_read.popitem(last=False)


def rows_read(group: str, step: str | None = None) -> int:
    """Rows delta-rs read under job ``group`` (in the step whose description contains ``step``)."""
    with _rows_lock:
        return sum(n for (g, d), n in _rows_read.items() if g == group and (step is None or step in d))


def conform(rows: pa.Table, schema: StructType) -> pa.Table:
    """``rows`` with ``schema``'s columns, in its order and of its types (DataFusion's string views,
    unsigned versions and the like cast); a column ``rows`` lacks is all NULL, as in Spark's
    ``unionByName(allowMissingColumns=True)``. Raises when a column does not cast."""
    wanted = to_arrow_schema(schema)
    columns = [
        rows.column(f.name).cast(f.type) if f.name in rows.column_names else pa.nulls(rows.num_rows, f.type)
        for f in wanted
    ]
    return pa.Table.from_arrays(columns, schema=wanted)


# Spark's createDataFrame makes a local relation of Arrow rows up to this many bytes, an RDD past it.
_LOCAL_BYTES = "spark.sql.execution.arrow.localRelationThreshold"
_BATCH_ROWS = "spark.sql.execution.arrow.maxRecordsPerBatch"


def to_spark(session: SparkSession, rows: pa.Table, schema: StructType) -> DataFrame:
    """``rows`` (conformed to ``schema``) as a Spark frame held on the driver, as ``held.hold`` holds
    rows: a local relation up to ``held.LOCAL_ROWS`` rows, an RDD of the Arrow batches past it; no
    lineage back to the table either way, so its reads run no scan."""
    slices = session.sparkContext.defaultParallelism  # one Arrow batch per partition
    batch = str(max(1, -(-rows.num_rows // slices)))
    as_rdd = {} if rows.num_rows <= LOCAL_ROWS else {_LOCAL_BYTES: "0", _BATCH_ROWS: batch}
    with confs(session, as_rdd):
        return session.createDataFrame(conform(rows, schema).combine_chunks(), schema=schema)


def small(summary: Mapping[str, Any] | None) -> bool:
    """Is a table of this summary (``warehouse.table_summary``) within ``READ_LIMIT_BYTES``?"""
    size = (summary or {}).get("tableSizeBytes")
    return isinstance(size, int) and size <= READ_LIMIT_BYTES


def read_whole(
    settings: Settings,
    name: str,
    version: int,
    schema: StructType,
    where: str | None = None,
    table: DeltaTable | None = None,
) -> pa.Table | None:
    """Table ``name`` at ``version`` (``table``, when the caller opened it already) read whole by
    delta-rs (its rows ``where`` keeps: a DataFusion predicate, files skipped by their statistics) and
    conformed to ``schema``; None when a column does not convert or delta-rs does not read the table
    (the caller reads with Spark)."""
    query = "SELECT * FROM t" + (f" WHERE {where}" if where else "")
    try:
        table = table if table is not None else warehouse.rs_table(settings, name, version)
        rows = conform(pa.table(QueryBuilder().register("t", table).execute(query)), schema)
    except Exception as unread:  # noqa: BLE001 - e.g. a column type Arrow or delta-rs lacks
        log.info("delta-rs did not read %s (%s): Spark reads", name, unread)
        return None
    record_read(rows.num_rows)
    return rows


# Column mapping modes whose tables delta-rs's query engine reads by their logical names, as Spark
# does: "name" is what Spark sets for a column name Parquet cannot hold (an MV's unaliased
# ``count(*)`` or ``sum(l_quantity)``). Only through ``QueryBuilder`` (``read_whole``): delta-rs's
# ``to_pyarrow_table`` reads such a table's columns as all NULL under protocol (2, 5), and raises
# under table features (deltalake 1.6).
_READ_MAPPINGS = frozenset({"none", "name"})
# Field metadata of column mapping (and of Iceberg compatibility's field ids), which Spark's own read
# of the table drops from its schema.
_MAPPING_KEYS = (
    "delta.columnMapping.id",
    "delta.columnMapping.physicalName",
    "delta.columnMapping.nested.ids",
    "parquet.field.id",
    "parquet.field.nested.ids",
)


def schema_of(summary: Mapping[str, Any] | None) -> StructType | None:
    """The table schema a checksum (``warehouse.table_summary``) records (logical names, without
    column mapping's field metadata, as Spark reads it), when delta-rs reads the table by those names
    (``_READ_MAPPINGS``), else None."""
    metadata = (summary or {}).get("metadata") or {}
    if not isinstance(metadata.get("schemaString"), str):
        return None
    if deltalog.column_mapping_mode(metadata.get("configuration")) not in _READ_MAPPINGS:
        return None
    schema = json.loads(metadata["schemaString"])
    return StructType.fromJson(_without_mapping(schema))


def _without_mapping(schema: Any) -> Any:
    """A Delta schema's JSON without column mapping's field metadata, nested fields included."""
    if isinstance(schema, dict):
        return {
            key: (
                {k: v for k, v in value.items() if k not in _MAPPING_KEYS}
                if key == "metadata" and isinstance(value, dict)
                else _without_mapping(value)
            )
            for key, value in schema.items()
        }
    if isinstance(schema, list):
        return [_without_mapping(item) for item in schema]
    return schema


def read_small(session: SparkSession, settings: Settings, name: str, version: int) -> DataFrame | None:
    """Table ``name`` at ``version``, held on the driver, when it is small (``READ_LIMIT_BYTES``, by
    Spark's checksum file or, for a version delta-rs wrote, its log: ``warehouse.table_summary``,
    whose schema it takes), the warehouse local and its columns read by name (``schema_of``: column
    mapping "name" too): no Delta snapshot, file-skipping or scan job in Spark. Else None."""
    found = _small_rows(settings, name, version)
    return None if found is None else to_spark(session, *found)


def _small_rows(
    settings: Settings, name: str, version: int, summary: Mapping[str, Any] | None = None
) -> tuple[pa.Table, StructType] | None:
    """``read_small``'s rows and schema (``summary``: the version's, when the caller read it)."""
    if not warehouse.is_local(settings):
        return None
    summary = summary if summary is not None else warehouse.table_summary(settings, name, version)
    schema = schema_of(summary)
    if not small(summary) or schema is None:
        return None
    rows = read_whole(settings, name, version, schema)
    return None if rows is None else (rows, schema)


# Unchanged small bases held across runs (``read_small_kept``): a table version's rows never change, and
# a join run reads the same dimension tables at the same versions run after run (TPC-H: part, supplier,
# customer, nation, region; ~0.1 s a table a run by delta-rs and Arrow). One version per table (a newer
# replaces it), known by the table's id (its metadata's: a table made again has another; a version
# delta-rs wrote, whose summary has none, is not kept), the oldest dropped past ``KEPT_BYTES_LIMIT``
# (Arrow bytes). A kept frame holds its rows and the run session that made it.
KEPT_BYTES_LIMIT = 256 << 20


@dataclass
class _Kept:
    version: int
    table_id: str
    frame: DataFrame
    nbytes: int


_kept: OrderedDict[tuple[str, str], _Kept] = OrderedDict()
_kept_lock = threading.Lock()


def read_small_kept(
    session: SparkSession, settings: Settings, name: str, version: int, checksum: Checksum | None = None
) -> DataFrame | None:
    """``read_small``, held for the next runs reading the same version of the same table. ``checksum``:
    the run's reader of the version's summary (``session.run_checksums``: read once a run)."""
    if not warehouse.is_local(settings):
        return None
    summary = (checksum or functools.partial(warehouse.table_summary, settings))(name, version)
    table_id = ((summary or {}).get("metadata") or {}).get("id")
    key = (settings.warehouse, name)
    with _kept_lock:
        found = _kept.get(key)
        same = found is not None and (found.version, found.table_id) == (version, table_id)
        # Not a frame of a SparkContext that is gone (its JVM lost, or stopped): read again.
        hit = (
            found
            if same and found and found.frame.sparkSession.sparkContext is session.sparkContext
            else None
        )
        if hit is not None:
            _kept.move_to_end(key)
        elif found is not None:
            del _kept[key]  # another version, table or context: never read again, nor kept
    if hit is not None:
        return rebind(hit.frame, session)
    small_rows = _small_rows(settings, name, version, summary)
    if small_rows is None:
        return None
    frame = to_spark(session, *small_rows)
    nbytes = small_rows[0].nbytes
    if isinstance(table_id, str) and nbytes <= KEPT_BYTES_LIMIT:
        with _kept_lock:
            _kept[key] = _Kept(version, table_id, frame, nbytes)
            _kept.move_to_end(key)
            while sum(k.nbytes for k in _kept.values()) > KEPT_BYTES_LIMIT:
                _kept.popitem(last=False)
    return frame


def forget_kept() -> None:
    """Drop every held table (tests, and when the JVM holding them is lost)."""
    with _kept_lock:
        _kept.clear()


on_jvm_lost(forget_kept)
