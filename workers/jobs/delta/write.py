"""The one seam for an idempotent Delta commit, whoever writes it (Spark or delta-rs).

Every commit a run makes carries a ``CommitId`` (``workers.jobs.delta.metadata``): Delta's
idempotent-write id and the commit's ``userMetadata``. Delta skips a commit whose txnVersion is not
above the one recorded for its app id, so a replay or a stale owner's commit lands nowhere; a run
never needs a lock. Spark takes the id as writer options (``write``) or, for a MERGE, which has no
writer options, as confs of the run's own session (``spark_merge``); delta-rs as commit properties
(``rs_commit``). ``merge`` and ``overwrite`` choose who writes an MV: delta-rs where it may (cheaper
for small changes, see ``rs_commit``), else Spark, under the same id either way.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from delta.tables import DeltaTable
from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql.types import StructType

from workers import warehouse
from workers.config import Settings
from workers.jobs.delta import log as deltalog
from workers.jobs.delta import rs_commit
from workers.jobs.delta.metadata import (
    MATERIALIZE_SOURCE_CONF,
    TXN_APP_ID_CONF,
    TXN_VERSION_CONF,
    USER_METADATA_CONF,
    CommitId,
)
from workers.jobs.delta.rs_commit import PlainMerge
from workers.jobs.spark import session as session_module

log = logging.getLogger(__name__)

# Delta's DELTA_INVALID_CHARACTERS_IN_COLUMN_NAMES without column mapping.
INVALID_CHARACTERS = frozenset(" ,;{}()\n\t=")
# The session confs a MERGE takes its commit's id from: a run's session starts without them.
COMMIT_CONFS = frozenset({TXN_APP_ID_CONF, TXN_VERSION_CONF, USER_METADATA_CONF})
_DELETION_VECTORS = "spark.databricks.delta.merge.deletionVectors.persistent"
# Average MV data file size from which a Spark MERGE marks replaced rows in deletion vectors instead
# of rewriting each file it touches: a rewrite of small files is cheaper (deletion vectors cost Delta
# ~8 more Spark jobs per MERGE), of large files far dearer (cost of the table, not of the change).
# delta-rs merges such an MV only when the files it would rewrite are few (``rs_commit.merge``).
DELETION_VECTOR_FILE_BYTES = 8 << 20


@dataclass(frozen=True)
class MergeSpec:
    """A MERGE source and the clauses to apply it with (``s`` = source alias, ``t`` = target)."""

    source: DataFrame
    condition: Column
    delete_when: Column
    update_set: dict[str, str | Column]
    insert_when: Column
    insert_values: dict[str, str | Column]
    plain: PlainMerge | None = None  # the same MERGE told without Spark expressions (``rs_commit``)


@dataclass(frozen=True)
class Target:
    """The MV a run commits to: its warehouse, name and the version the run read."""

    settings: Settings
    name: str
    version: int
    checksum: Mapping[str, Any] | None  # Delta's checksum of that version, if written
    delta_rs: bool  # may delta-rs commit to that version (``rs_commit.usable``, decided once per run)

    @property
    def path(self) -> str:
        return warehouse.table_path(self.settings, self.name)


def write(
    frame: DataFrame, path: str, commit: CommitId, *, mode: str, options: Mapping[str, str] | None = None
) -> None:
    """``frame`` written by Spark to the Delta table at ``path`` (``mode``: "append" / "overwrite"),
    in one commit carrying ``commit``."""
    writer = frame.write.format("delta").mode(mode).options(**(options or {}))
    writer.options(**commit.writer_options()).save(path)


def fence(session: SparkSession, path: str, commit: CommitId) -> None:
    """An empty commit carrying ``commit`` (``CommitId.fence``): from now on Delta skips every commit
    of the same app id with a lower version, i.e. every older epoch's."""
    _spark_empty_commit(session, path, commit)


def empty_commit(session: SparkSession, target: Target, commit: CommitId) -> None:
    """An empty commit carrying ``commit`` on ``target`` (a run with no change row: only its watermark
    moves): by delta-rs where it may write the table (no Spark job), else by Spark (a snapshot and a
    write). Skipped by Delta, either way, where ``commit`` was already recorded."""
    if target.delta_rs:
        rs_commit.empty_commit(target.settings, target.name, target.version, commit)
        return
    _spark_empty_commit(session, target.path, commit)


def _spark_empty_commit(session: SparkSession, path: str, commit: CommitId) -> None:
    schema = session.read.format("delta").load(path).schema
    write(session.createDataFrame([], schema), path, commit, mode="append")


def spark_merge(session: SparkSession, path: str, spec: MergeSpec, commit: CommitId) -> None:
    """``spec`` applied by Spark to the Delta table at ``path`` in one commit carrying ``commit``, its
    source not copied first (it is held on the driver: ``workers.jobs.spark.held``)."""
    confs = {**commit.session_confs(), MATERIALIZE_SOURCE_CONF: "none"}
    _spark_merge(session, path, spec, confs)


def merge(session: SparkSession, target: Target, spec: MergeSpec, commit: CommitId) -> None:
    """``spec`` committed into the MV ``target``: by delta-rs when the MERGE is plain and delta-rs
    may write the MV (with large files, only a few of them: ``rs_commit.merge``), else by Spark,
    with deletion vectors only for large MV files."""
    large = large_files(target.checksum)
    if spec.plain is not None and target.delta_rs:
        try:
            merged = rs_commit.merge(
                target.settings,
                target.name,
                target.version,
                spec.plain,
                spec.source,
                commit,
                large_files=large,
            )
            if merged is not None:
                return
        except rs_commit.WriteConflict:
            raise
        except Exception as refused:  # noqa: BLE001 - e.g. a column type Arrow or delta-rs lacks
            # Spark merges instead. Had delta-rs committed before failing, Delta skips Spark's MERGE:
            # it carries the same transaction identifier.
            log.warning("delta-rs did not merge into %s (%s): Spark merges", target.name, refused)
    confs = {**commit.session_confs(), MATERIALIZE_SOURCE_CONF: "none", _DELETION_VECTORS: str(large).lower()}
    _spark_merge(session, target.path, spec, confs)


def append(target: Target, frame: DataFrame, commit: CommitId) -> None:
    """``frame`` appended to the MV ``target`` in one commit carrying ``commit``: by delta-rs where it
    may write the MV and the rows are few (``rs_commit.append``: no Delta job of Spark's), else by
    Spark."""
    if target.delta_rs:
        settings, name, version = target.settings, target.name, target.version
        if rs_commit.append(settings, name, version, frame, commit) is not None:
            return
    write(frame, target.path, commit, mode="append")


def overwrite(settings: Settings, name: str, version: int | None, frame: DataFrame, commit: CommitId) -> None:
    """A complete result ``frame`` replacing the MV ``name`` (read at ``version``; None: the first
    build), by delta-rs where it may (``rs_commit.overwrite``), else by Spark."""
    if version is not None and rs_commit.overwrite(settings, name, version, frame, commit) is not None:
        return
    # Deletion vectors on when Spark makes the table (the first build): an incremental MERGE then marks
    # the rows it replaces instead of rewriting every file holding one (cost follows the change); an
    # older MV table keeps its protocol (readers without deletion vectors still read it).
    options = {"overwriteSchema": "true", "delta.enableDeletionVectors": "true"}
    options.update(column_mapping(frame.schema))  # only where a column's name needs it
    write(frame, warehouse.table_path(settings, name), commit, mode="overwrite", options=options)


def column_mapping(schema: StructType) -> dict[str, str]:
    """The table option that lets ``schema``'s column names be stored: column mapping by name where a
    name has characters Delta refuses without it (Spark names an unnamed expression by its text,
    ``sum(l_quantity)``), nothing elsewhere. delta-rs reads such a table when it is small
    (``arrow.schema_of``) but never writes it (``rs_commit``); Spark's writes, MERGE and change data
    feed work on them."""
    if any(set(name) & INVALID_CHARACTERS for name in schema.names):
        return {deltalog.COLUMN_MAPPING_PROPERTY: "name"}
    return {}


def large_files(checksum: Mapping[str, Any] | None) -> bool:
    """Are the MV's data files large enough for deletion vectors to pay (``DELETION_VECTOR_FILE_BYTES``)?
    From Delta's checksum of the run's MV version; unknown (no checksum) counts as small."""
    summary = checksum or {}
    size, files = summary.get("tableSizeBytes"), summary.get("numFiles")
    if not isinstance(size, int) or not isinstance(files, int) or files == 0:
        return False
    return size // files >= DELETION_VECTOR_FILE_BYTES


def _spark_merge(session: SparkSession, path: str, spec: MergeSpec, confs: Mapping[str, str]) -> None:
    with session_module.confs(session, confs):
        target = DeltaTable.forPath(session, path).alias("t")
        builder = target.merge(spec.source.alias("s"), spec.condition)
        builder = builder.whenMatchedDelete(condition=spec.delete_when)
        if spec.update_set:
            builder = builder.whenMatchedUpdate(set=spec.update_set)
        builder.whenNotMatchedInsert(condition=spec.insert_when, values=spec.insert_values).execute()
