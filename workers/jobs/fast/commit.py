"""The Delta MERGEs a FAST run commits with (``merge_with``: the MV's and its helper state's),
idempotent (Delta's transaction identifiers and the run's metadata travel with them) and not copying
their source (it is held on the driver); for the MV (``commit_merge``) delta-rs for plain merges where
it may write (``rs_commit``), deletion vectors only for large MV files, and the one-pass MERGE's way
back to two steps.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from delta.tables import DeltaTable
from pyspark.sql import SparkSession

from workers.config import Settings
from workers.jobs.delta import rs_commit
from workers.jobs.delta.metadata import (
    MATERIALIZE_SOURCE_CONF,
    TXN_APP_ID_CONF,
    TXN_VERSION_CONF,
    USER_METADATA_CONF,
)
from workers.jobs.fast import apply
from workers.jobs.spark import session as session_module

log = logging.getLogger(__name__)

COMMIT_CONFS = frozenset({TXN_APP_ID_CONF, TXN_VERSION_CONF, USER_METADATA_CONF})
_DELETION_VECTORS = "spark.databricks.delta.merge.deletionVectors.persistent"
# Average MV data file size from which a Spark MERGE marks replaced rows in deletion vectors instead
# of rewriting each file it touches: a rewrite of small files is cheaper (deletion vectors cost Delta
# ~8 more Spark jobs per MERGE), of large files far dearer (cost of the table, not of the change).
# delta-rs merges such an MV only when the files it would rewrite are few (``rs_commit.merge``).
DELETION_VECTOR_FILE_BYTES = 8 << 20


def merge_confs(task_id: str, txn: str, metadata: str) -> dict[str, str]:
    """Session confs for one idempotent MERGE of a held source: Delta reads a MERGE's transaction
    identifiers and user metadata from the session, and copies no source that is already held."""
    return {
        TXN_APP_ID_CONF: task_id,
        TXN_VERSION_CONF: txn,
        USER_METADATA_CONF: metadata,
        MATERIALIZE_SOURCE_CONF: "none",
    }


def merge_with(session: SparkSession, path: str, spec: apply.MergeSpec, confs: Mapping[str, str]) -> None:
    """``spec`` applied to the Delta table at ``path``, with ``confs`` set on ``session`` meanwhile."""
    with session_module.confs(session, confs):
        target = DeltaTable.forPath(session, path).alias("t")
        builder = target.merge(spec.source.alias("s"), spec.condition)
        builder = builder.whenMatchedDelete(condition=spec.delete_when)
        if spec.update_set:
            builder = builder.whenMatchedUpdate(set=spec.update_set)
        builder.whenNotMatchedInsert(condition=spec.insert_when, values=spec.insert_values).execute()


@dataclass(frozen=True)
class Target:
    """The MV a run commits to: its warehouse, name and the version the run read."""

    settings: Settings
    name: str
    version: int
    checksum: Mapping[str, Any] | None  # Delta's checksum of that version, if written
    delta_rs: bool  # may delta-rs commit to that version (``rs_commit.usable``, decided once per run)


def commit_merge(
    session: SparkSession,
    path: str,
    change: apply.Change,
    confs: Mapping[str, str],
    target: Target,
    step: Callable[[str], None],
) -> apply.Change:
    """Commit ``change.merge`` into the MV ``target`` at ``path`` with ``confs`` (``merge_confs``).
    A one-pass MERGE that meets a group to recompute commits nothing: its ``fallback`` is committed
    instead (``step`` names the run's next step). Returns the change committed."""
    assert change.merge is not None
    confs = {**confs, _DELETION_VECTORS: str(large_files(target.checksum)).lower()}
    try:
        _merge(session, path, change.merge, confs, target)
    except Exception as error:  # noqa: BLE001 - only the one-pass MERGE's own failure is taken back
        if change.fallback is None or apply.RECOMPUTE_NEEDED not in str(error):
            raise
        step(apply.COMPUTE_STEP)
        change = change.fallback()  # nothing was committed: the two steps instead
        step(f"commit ({change.plan})")
        assert change.merge is not None and change.state is None, "a fallback is one plain MERGE"
        _merge(session, path, change.merge, confs, target)
    return change


def _merge(
    session: SparkSession, path: str, spec: apply.MergeSpec, confs: Mapping[str, str], target: Target
) -> None:
    """By delta-rs when the MERGE is plain and delta-rs may write the MV (with large files, only a
    few of them: ``rs_commit.merge``), else by Spark."""
    plain, settings = spec.plain, target.settings
    if plain is not None and target.delta_rs:
        try:
            done = rs_commit.merge(
                settings,
                target.name,
                target.version,
                plain,
                spec.source,
                app_id=confs[TXN_APP_ID_CONF],
                txn_version=int(confs[TXN_VERSION_CONF]),
                metadata=confs[USER_METADATA_CONF],
                large_files=large_files(target.checksum),
            )
            if done is not None:
                return
        except rs_commit.WriteConflict:
            raise
        except Exception as refused:  # noqa: BLE001 - e.g. a column type Arrow or delta-rs lacks
            # Spark merges instead. Had delta-rs committed before failing, Delta skips Spark's MERGE:
            # it carries the same transaction identifier.
            log.warning("delta-rs did not merge into %s (%s): Spark merges", target.name, refused)
    merge_with(session, path, spec, confs)


def large_files(checksum: Mapping[str, Any] | None) -> bool:
    """Are the MV's data files large enough for deletion vectors to pay (``DELETION_VECTOR_FILE_BYTES``)?
    From Delta's checksum of the run's MV version; unknown (no checksum) counts as small."""
    summary = checksum or {}
    size, files = summary.get("tableSizeBytes"), summary.get("numFiles")
    if not isinstance(size, int) or not isinstance(files, int) or files == 0:
        return False
    return size // files >= DELETION_VECTOR_FILE_BYTES
