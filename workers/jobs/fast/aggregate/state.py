"""The helper state of an aggregate MV: per group COUNT(*), and per aggregated column its non-NULL
count and exact sum, in the Delta table ``<mv>__mvstate`` (``warehouse.state_table_name``); and by
the same rule (``StateStore.beside``) the key counts of its semi and anti joins, ``<mv>__mvkeys``
(``workers.jobs.fast.operators.semi_join``).

Readers of the MV never see it: the MV table holds exactly the query's columns. A FAST run derives
COUNT(col), SUM, AVG and "the group vanished" from it (``workers.jobs.fast.aggregate.merge``), so
those never re-read the base. Only MVs that need it keep one (``merge.needs_state``).

Trust rule (docs/ARCHITECTURE.md, "Helper state"): every state commit carries, in its
``userMetadata``, the run it belongs to (``{"mvs_state": {task_id, epoch, run_id, watermark,
layout}}``). A run uses the state only when its newest tagged commit names the very run whose commit
is the MV's newest one (same epoch, run id and watermark) and the same layout (query and columns).
Anything else — no state yet, a COMPLETE refresh since (it does not write state), a crash between
the state commit and the MV commit, a stale owner's state commit, an ALTERed query — and the run
rebuilds the state from the base at the pinned version (one pass) and overwrites it. A wrong state is
therefore never trusted: the state is written first, the MV second, and only the MV commit makes the
state's tag match.

Caught up after complete runs (``StateStore.origin``): a complete run writes no state, so the state's
tag then names an older MV commit. Where every MV commit since that one is a complete run, the state
is still exactly right at that commit's watermark, and an aggregate whose every value is derived from
its state (``merge.aggregate_merge``) is refreshed from there: the change rows since the state's
watermark, applied to the state, give the changed groups' values at the pinned version (groups the
complete run already wrote are written again, alike). Anything else declines (``CatchUpDeclined``)
and the run goes on from the MV's own watermark, rebuilding the state as before.

Stale owners: state commits use the MV's idempotent-write id (``txnAppId`` = task id, ``txnVersion``
as the MV commit's), and the first incremental run of an epoch fences the state table as it fences
the MV (``workers.jobs.fast.commit.RunCommit.fence``), so after it no older epoch's commit lands in
between a run's read of the state and its write.

Who reads and writes it: delta-rs where it may (read whole while small: ``arrow.read_small``; merged
into where it writes the table: ``write.merge``), else Spark. The state of a few changed groups is
a few rows: Spark's MERGE of them cost ~5 jobs (snapshot, file scans, rewrite) and its read of the table
a snapshot and a file-skipping job, whatever the change; delta-rs does both without a Spark job.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any

from pyspark.sql import DataFrame, SparkSession

from workers import warehouse
from workers.config import Settings
from workers.jobs.changes import mvlog
from workers.jobs.delta import arrow as rs_arrow
from workers.jobs.delta import log as deltalog
from workers.jobs.delta import rs_commit
from workers.jobs.delta import write as delta_write
from workers.jobs.delta.metadata import CommitId, MvWatermark, decode_user_metadata, json_object
from workers.jobs.fast.apply import StateWrite
from workers.jobs.request import RunRequest

__all__ = ["CatchUpDeclined", "StateStore", "layout_id", "origin_ranges", "written_before_complete_runs"]

_KEY = "mvs_state"
# The most tagged MV commits walked back to find the one the state belongs to (``StateStore.origin``):
# a FORCE MV left on COMPLETE re-probes FAST within ``planning.REPROBE_AFTER_RUNS`` (50) runs.
ORIGIN_WALK_LIMIT = 64


class CatchUpDeclined(Exception):  # noqa: N818 - a decision, not an error: the run goes on without it
    """A rule cannot catch its state up from an older MV commit (``StateStore.origin``): the run is
    computed again from the MV's own watermark. Raised before anything is committed."""


def layout_id(*parts: object) -> str:
    """A short fingerprint of what the state's columns mean (query, keys, tracked columns, types)."""
    return hashlib.sha256(json.dumps(parts, sort_keys=True, default=str).encode()).hexdigest()[:16]


@dataclass(frozen=True)
class StateStore:
    """The state table of one MV as one run sees it: the MV's newest commit tag (``mv``)."""

    session: SparkSession
    settings: Settings
    mv_name: str
    mv: MvWatermark
    table_name: str | None = None  # another helper table kept by the same rule (None: the aggregate's)

    @property
    def table(self) -> str:
        return self.table_name or warehouse.state_table_name(self.mv_name)

    def beside(self, table: str, trusted_by: MvWatermark | None = None) -> StateStore:
        """The store of another helper table of the same MV, trusted by the same rule (by the MV's
        commit ``trusted_by`` instead of this store's, where given: caught up from before it)."""
        return replace(self, table_name=table, mv=trusted_by or self.mv)

    def _newest(self) -> tuple[int, dict[str, Any]] | None:
        """The version and tag of the newest tagged state commit (fences carry none)."""
        for commit in deltalog.iter_commits(self.session, self.settings, self.table):
            tag = json_object(commit.user_metadata, _KEY)
            if tag is not None:
                return commit.version, tag
        return None

    def _trusted(self) -> tuple[int, str] | None:
        """The version and layout of the newest tagged state commit when it belongs to the MV's
        newest commit (see the module's docstring); None: no state, or not to be trusted."""
        newest = self._newest()
        if newest is None:
            return None
        version, tag = newest
        return (version, tag["layout"]) if _belongs(tag, self.mv) else None

    def origin(self) -> MvWatermark | None:
        """The MV commit the newest state belongs to, where every MV commit since it is a complete
        run's (which writes no state): the state is exactly right at its watermark. None where the
        state belongs to the MV's newest commit (``read`` trusts it), to none, or where another kind
        of commit (an incremental run's, one of an unknown technique) came after it."""
        newest = self._newest()
        if newest is None:
            return None
        tag = newest[1]
        return written_before_complete_runs(
            self.session, self.settings, self.mv_name, lambda found: _belongs(tag, found)
        )

    def newest_layout(self) -> str | None:
        """The layout of the newest state written, whichever run wrote it (not a trust: what a
        state that holds nothing says, a declined one, ``operators.semi_join``)."""
        newest = self._newest()
        layout = None if newest is None else newest[1].get("layout")
        return layout if isinstance(layout, str) else None

    def read(self, layout: str, *, pinned: bool = False) -> DataFrame | None:
        """The state as of the MV's content, or None when it cannot be trusted (rebuild it).
        ``pinned``: read at its version even when it is the newest (a frame read after the run's
        own state commit still sees the state it started from)."""
        trusted = self._trusted()
        if trusted is None or trusted[1] != layout:
            return None
        version = trusted[0]
        held = rs_arrow.read_small(self.session, self.settings, self.table, version)
        if held is not None:  # small: read whole by delta-rs, no Spark job
            return held
        reader = self.session.read.format("delta")
        if pinned or version != deltalog.current_version(self.session, self.settings, self.table):
            reader = reader.option("versionAsOf", version)
        # The newest version is read as such: the snapshot the run's state MERGE uses (a time
        # travel to it would load the same state a second time). Only a newer epoch can commit
        # after it (the fence), and then Delta skips this run's commits.
        return reader.load(warehouse.table_path(self.settings, self.table))

    def commit(
        self, write: StateWrite, run: RunRequest, watermark: Mapping[str, int], txn_version: int
    ) -> None:
        """Write the run's state (before its MV commit), tagged with the run, under the MV commit's
        idempotent-write id (``workers.jobs.fast.commit``)."""
        commit = _commit_id(run, watermark, txn_version, write.layout)
        if write.merge is None:
            path = warehouse.table_path(self.settings, self.table)
            delta_write.write(
                write.frame, path, commit, mode="overwrite", options={"overwriteSchema": "true"}
            )
            return
        # The source is the run's held rows (``workers.jobs.fast.aggregate.merge``). The version is
        # the latest: a commit after it fails delta-rs's as a write conflict, and a stale owner's
        # state is never trusted anyway (only the MV commit makes its tag match).
        delta_write.merge(self.session, self._target(), write.merge, commit)

    def carry(self, run: RunRequest, watermark: Mapping[str, int], txn_version: int) -> None:
        """The trusted state, unchanged, tagged with the run (before its MV commit) by an empty commit:
        a run with no change row moves the MV's watermark, and its state stays trusted. Nothing when
        there is no trusted state (the next run that needs it rebuilds it, as it would have)."""
        trusted = self._trusted()
        if trusted is not None:
            commit = _commit_id(run, watermark, txn_version, trusted[1])
            delta_write.empty_commit(self.session, self._target(), commit)

    def _target(self) -> delta_write.Target:
        version = warehouse.latest_version(self.settings, self.table)
        assert version is not None, "a state written into was read first"
        return delta_write.Target(
            self.settings,
            self.table,
            version,
            warehouse.read_checksum(self.settings, self.table, version),
            delta_rs=rs_commit.usable(self.settings, self.table, version),
        )


def written_before_complete_runs(
    session: SparkSession, settings: Settings, mv_name: str, wrote: Callable[[MvWatermark], bool]
) -> MvWatermark | None:
    """The tag of the MV commit of the run that ``wrote`` a helper table, where every MV commit
    since it is a complete run's (which writes no helper table): the helper is exactly right at
    that commit's watermark. None where the helper belongs to the MV's newest commit, to none, or
    where another kind of commit came after it (walked back at most ``ORIGIN_WALK_LIMIT``)."""
    completes = 0  # complete runs' commits since
    for commit in deltalog.iter_commits(session, settings, mv_name):
        found = decode_user_metadata(commit.user_metadata, commit.version)
        if found is None:  # a fence, a table maintenance commit
            continue
        if wrote(found):
            return found if completes else None
        completes += 1
        if found.technique != "COMPLETE" or completes > ORIGIN_WALK_LIMIT:
            return None
    return None


def origin_ranges(
    session: SparkSession, settings: Settings, origin: MvWatermark, ranges: Mapping[str, tuple[int, int]]
) -> dict[str, tuple[int, int]] | None:
    """A run's ``ranges`` (since, until] started at ``origin``'s watermark instead (a helper table's
    run, before complete runs), where it reads the same bases, no later than the MV's, and their MV
    logs still hold every change since; None otherwise."""
    if set(origin.watermark) != set(ranges):
        return None
    started: dict[str, tuple[int, int]] = {}
    for base, (since, until) in ranges.items():
        start = origin.watermark[base]
        if start > since or mvlog.changes_missing(session, settings, base, start) is not None:
            return None
        started[base] = (start, until)
    return started


# What names a run in a helper commit's tag and in an MV commit's.
_RUN_FIELDS = ("task_id", "epoch", "run_id", "watermark")


def same_run(a: MvWatermark, b: MvWatermark) -> bool:
    """Were the two commits (a helper table's, an MV's) tagged by the same run?"""
    return all(getattr(a, field) == getattr(b, field) for field in _RUN_FIELDS)


def caught_up_from(ranges: Mapping[str, tuple[int, int]]) -> str:
    """What a run that caught a helper table up says: the versions it went on from."""
    since = ", ".join(f"{base} v{start}" for base, (start, _) in sorted(ranges.items()))
    return f"caught up from before the complete run ({since})"


def _belongs(tag: Mapping[str, Any], mv: MvWatermark) -> bool:
    """Does the state commit tagged ``tag`` belong to the MV commit tagged ``mv`` (same run)?"""
    same = all(tag.get(field) == getattr(mv, field) for field in _RUN_FIELDS)
    return same and isinstance(tag.get("layout"), str)


def _commit_id(run: RunRequest, watermark: Mapping[str, int], txn_version: int, layout: str) -> CommitId:
    """The id of a state commit of ``run``: the MV commit's ``txn_version``, the run's tag."""
    tag = {"task_id": run.task_id, "epoch": run.epoch, "run_id": run.run_id, "watermark": dict(watermark)}
    metadata = json.dumps({_KEY: {**tag, "layout": layout}}, sort_keys=True)
    return CommitId(run.task_id, txn_version, metadata)
