"""MV logs: Oracle MLOG$-like Delta tables ``<T>__mlog`` holding the captured change rows of ``T``.

Change data comes from Delta's change data feed (CDF) on ``T``; capture copies it into the log
so it outlives ``T``'s VACUUM / log retention until every dependent MV has consumed it, and purge
drops what no MV needs any more (rows with ``_commit_version < safepoint``, never at or above).

The log's own progress lives in the ``userMetadata`` of each of its commits, as
``{"mvlog": {base, start_version, captured_version, retained_from}}``:

- ``start_version``: the ``T`` version whose commit enabled CDF for this log (changes are
  available from there on);
- ``captured_version``: every change of ``T`` up to this version is in the log;
- ``retained_from``: the lowest ``T`` version whose changes are all still in the log.
"""

from __future__ import annotations

import json
import threading
from collections import defaultdict
from dataclasses import asdict, dataclass, replace

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import LongType, StringType, StructField, StructType, TimestampType

from workers import warehouse
from workers.config import Settings
from workers.jobs.delta import log as deltalog
from workers.jobs.delta import write
from workers.jobs.delta.metadata import USER_METADATA_CONF, CommitId, json_object
from workers.jobs.errors import ChangesNotRetained, TableNotFound, is_write_conflict

CHANGE_COLUMNS = StructType(
    [
        StructField("_change_type", StringType()),
        StructField("_commit_version", LongType()),
        StructField("_commit_timestamp", TimestampType()),
    ]
)
_META_KEY = "mvlog"

# Capture and purge of one log are serialized per process: two overlapping captures would each
# append the same change rows. (Across processes the replaceWhere range below keeps it exact.)
_locks: defaultdict[str, threading.RLock] = defaultdict(threading.RLock)
_locks_guard = threading.Lock()


@dataclass(frozen=True)
class MvLogState:
    base: str
    start_version: int
    captured_version: int
    retained_from: int

    def user_metadata(self) -> str:
        return json.dumps({_META_KEY: asdict(self)}, sort_keys=True, separators=(",", ":"))


@dataclass(frozen=True)
class PurgeResult:
    rows_deleted: int
    captured_version: int
    safepoint: int | None
    message: str = ""


def _lock(base: str) -> threading.RLock:
    with _locks_guard:
        return _locks[base]


def read_state(spark: SparkSession, settings: Settings, base_table: str) -> MvLogState | None:
    """The log's progress from its newest commit carrying it; None if there is no MV log."""
    for commit in deltalog.iter_commits(spark, settings, warehouse.mlog_table_name(base_table)):
        body = json_object(commit.user_metadata, _META_KEY)
        if body is not None:
            return MvLogState(
                base=str(body["base"]),
                start_version=int(body["start_version"]),
                captured_version=int(body["captured_version"]),
                retained_from=int(body["retained_from"]),
            )
    return None


def _require_state(spark: SparkSession, settings: Settings, base_table: str) -> MvLogState:
    state = read_state(spark, settings, base_table)
    if state is None:
        raise TableNotFound(f"no MV log on {base_table!r} (create it first)")
    return state


def create_mv_log(spark: SparkSession, settings: Settings, base_table: str) -> int:
    """Enable CDF on ``base_table`` and create its empty MV log; idempotent.

    Returns the base version from which change data is available (the version of the commit
    that enabled CDF for this log).
    """
    with _lock(base_table):
        existing = read_state(spark, settings, base_table)
        if existing is not None:
            return existing.start_version
        base_path = warehouse.table_path(settings, base_table)
        before = deltalog.current_version(spark, settings, base_table)
        if before is None:
            raise TableNotFound(f"base table {base_table!r} not found at {base_path}")
        if _change_feed_on(settings, base_table, before):
            # Every commit after `before` records its changes: no ALTER (a commit and a Spark job).
            start = before + 1
        else:
            spark.sql(
                f"ALTER TABLE delta.`{base_path}` SET TBLPROPERTIES ({deltalog.CHANGE_FEED_PROPERTY} = true)"
            )
            # Find the ALTER's commit among those after `before`: a concurrent writer may have committed too.
            altered = [
                c.version
                for c in deltalog.iter_commits(spark, settings, base_table, after=before)
                if c.operation == "SET TBLPROPERTIES"
            ]
            start = min(altered) if altered else before + 1
        schema = StructType(spark.read.format("delta").load(base_path).schema.fields + CHANGE_COLUMNS.fields)
        state = MvLogState(base_table, start, captured_version=start - 1, retained_from=start)
        (
            spark.createDataFrame([], schema)
            .write.format("delta")
            .mode("overwrite")
            # Stats on the version column only: purge and range reads skip files whatever T's width.
            .option("delta.dataSkippingStatsColumns", "_commit_version")
            .options(**write.column_mapping(schema))  # an MV's column named `sum(x)`
            .option("userMetadata", state.user_metadata())
            .save(warehouse.table_path(settings, warehouse.mlog_table_name(base_table)))
        )
        return start


def _change_feed_on(settings: Settings, base_table: str, version: int) -> bool:
    """Whether the base's change data feed is on at ``version``, read by delta-rs; False when delta-rs
    cannot read its log (the caller then turns it on with Spark, which is right either way)."""
    try:
        configuration = warehouse.rs_table(settings, base_table, version).metadata().configuration
    except Exception:  # noqa: BLE001 - an ALTER that finds the feed on already is only a wasted commit
        return False
    return deltalog.change_feed_on(configuration)


def capture(spark: SparkSession, settings: Settings, base_table: str) -> int:
    """Copy the CDF rows of base versions (captured + 1 .. latest) into the log; returns the
    captured-up-to version. No Spark write when nothing new was committed."""
    with _lock(base_table):
        state = _require_state(spark, settings, base_table)
        latest = deltalog.current_version(spark, settings, base_table)
        if latest is None:
            raise TableNotFound(f"base table {base_table!r} not found")
        if latest <= state.captured_version:
            return state.captured_version
        lo, hi = state.captured_version, latest
        changes = (
            spark.read.format("delta")
            .option("readChangeFeed", "true")
            .option("startingVersion", lo + 1)
            .option("endingVersion", hi)
            .load(warehouse.table_path(settings, base_table))
        )
        # Replacing exactly this version range makes a replayed capture idempotent even with a
        # different txnVersion; txnAppId/txnVersion make the exact replay a cheap no-op.
        options = {
            "replaceWhere": f"_commit_version > {lo} AND _commit_version <= {hi}",
            "mergeSchema": "true",  # the base may have gained columns
        }
        commit = CommitId(f"mvlog:{base_table}", hi, replace(state, captured_version=hi).user_metadata())
        path = warehouse.table_path(settings, warehouse.mlog_table_name(base_table))
        try:
            write.write(changes, path, commit, mode="overwrite", options=options)
        except Exception as exc:
            # Another worker (the MV log's purge task, or a FAST refresh of another MV) captured
            # at the same time and committed first: if it covered this range, so did we.
            if not is_write_conflict(exc):
                raise
            now = _require_state(spark, settings, base_table)
            if now.captured_version < hi:
                raise
            return now.captured_version
        return hi


def purge(spark: SparkSession, settings: Settings, base_table: str, safepoint: int | None) -> PurgeResult:
    """Capture, then delete log rows with ``_commit_version < safepoint``.

    ``safepoint`` is the lowest base version some dependent MV still needs; None means no MV
    depends on the table, and then nothing is purged (a future MV may still want the changes).
    """
    with _lock(base_table):
        captured = capture(spark, settings, base_table)
        if safepoint is None:
            return PurgeResult(0, captured, None, f"no MV depends on {base_table}: nothing purged")
        state = _require_state(spark, settings, base_table)
        if safepoint <= state.retained_from:
            return PurgeResult(0, captured, safepoint, f"nothing below version {safepoint} left to purge")
        after = replace(state, retained_from=min(safepoint, captured + 1))
        # DELETE takes its userMetadata from the session conf: set it in a child session (own SQL
        # conf, same SparkContext) so concurrent runs in other threads never pick it up.
        child = spark.newSession()
        child.conf.set(USER_METADATA_CONF, after.user_metadata())
        mlog_path = warehouse.table_path(settings, warehouse.mlog_table_name(base_table))
        rows = child.sql(f"DELETE FROM delta.`{mlog_path}` WHERE _commit_version < {safepoint}").collect()
        deleted = int(rows[0][0]) if rows else 0
        return PurgeResult(deleted, captured, safepoint, f"deleted {deleted} change rows below {safepoint}")


def changes_missing(spark: SparkSession, settings: Settings, base_table: str, since: int) -> str | None:
    """Why the MV log on ``base_table`` does not hold every change after version ``since`` (the
    changes an MV at ``since`` needs); None: it does."""
    log = read_state(spark, settings, base_table)
    if log is None:
        return f"no MV log on {base_table}"
    if log.start_version > since + 1:
        return f"the MV log on {base_table} starts at v{log.start_version}, after the MV's v{since}"
    if log.retained_from > since + 1:
        return f"change data before v{log.retained_from} was purged"
    return None


def retained_from(spark: SparkSession, settings: Settings, base_table: str) -> int | None:
    """Lowest base version whose changes are all still in the log; None if there is no MV log."""
    state = read_state(spark, settings, base_table)
    return None if state is None else state.retained_from


def read_changes(
    spark: SparkSession, settings: Settings, base_table: str, after_version: int, up_to_version: int
) -> DataFrame:
    """Change rows of base versions (after_version, up_to_version], capturing first if needed.

    Raises ChangesNotRetained when part of that range is no longer (or never was) in the log —
    the caller then falls back to a complete refresh. (A refresh reads through ``workers.jobs.changes.reads``,
    which does not wait for a capture.)
    """
    state = _require_state(spark, settings, base_table)
    if up_to_version > state.captured_version:
        capture(spark, settings, base_table)
        state = _require_state(spark, settings, base_table)
    if up_to_version > state.captured_version:
        raise ValueError(f"{base_table} has no version {up_to_version} yet (latest {state.captured_version})")
    check_retained(state, after_version)
    return read_captured(spark, settings, base_table, after_version, up_to_version)


def check_retained(state: MvLogState, after_version: int) -> None:
    """Raise ChangesNotRetained when the log no longer holds every change after ``after_version``."""
    if after_version + 1 < state.retained_from:
        raise ChangesNotRetained(
            f"MV log of {state.base} retains changes from version {state.retained_from}, "
            f"changes after {after_version} were asked"
        )


def read_captured(
    spark: SparkSession, settings: Settings, base_table: str, after_version: int, up_to_version: int
) -> DataFrame:
    """The log's rows of base versions (after_version, up_to_version], all captured already; read at the
    log's current version, so a purge or capture committing meanwhile changes nothing read."""
    mlog = warehouse.mlog_table_name(base_table)
    pinned = deltalog.current_version(spark, settings, mlog)
    return (
        spark.read.format("delta")
        .option("versionAsOf", pinned)
        .load(warehouse.table_path(settings, mlog))
        .where((F.col("_commit_version") > after_version) & (F.col("_commit_version") <= up_to_version))
    )


def drop_mv_log(spark: SparkSession, settings: Settings, base_table: str) -> None:
    """Delete the MV log table. CDF stays on for the base: turning it off would be a commit on
    a user table, another log or CDF reader may rely on it, and it frees nothing already written."""
    with _lock(base_table):
        mlog = warehouse.mlog_table_name(base_table)
        warehouse.delete_table(settings, mlog)
        deltalog.forget_table(settings, mlog)
