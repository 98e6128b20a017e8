"""The change rows of a base table for a version range, read once per process and shared by every MV
refreshed from them (scan once, fan out: seed 001, MatrixOne ISCP).

Where the rows come from: versions the MV log has captured are read from the log (it outlives the
base's VACUUM); versions after that straight from the base's change data feed. So a refresh never
waits for a capture: the MV log's own task captures on its schedule (``mvlog.purge``), and the
refresh reads the newest commits where they already are. On a local warehouse delta-rs reads them
where its change data feed is Spark's (``rs_reads``: milliseconds instead of Spark jobs), else Spark.

Sharing: the rows of (since, until] are held by the driver once (``held.hold``) and kept for a short
while; a refresh of another MV on the same base, pinned at the same ``until`` with a watermark at or
after ``since``, takes them filtered by version instead of reading again. Concurrent refreshes of the
same range wait for the first read (single flight). A base version's change rows never change once
committed, so a held range is right for as long as the base is the same table: the key carries the
timestamp of the ``until`` commit, which a re-created table does not reproduce.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from workers import warehouse
from workers.config import Settings
from workers.jobs.changes import mvlog
from workers.jobs.changes import rs_reads as rs_changes
from workers.jobs.delta import arrow as rs_arrow
from workers.jobs.delta import log as deltalog
from workers.jobs.errors import ChangesNotRetained, TableNotFound, classify_failure
from workers.jobs.spark import held, session

# How long a held range waits for the other MVs on its base, and the most rows all held ranges
# keep together (the oldest go first).
SHARE_SECONDS = 300.0
SHARED_ROWS_LIMIT = 1_000_000

_Key = tuple[str, str, int, int | None]  # warehouse, base, until, timestamp of the until commit


@dataclass
class _Range:
    since: int
    frame: DataFrame
    rows: int
    held_at: float


@dataclass(frozen=True)
class Changes:
    """Change rows of (since, until] and whether this run read them or took them from another's read."""

    frame: DataFrame
    shared: bool
    rows: int  # held for the range (a shared range's may start before this run's watermark)


_lock = threading.Lock()
_held: dict[_Key, _Range] = {}
_reading: dict[_Key, threading.Lock] = {}


def read(session: SparkSession, settings: Settings, base: str, since: int, until: int) -> Changes:
    """Change rows of base versions (since, until], held; ``_change_type`` / ``_commit_version`` /
    ``_commit_timestamp`` as in Delta's change data feed.

    Raises ChangesNotRetained when part of the range is neither in the MV log nor in the base's change
    data any more (the caller refreshes completely), TableNotFound without an MV log.
    """
    key = (settings.warehouse, base, until, _commit_timestamp(session, settings, base, until))
    with _lock:
        gate = _reading.setdefault(key, threading.Lock())
    with gate:  # one read per range at a time: the others take its rows
        found = _take(key, since)
        if found is not None:
            frame = held.rebind(found.frame, session).where(F.col("_commit_version") > since)
            return Changes(frame, shared=True, rows=found.rows)
        frame, rows = _hold(session, settings, base, since, until)
        _keep(key, since, frame, rows)
        return Changes(frame, shared=False, rows=rows)


def forget() -> None:
    """Drop every held range (tests, and when the JVM holding them is lost)."""
    with _lock:
        _held.clear()


session.on_jvm_lost(forget)


def _commit_timestamp(session: SparkSession, settings: Settings, base: str, version: int) -> int | None:
    for commit in deltalog.iter_commits(session, settings, base, after=version - 1):
        if commit.version == version:
            return commit.timestamp_ms
    return None


def _take(key: _Key, since: int) -> _Range | None:
    now = time.monotonic()
    with _lock:
        for old in [k for k, r in _held.items() if now - r.held_at > SHARE_SECONDS]:
            del _held[old]
        found = _held.get(key)
        return found if found is not None and found.since <= since else None


def _keep(key: _Key, since: int, frame: DataFrame, rows: int) -> None:
    if rows > SHARED_ROWS_LIMIT:
        return
    with _lock:
        _held[key] = _Range(since, frame, rows, time.monotonic())
        while sum(r.rows for r in _held.values()) > SHARED_ROWS_LIMIT:
            del _held[min(_held, key=lambda k: _held[k].held_at)]


def _hold(
    session: SparkSession, settings: Settings, base: str, since: int, until: int
) -> tuple[DataFrame, int]:
    try:
        frame, captured = _read(session, settings, base, since, until)
        rows = rs_changes.read(settings, base, since, until, captured, frame.schema)
        if rows is not None:  # read by delta-rs: held on the driver already, no Spark job
            return rs_arrow.to_spark(session, rows, frame.schema), rows.num_rows
        return held.hold_counted(session, frame)
    except (ChangesNotRetained, TableNotFound):
        raise
    except Exception as exc:
        if classify_failure(exc).rule != "changed during the run":
            raise
        # A data file of the range is gone: the base was vacuumed before the MV log captured it.
        raise ChangesNotRetained(
            f"complete: change data of {base} v{since + 1}..v{until} is gone from the base "
            f"and not in its MV log ({classify_failure(exc).message})"
        ) from exc


def _read(
    session: SparkSession, settings: Settings, base: str, since: int, until: int
) -> tuple[DataFrame, int]:
    """Spark's read of the change rows (lazy: no job yet) and the last version the MV log captured."""
    state = mvlog.read_state(session, settings, base)
    if state is None:
        raise TableNotFound(f"no MV log on {base!r} (create it first)")
    mvlog.check_retained(state, since)
    parts: list[DataFrame] = []
    if since < state.captured_version:
        parts.append(mvlog.read_captured(session, settings, base, since, min(until, state.captured_version)))
    if until > state.captured_version:
        first = max(since, state.captured_version) + 1
        feed = session.read.format("delta").option("readChangeFeed", "true")
        feed = feed.option("startingVersion", first).option("endingVersion", until)
        parts.append(feed.load(warehouse.table_path(settings, base)))
    frame = parts[0]
    for part in parts[1:]:  # the log may have gained columns the base has since dropped, or lack new ones
        frame = frame.unionByName(part, allowMissingColumns=True)
    return frame, state.captured_version
