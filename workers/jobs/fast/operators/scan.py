"""Scan: a base table occurrence, as the run sees it. Its rows at the MV's watermark (old) and at the
pinned version (new), and its change rows in between (the MV log's, signed by ``_change_type``): read
once per base however many occurrences read it (a self-join's two scans share them)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from workers.ddl.tree.values import Node, Scan, TreePlan
from workers.jobs.changes.mvlog import CHANGE_COLUMNS
from workers.jobs.changes.reads import Changes
from workers.jobs.fast import apply


@dataclass(frozen=True)
class ScanFrames:
    """Every base's frames: ``old`` and ``new`` rows, and ``reads`` (change rows) of the bases that
    changed in the run's range; ``shared``: every change read came from another MV's run."""

    old: Mapping[str, DataFrame]
    new: Mapping[str, DataFrame]
    reads: Mapping[str, Changes]
    held: frozenset[str] = frozenset()  # unchanged small bases, held whole on the driver
    # Key sets standing for counted inputs (``semi_join``): read like bases, not change rows read.
    key_sets: frozenset[str] = frozenset()

    def is_held(self, node: Node) -> bool:
        """``node`` is a scan of a base held whole on the driver: narrowed by a list of values or not
        at all (a semi-join with many keys costs more jobs than it saves there)."""
        return isinstance(node, Scan) and node.table in self.held

    @property
    def base_reads(self) -> dict[str, Changes]:
        """The change rows read from the bases (not the key sets' flips)."""
        return {b: read for b, read in self.reads.items() if b not in self.key_sets}

    @property
    def shared(self) -> bool:
        reads = self.base_reads
        return bool(reads) and all(read.shared for read in reads.values())

    @property
    def change_rows(self) -> int:
        return sum(read.rows for read in self.base_reads.values())


def scan_frames(scope: apply.Scope, tree: TreePlan, ranges: Mapping[str, tuple[int, int]]) -> ScanFrames:
    """The frames of every base ``tree`` scans; its scans' views are the run's (dropped at its end)."""
    scope.views.update(s.view for s in tree.scans)
    bases = dict.fromkeys(s.table for s in tree.scans)
    old, new, whole = scope.bases_at({b: ranges[b] for b in bases})
    reads = {b: scope.changes(b, *ranges[b]) for b in bases if ranges[b][0] < ranges[b][1]}
    scope.step(apply.COMPUTE_STEP)
    return ScanFrames(old, new, reads, whole)


def split_changes(rows: DataFrame) -> tuple[DataFrame, DataFrame]:
    """A base's change rows as its rows gained and its rows lost (``_change_type``), without the
    change feed's columns."""
    gained = rows.where(F.col("_change_type").isin(*apply.INSERT_TYPES)).drop(*CHANGE_COLUMNS.names)
    lost = rows.where(F.col("_change_type").isin(*apply.DELETE_TYPES)).drop(*CHANGE_COLUMNS.names)
    return gained, lost
