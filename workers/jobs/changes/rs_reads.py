"""A base table's change rows read by delta-rs (``deltalake``) instead of Spark, for
``workers.jobs.changes.reads``.

Why: Spark's change-data-feed read of a few commits costs a Delta snapshot per version bound and a scan
job, and holding what it read on the driver another (past 100,000 rows: a checkpoint and a count, 3
jobs). delta-rs reads the same rows as Arrow in milliseconds, and Spark takes them as a local relation
(``bench.fast_vs_complete``, 110,000 change rows of 3 commits: ~1 s -> ~0.15 s).

The rows must be exactly Spark's, so delta-rs reads only where its change data feed is Spark's: a local
warehouse (an object store keeps Spark's credentials and retries); a base without deletion vectors,
column mapping, type widening or partitions (with deletion vectors a DELETE writes no change files, and
Spark derives the deleted rows from the vectors); a range without a schema change. Captured versions
come from the MV log, a plain Delta table delta-rs reads with a version filter. Anything else, a read
delta-rs fails, or more than ``ARROW_BYTES`` of rows: None, and Spark reads (and raises the errors a
user sees). ``_commit_timestamp`` is then the commit's ``commitInfo`` time where Spark's is its log
file's, milliseconds apart; no MV query reads it (a base has no such column).
"""

from __future__ import annotations

import logging

import pyarrow as pa
from deltalake import DeltaTable, QueryBuilder
from pyspark.sql.types import StructType

from workers import warehouse
from workers.config import Settings
from workers.jobs.delta import log as deltalog
from workers.jobs.delta.arrow import conform, record_read

log = logging.getLogger(__name__)

# The most bytes of change rows read this way (Arrow, held by the driver); a larger range is read and
# held by Spark, on the executors.
ARROW_BYTES = 64 << 20
# Table features with which delta-rs's change data feed could differ from Spark's (see above).
_UNREAD_FEATURES = frozenset({"deletionVectors", "columnMapping", "typeWidening", "typeWidening-preview"})


class _TooLarge(Exception):
    pass


def read(
    settings: Settings, base: str, since: int, until: int, captured_version: int, schema: StructType
) -> pa.Table | None:
    """The change rows of ``base`` versions (since, until], conformed to ``schema`` (Spark's frame of the
    same read): versions up to ``captured_version`` from the MV log, later ones from the base's change
    data feed. None where Spark must read them (see the module's docstring)."""
    if not warehouse.is_local(settings):
        return None
    try:
        parts: list[pa.Table] = []
        if since < captured_version:
            parts.append(_captured(settings, base, since, min(until, captured_version)))
        first = max(since, captured_version) + 1
        if first <= until:
            table = warehouse.rs_table(settings, base, until)
            if not _feed_readable(settings, table, base, first, until):
                return None
            feed = table.load_cdf(starting_version=first, ending_version=until)
            parts.append(_collect(feed, ARROW_BYTES - sum(part.nbytes for part in parts)))
        rows = pa.concat_tables([conform(part, schema) for part in parts or [pa.table({})]])
    except _TooLarge:
        return None
    except Exception as unread:  # noqa: BLE001 - a range or type delta-rs does not read: Spark reads
        log.info(
            "delta-rs did not read the changes of %s v%d..v%d (%s): Spark reads",
            base,
            since + 1,
            until,
            unread,
        )
        return None
    record_read(rows.num_rows)
    return rows


def _feed_readable(settings: Settings, table: DeltaTable, base: str, first: int, until: int) -> bool:
    """Is Spark's change data feed of versions first..until what delta-rs reads (see the module)?"""
    protocol, metadata = table.protocol(), table.metadata()
    features = set(protocol.reader_features or ()) | set(protocol.writer_features or ())
    if features & _UNREAD_FEATURES or metadata.partition_columns:
        return False
    if deltalog.column_mapping_mode(metadata.configuration) != "none":
        return False
    schema = _schema_at(settings, base, first - 1) if first > 0 else None
    for version in range(first, until + 1):
        for action in warehouse.read_commit(settings, base, version):
            changed = (action.get("metaData") or {}).get("schemaString")
            if changed is not None:  # a property set (e.g. the MV log's own) is fine, a new schema is not
                if schema is not None and changed != schema:
                    return False
                schema = changed
            file = action.get("add") or action.get("remove") or {}
            if file.get("deletionVector"):
                return False
    return True


def _schema_at(settings: Settings, base: str, version: int) -> str | None:
    summary = warehouse.table_summary(settings, base, version)
    return ((summary or {}).get("metadata") or {}).get("schemaString")


def _captured(settings: Settings, base: str, after: int, up_to: int) -> pa.Table:
    """The MV log's rows of base versions (after, up_to], at the log's latest version."""
    mlog = warehouse.rs_table(settings, warehouse.mlog_table_name(base))
    query = f'SELECT * FROM mlog WHERE "_commit_version" > {int(after)} AND "_commit_version" <= {int(up_to)}'
    return _collect(QueryBuilder().register("mlog", mlog).execute(query), ARROW_BYTES)


def _collect(stream: object, budget: int) -> pa.Table:
    """The batches of an Arrow stream, stopping (``_TooLarge``) past ``budget`` bytes."""
    reader = pa.RecordBatchReader.from_stream(stream)
    batches = []
    for batch in reader:
        budget -= batch.nbytes
        if budget < 0:
            raise _TooLarge
        batches.append(batch)
    return pa.Table.from_batches(batches, schema=reader.schema)
