"""The key counts of an operator tree's counted inputs (``semi_join``): per input, its rows passing
the subquery's own conditions counted per key, kept in ``<mv>__mvkeys`` (``input``, the key in
``k<input>``, ``matches`` > 0) by the rule of ``aggregate.state``. Their arithmetic (a change's net per
key, the keys whose count it moves, the counts at the other version, the state rows a run writes), and
their catch-up after complete runs (``caught_up``): where only complete runs wrote the MV since the
counts' own run and the MV logs still hold every change since, the counted input's change from the
counts' watermark to the MV's is applied to them first, in a range of its own.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from functools import reduce

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql.types import StructType

from workers.ddl.tree.values import Keyed, Node, Scan, TreePlan
from workers.jobs.delta.metadata import MvWatermark
from workers.jobs.fast import apply
from workers.jobs.fast.aggregate.state import StateStore, caught_up_from, origin_ranges
from workers.jobs.fast.operators.keyed import KEY, Signed
from workers.jobs.fast.operators.nodes import Evaluation
from workers.jobs.fast.operators.scan import split_changes
from workers.jobs.spark.columns import q
from workers.jobs.spark.held import hold_counted, sums

INPUT, MATCHES = "input", "matches"
DECLINED = " declined"  # ends the layout an MV's counts not worth keeping are tagged with (kept empty)
NET, OLD, NEW = "__mvs_net", "__mvs_old", "__mvs_new"


@dataclass(frozen=True)
class Counted:
    """A counted input (``Keyed.matches``) of a block of the tree, numbered in the tree's order."""

    index: int
    keyed: Keyed
    node: Node

    @property
    def frame_name(self) -> str:
        """The name its key sets go by among the run's frames (never a table's: a name has no '#')."""
        return f"#key counts {self.index}"

    @property
    def column(self) -> str:
        """Its keys' column in the state table."""
        return f"k{self.index}"

    @property
    def key(self) -> str:
        """The key column the block's SQL reads its key sets by (the input's)."""
        assert self.keyed.column is not None, "a counted input is keyed"
        return self.keyed.column


def counted_inputs(tree: TreePlan) -> list[Counted]:
    """Every counted input of ``tree``'s blocks, numbered leaves first (``TreePlan.counted_inputs``:
    one numbering for state and frames)."""
    return [Counted(i, k, n) for i, (k, n) in enumerate(tree.counted_inputs())]


@dataclass(frozen=True)
class KeySets:
    """Per counted input: its key set (``KEY``, ``MATCHES``) at old, or at new where ``at_new`` (a
    rebuild); and what the run writes to the state (None: carried as it is)."""

    counts: dict[int, DataFrame]
    at_new: bool
    write: apply.StateWrite | None
    # Caught up (``caught_up``): per input, its counts that complete runs' change moved (``KEY``,
    # ``OLD``, ``NEW``: at the counts' own run and at the MV's watermark), to be written too.
    moved: Mapping[int, DataFrame] = field(default_factory=dict)
    origin: MvWatermark | None = None  # the MV commit the counts read belong to, where not the newest


def kept_counts(kept: DataFrame, c: Counted) -> DataFrame:
    return kept.where(F.col(INPUT) == c.index).select(F.col(c.column).alias(KEY), MATCHES)


def caught_up(
    ev: Evaluation,
    counted: list[Counted],
    store: StateStore,
    layout: str,
    ranges: Mapping[str, tuple[int, int]],
) -> KeySets | None:
    """The counts at the MV's watermark, where only complete runs wrote the MV since the counts' own
    run and the MV logs still hold every change since (``StateStore.origin``, ``origin_ranges``): the
    counts as that run left them plus each input's net change from its watermark to the MV's (a range
    before the run's own, which the rule then reads as always). None otherwise (they are rebuilt), or
    where a counted input is not a base's scan."""
    scope = ev.scope
    found = _origin(store, counted, ranges)
    kept = None if found is None else replace(store, mv=found[0]).read(layout, pinned=True)
    if found is None or kept is None:
        return None
    since = found[1]
    counts: dict[int, DataFrame] = {}
    moved: dict[int, DataFrame] = {}
    for c in counted:
        assert isinstance(c.node, Scan)
        at_origin = kept_counts(kept, c)
        start, watermark = since[c.node.table][0], ranges[c.node.table][0]
        change = (
            split_changes(scope.changes(c.node.table, start, watermark).frame) if start < watermark else None
        )
        net = net_change(ev, c, change)
        if net is None:
            counts[c.index] = at_origin
            continue
        flips = counted_flips(scope, net, at_origin, at_new=False, table=store.table)
        counts[c.index] = counts_at_other(at_origin, flips, at_new=False)
        moved[c.index] = flips
    ev.note(f"key counts: {caught_up_from(since)} in {store.table}")
    return KeySets(counts, False, None, moved, found[0])


def counts_catch_up(
    store: StateStore, tree: TreePlan, ranges: Mapping[str, tuple[int, int]]
) -> dict[str, tuple[int, int]] | None:
    """The ranges a run over ``ranges`` (from the MV's watermark) reads where it would catch ``tree``'s
    key counts (``store``) up from their own run (``caught_up``): each counted input's from the
    counts' watermark; None where it would rebuild them (or ``tree`` counts none). Delta log reads.
    Counts declined (none kept) are neither: the run reads its own ``ranges``."""
    if (store.newest_layout() or "").endswith(DECLINED):
        return dict(ranges)
    counted = counted_inputs(tree)
    found = _origin(store, counted, ranges)
    if found is None:
        return None
    tables = {c.node.table for c in counted if isinstance(c.node, Scan)}
    return {base: found[1][base] if base in tables else span for base, span in ranges.items()}


def _origin(
    store: StateStore, counted: list[Counted], ranges: Mapping[str, tuple[int, int]]
) -> tuple[MvWatermark, dict[str, tuple[int, int]]] | None:
    """The MV commit the key counts belong to and ``ranges`` from its watermark, where only complete
    runs wrote the MV since and the MV logs still hold every change since (``StateStore.origin``,
    ``origin_ranges``); None otherwise, or where a counted input is not a base's scan."""
    if not counted or not all(isinstance(c.node, Scan) for c in counted):
        return None
    origin = store.origin()
    since = None if origin is None else origin_ranges(store.session, store.settings, origin, ranges)
    return None if origin is None or since is None else (origin, since)


def reached_counts(
    counted: list[Counted], flipped: Mapping[int, DataFrame], moved: Mapping[int, DataFrame]
) -> list[tuple[Counted, DataFrame]]:
    """Per counted input, the counts the run writes (``KEY``, ``NEW``: at new): those its change
    moves (``flipped``), and those only the complete runs' change moved (``moved``, caught up: their
    count at the MV's watermark is their count at new)."""
    reached = []
    for c in counted:
        run, before = flipped.get(c.index), moved.get(c.index)
        if before is not None and run is not None:
            before = before.join(run.select(KEY), KEY, "left_anti")
        parts = [f.select(KEY, NEW) for f in (run, before) if f is not None]
        if parts:
            reached.append((c, reduce(DataFrame.unionByName, parts)))
    return reached


def matching_keys(ev: Evaluation, c: Counted, rows: DataFrame) -> DataFrame:
    """The keys (``KEY``) of ``rows`` (the input's, at a version or changed) that pass the subquery's
    own conditions, one per row; not NULL (a NULL key matches none)."""
    found = ev.sql(c.keyed.matches or "", {c.node.view: rows})
    return found.select(F.col(q(found.columns[0])).alias(KEY)).where(F.col(KEY).isNotNull())


def net_change(ev: Evaluation, c: Counted, delta: Signed | None) -> DataFrame | None:
    """The net change of the count per key (``KEY``, ``NET`` ≠ 0) from the input's change rows
    (``delta``: gained, lost), held; None where it has none (the input unchanged, or no change row
    passing the own conditions)."""
    if delta is None:
        return None
    signed = [
        matching_keys(ev, c, rows).withColumn(NET, F.lit(sign))
        for rows, sign in zip(delta, (1, -1), strict=True)
    ]
    both = reduce(DataFrame.unionByName, signed)
    net, rows = hold_counted(
        ev.scope.session, both.groupBy(KEY).agg(F.sum(NET).alias(NET)).where(F.col(NET) != 0)
    )
    return net if rows else None


def counted_flips(
    scope: apply.Scope, net: DataFrame, counts: DataFrame, *, at_new: bool, table: str
) -> DataFrame:
    """Per key the change reaches: its count at old (``OLD``) and at new (``NEW``), held; ``counts``
    are at new where ``at_new``, else at old. A count below 0 means the state is not what its tag
    says: ``Inconsistent`` (the run refreshes completely)."""
    found = F.coalesce(F.col(MATCHES), F.lit(0)).cast("long")
    old, new = (found - F.col(NET), found) if at_new else (found, found + F.col(NET))
    joined = net.join(counts, KEY, "left").select(KEY, old.alias(OLD), new.alias(NEW))
    flips = hold_counted(scope.session, joined)[0]
    (below,) = sums(flips, (F.col(OLD) < 0) | (F.col(NEW) < 0))
    if below:
        raise apply.Inconsistent(f"the key counts in {table} go below zero at {below} keys")
    return flips


def counts_at_other(counts: DataFrame, flips: DataFrame, *, at_new: bool) -> DataFrame:
    """The counts (``KEY``, ``MATCHES`` > 0) at the version ``counts`` are not at (at old where
    ``at_new``): theirs but at the keys the change reaches (``flips``)."""
    moved = flips.select(KEY, F.col(OLD if at_new else NEW).alias(MATCHES)).where(F.col(MATCHES) > 0)
    return counts.join(flips.select(KEY), KEY, "left_anti").unionByName(moved)


def state_rows(c: Counted, counts: DataFrame, schema: StructType) -> DataFrame:
    """``counts`` (``KEY``, ``MATCHES``) as rows of the state table."""
    return counts.select(*_columns(c, schema, F.col(KEY), F.col(MATCHES)))


def merged_rows(c: Counted, flips: DataFrame, schema: StructType) -> DataFrame:
    """The state rows of the keys the change reaches, with the MERGE's ``OP``: a count of 0 deleted."""
    op = F.when(F.col(NEW) > 0, "upsert").otherwise("delete").alias(apply.OP)
    return flips.select(*_columns(c, schema, F.col(KEY), F.col(NEW)), op)


def _columns(c: Counted, schema: StructType, key: Column, matches: Column) -> list[Column]:
    out = [F.lit(c.index).cast("int").alias(INPUT)]
    for column in schema.fields[1:-1]:
        value = key if column.name == c.column else F.lit(None)
        out.append(value.cast(column.dataType).alias(column.name))
    return [*out, matches.cast("long").alias(MATCHES)]
