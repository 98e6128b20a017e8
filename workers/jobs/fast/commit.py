"""The commits of one FAST run, in their order (``RunCommit``): the only place that orders them.

1. ``fence``, on the first run of an epoch: the MV, then its helper tables (where there are), get an
   empty commit at ``epoch * 2**32`` (``CommitId.fence``): from then on Delta skips every older
   epoch's commit to them, so the MV content (and state) a run reads can only change by a newer epoch,
   whose commit makes this run's skipped.
2. ``commit``: the helper states first, when the change has them (``Change.state``, the aggregate's,
   and ``Change.helpers``, written or carried: the key counts of ``operators.semi_join``; only the
   MV commit makes them trusted: ``workers.jobs.fast.aggregate.state``), then the MV: the change rows
   appended, or its MERGE (by delta-rs or Spark: ``workers.jobs.delta.write``). A one-pass MERGE that
   meets a group to recompute commits nothing and raises; its ``fallback`` (the two steps) is
   committed then.
   ``advance`` instead, when the run's ranges hold no change row: the same commits, empty (a
   state's only where it is trusted, so that it stays so).

The MV commit carries the data and the new watermark (``userMetadata``), the state commit its own tag
(same txnVersion); the two are separate Delta commits of separate tables.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass

from pyspark.sql import SparkSession

from workers import warehouse
from workers.config import Settings
from workers.jobs.delta import write
from workers.jobs.delta.metadata import CommitId, run_user_metadata, txn_version
from workers.jobs.delta.write import Target
from workers.jobs.fast.aggregate.state import StateStore
from workers.jobs.fast.apply import COMPUTE_STEP, RECOMPUTE_NEEDED, Change, StateWrite
from workers.jobs.request import RunRequest


@dataclass(frozen=True)
class RunCommit:
    """The commits of the run ``request`` to its MV (and the MV's helper state), in ``session``."""

    session: SparkSession
    settings: Settings
    request: RunRequest
    layout: str | None = None  # carried by the MV commit (``encode_user_metadata``): a helper table's

    def commit_id(self, watermark: Mapping[str, int], technique: str = "FAST") -> CommitId:
        """The id and ``userMetadata`` of the run's MV commit reflecting the bases at ``watermark``,
        its content made by ``technique``."""
        request = self.request
        metadata = run_user_metadata(request, watermark, self.layout, technique=technique)
        return CommitId(request.task_id, txn_version(request.epoch, watermark), metadata)

    def fence(self, until: int) -> None:
        """Fence the MV, then its helper state, against older epochs (``until``: the base version
        the run applies, at least 1 where there is an MV log, so the fence is below every refresh
        commit of this epoch and never makes the run's own commit skipped). The MV fence carries no
        ``mvs`` metadata (``read_watermark`` passes it by)."""
        assert until >= 1, "an MV log implies the base is past version 0"
        task_id, epoch, run_id = self.request.task_id, self.request.epoch, self.request.run_id
        marker = json.dumps({"mvs_fence": {"task_id": task_id, "epoch": epoch, "run_id": run_id}})
        write.fence(self.session, self._path(self.request.mv_name), CommitId.fence(task_id, epoch, marker))
        for helper in warehouse.helper_tables(self.request.mv_name):
            if warehouse.table_exists(self.settings, helper):  # else this epoch's first write makes it
                write.fence(self.session, self._path(helper), CommitId.fence(task_id, epoch))

    def commit(
        self,
        change: Change,
        *,
        target: Target,
        state: StateStore,
        watermark: Mapping[str, int],
        step: Callable[[str], None],
        rebuilding: Callable[[], AbstractContextManager[None]] = nullcontext,
    ) -> Change:
        """Commit ``change`` (the helper state first, then the MV ``target``) as reflecting the bases
        at ``watermark``; ``step`` names the run's next step. Returns the change committed (its
        fallback, when the one-pass MERGE gave way). ``rebuilding`` times a whole state written."""
        mv_commit = self.commit_id(watermark)
        helpers: list[tuple[StateStore, StateWrite | None]] = []
        if change.state is not None:
            helpers.append((state, change.state))
        helpers += [(state.beside(h.table, h.trusted_by), h.write) for h in change.helpers]
        for store, written in helpers:
            step("commit the helper state")
            if written is None:
                store.carry(self.request, watermark, mv_commit.txn_version)
                continue
            # A whole state written (no merge) is its rebuild's: timed with it (``Scope.rebuilding``).
            with rebuilding() if written.merge is None else nullcontext():
                store.commit(written, self.request, watermark, mv_commit.txn_version)
        step(f"commit ({change.plan})")
        if change.merge is None:
            assert change.appended is not None
            write.append(target, change.appended, mv_commit)
            return change
        try:
            write.merge(self.session, target, change.merge, mv_commit)
        except Exception as error:  # noqa: BLE001 - only the one-pass MERGE's own failure is taken back
            if change.fallback is None or RECOMPUTE_NEEDED not in str(error):
                raise
            step(COMPUTE_STEP)
            change = change.fallback()  # nothing was committed: the two steps instead
            step(f"commit ({change.plan})")
            assert change.merge is not None and change.state is None, "a fallback is one plain MERGE"
            write.merge(self.session, target, change.merge, mv_commit)
        return change

    def advance(
        self, *, target: Target, state: StateStore, watermark: Mapping[str, int], step: Callable[[str], None]
    ) -> None:
        """A run without change rows: the MV ``target`` (its trusted helper state first) gets an empty
        commit reflecting the bases at ``watermark``, its content unchanged: made as the commit before
        it says (after a complete run, the next FAST run still rebuilds the helper state, and the cost
        model learns REBUILD from it: ``workers.worker.costs``)."""
        mv_commit = self.commit_id(watermark, state.mv.technique or "FAST")
        step("commit (no change)")
        for table in warehouse.state_tables(state.mv_name):
            state.beside(table).carry(self.request, watermark, mv_commit.txn_version)
        write.empty_commit(self.session, target, mv_commit)

    def _path(self, table: str) -> str:
        return warehouse.table_path(self.settings, table)
