"""A base read at a pinned version narrowed to the data files a run's key values can be in, chosen from
the Delta log's per-file statistics by delta-rs and read by Spark as those Parquet files.

Reading ``delta`` at a version with a key filter costs a run more than the rows: Delta loads the
version's snapshot, runs a file-skipping job over its file list, and skips by an ``IN`` list's one
min..max (so the ranges of the values go in the plan beside it, their literals inlined in the
generated code: a compile each run, ~30 ms a stage; TPC-H SF 1, a join aggregate's round: 18
compiles, 0.5-0.6 s). Here the files come from the log (delta-rs, milliseconds, no Spark job), each
kept when a value range (``key_filter.value_spans``) meets its min..max, and the plan holds only a
Parquet scan of them: no snapshot, no skipping job, no range literals.

Only where a Parquet read of the files is the Delta read: no deletion vectors, column mapping, type
widening or other reader feature, no partition columns, files under the table's folder; else None and
the caller reads through Delta as before.
"""

from __future__ import annotations

import logging
import weakref
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import unquote, urlparse

import pyarrow as pa
from deltalake import DeltaTable
from pyspark.sql import DataFrame
from pyspark.sql.types import DataType, DateType

from workers import warehouse
from workers.config import Settings
from workers.jobs.delta import log as deltalog
from workers.jobs.delta.key_filter import RANGE_TYPES, value_spans

log = logging.getLogger(__name__)

# Reader features whose tables' data files read as plain Parquet give the table's rows.
PLAIN_READER_FEATURES = frozenset({"timestampNtz", "v2Checkpoint", "vacuumProtocolCheck"})

# The most files read by list: Spark checks each path (past ``spark.sql.sources.parallelPartitionDiscovery
# .threshold``, set as high in a run session, in a listing job); more go through Delta.
FILE_LIMIT = 1000


@dataclass(frozen=True)
class _Read:
    settings: Settings
    name: str
    version: int


# The Delta reads ``remember`` saw (the frame ``complete.read_at`` returned), while the frame lives.
_reads: weakref.WeakKeyDictionary[DataFrame, _Read] = weakref.WeakKeyDictionary()


def remember(frame: DataFrame, settings: Settings, name: str, version: int) -> DataFrame:
    """``frame``, the Delta read of table ``name`` at ``version``, marked as such (``read_within``)."""
    _reads[frame] = _Read(settings, name, version)
    return frame


def same_read(frame: DataFrame, source: DataFrame) -> DataFrame:
    """``frame``, some of ``source``'s columns, marked as ``source``'s Delta read where it is one:
    ``read_within`` then reads those columns of its files."""
    read = _reads.get(source)
    if read is not None:
        _reads[frame] = read
    return frame


def read_within(frame: DataFrame, column: str, values: Sequence[object], most: int) -> DataFrame | None:
    """``frame`` (a ``remember``-ed Delta read) as the Parquet files whose statistics of ``column``
    meet one of at most ``most`` ranges of the non-NULL ``values`` (files with NULLs in it too when
    None is one): a superset of its rows whose ``column`` is among ``values``, the caller filters
    exactly. None when ``frame`` is not such a read, the column's type has no ranges, or the table's
    files do not read as Parquet alone."""
    read = _reads.get(frame)
    field = next((f for f in frame.schema.fields if f.name.lower() == column.lower()), None)
    if read is None or field is None or not isinstance(field.dataType, RANGE_TYPES):
        return None
    try:
        table = warehouse.rs_table(read.settings, read.name, read.version)
        if not _plain(table):
            return None
        kept = _kept(pa.table(table.get_add_actions(flatten=True)), field.name, field.dataType, values, most)
    except Exception as unread:  # noqa: BLE001 - the Delta read stays available: it is the fallback
        log.info("files of %s at %s not listed (%s): Delta reads", read.name, read.version, unread)
        return None
    if kept is None or len(kept) > FILE_LIMIT:
        return None
    session = frame.sparkSession
    if not kept:
        return session.createDataFrame([], frame.schema)
    root = warehouse.table_path(read.settings, read.name)
    return session.read.schema(frame.schema).parquet(*[f"{root}/{path}" for path in kept])


def _plain(table: DeltaTable) -> bool:
    protocol, metadata = table.protocol(), table.metadata()
    features = set(protocol.reader_features or ())
    plain_protocol = protocol.min_reader_version == 1 or (
        protocol.min_reader_version == 3 and features <= PLAIN_READER_FEATURES
    )
    mapping = deltalog.column_mapping_mode(metadata.configuration)
    return plain_protocol and not metadata.partition_columns and mapping == "none"


def _kept(
    actions: pa.Table, column: str, dtype: DataType, values: Sequence[object], most: int
) -> list[str] | None:
    """The relative paths of the files ``read_within`` reads, or None when one is not under the table's
    folder (an absolute path: a shallow clone's)."""
    dates = isinstance(dtype, DateType)

    def point(value: Any) -> int:
        return int(value.toordinal() if dates else value)

    spans = value_spans([point(v) for v in values if v is not None], most)
    nulls = None in values
    names = set(actions.column_names)
    low, high, null_counts = (
        actions.column(f"{stat}.{column}").to_pylist() if f"{stat}.{column}" in names else None
        for stat in ("min", "max", "null_count")
    )
    records = actions.column("num_records").to_pylist()
    kept = []
    for i, path in enumerate(actions.column("path").to_pylist()):
        relative = unquote(path)
        if urlparse(path).scheme or relative.startswith("/"):
            return None
        lo, hi = (low[i] if low else None), (high[i] if high else None)
        if lo is None or hi is None:  # only NULLs (counted), else no statistics: any value
            only_nulls = (
                null_counts is not None and null_counts[i] is not None and null_counts[i] == records[i]
            )
            meets = nulls if only_nulls else True
        else:
            first, last = point(lo), point(hi)
            has_nulls = null_counts is None or null_counts[i] is None or null_counts[i] > 0
            meets = any(a <= last and first <= b for a, b in spans) or (nulls and has_nulls)
        if meets:
            kept.append(relative)
    return kept
