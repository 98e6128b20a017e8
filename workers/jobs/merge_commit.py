"""The Delta MERGEs a FAST run commits with (``merge_with``: the MV's and its helper state's),
idempotent (Delta's transaction identifiers and the run's metadata travel with them) and not copying
their source (it is held on the driver); for the MV (``commit_merge``) deletion vectors only for large
MV files, and the one-pass MERGE's way back to two steps.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from delta.tables import DeltaTable
from pyspark.sql import SparkSession

from workers.jobs import incremental_apply as apply
from workers.jobs.metadata import (
    MATERIALIZE_SOURCE_CONF,
    TXN_APP_ID_CONF,
    TXN_VERSION_CONF,
    USER_METADATA_CONF,
)

COMMIT_CONFS = frozenset({TXN_APP_ID_CONF, TXN_VERSION_CONF, USER_METADATA_CONF})
_DELETION_VECTORS = "spark.databricks.delta.merge.deletionVectors.persistent"
# Average MV data file size from which a MERGE marks replaced rows in deletion vectors instead of
# rewriting each file it touches: a rewrite of small files is cheaper (deletion vectors cost Delta
# ~8 more Spark jobs per MERGE), of large files far dearer (cost of the table, not of the change).
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
    for key, value in confs.items():
        session.conf.set(key, value)
    try:
        target = DeltaTable.forPath(session, path).alias("t")
        builder = target.merge(spec.source.alias("s"), spec.condition)
        builder = builder.whenMatchedDelete(condition=spec.delete_when)
        if spec.update_set:
            builder = builder.whenMatchedUpdate(set=spec.update_set)
        builder.whenNotMatchedInsert(condition=spec.insert_when, values=spec.insert_values).execute()
    finally:
        for key in confs:
            session.conf.unset(key)


def commit_merge(
    session: SparkSession,
    path: str,
    change: apply.Change,
    confs: Mapping[str, str],
    mv_checksum: Mapping[str, Any] | None,
    step: Callable[[str], None],
) -> apply.Change:
    """Commit ``change.merge`` into the MV at ``path`` with ``confs`` (``merge_confs``);
    ``mv_checksum``: Delta's checksum of the MV version the run read. A one-pass MERGE that meets a
    group to recompute commits nothing: its ``fallback`` is committed instead (``step`` names the
    run's next step). Returns the change committed."""
    assert change.merge is not None
    confs = {**confs, _DELETION_VECTORS: str(large_files(mv_checksum)).lower()}
    try:
        merge_with(session, path, change.merge, confs)
    except Exception as error:  # noqa: BLE001 - only the one-pass MERGE's own failure is taken back
        if change.fallback is None or apply.RECOMPUTE_NEEDED not in str(error):
            raise
        step("compute the change to the MV")
        change = change.fallback()  # nothing was committed: the two steps instead
        step(f"commit ({change.plan})")
        assert change.merge is not None and change.state is None, "a fallback is one plain MERGE"
        merge_with(session, path, change.merge, confs)
    return change


def large_files(checksum: Mapping[str, Any] | None) -> bool:
    """Are the MV's data files large enough for deletion vectors to pay (``DELETION_VECTOR_FILE_BYTES``)?
    From Delta's checksum of the run's MV version; unknown (no checksum) counts as small."""
    summary = checksum or {}
    size, files = summary.get("tableSizeBytes"), summary.get("numFiles")
    if not isinstance(size, int) or not isinstance(files, int) or files == 0:
        return False
    return size // files >= DELETION_VECTOR_FILE_BYTES
