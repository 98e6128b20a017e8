"""Semi and anti joins (EXISTS, NOT EXISTS, IN) and COUNTed LEFT JOINs whose input is integrated:
matching rows per key.

``EXISTS (SELECT … FROM t WHERE t.c = o.x AND <t's own conditions>)`` (NOT EXISTS alike; ``o.x IN
(SELECT t.c FROM t WHERE <t's own conditions>)``) reads t only through the set of keys that some row
of t passing its own conditions holds (``Keyed.matches``: those rows' keys). As DBSP integrates a
join's side, the MV keeps, per such input, how many of its rows match each key (helper state
``<mv>__mvkeys``: ``input``, the key in ``k<input>``, ``matches`` > 0; trusted by the rule of
``aggregate.state``: written before the MV commit, tagged with its run). A run then

* counts its change rows through the subquery's own conditions, net per key (``_net``: the change rows
  only);
* reads the kept counts at those keys, so old = kept, new = kept + net; the keys whose count goes
  from 0 to more (``on``) or back (``off``) are all that changes of the set;
* binds the input, in the block's SQL with that subquery reading its keys (``Block.over_key_sets``),
  to the key set at old (kept) and at new (kept − off + on), with ``on`` / ``off`` as its change: a
  scan like any other to the block's rule (``inner_join``), which reads the outer rows at the flipped
  keys only.

A LEFT JOIN of t read only by ``COUNT(y)`` in the GROUP BY above it (``Keyed.count_column``: TPC-H
Q13's orders per customer) is counted alike (t's rows passing its ON's own conditions with y not NULL)
and bound to one row per key with its count in y, which that aggregate sums
(``Aggregate.over_key_sets``): every key whose count moves is its change (its row at old deleted, at
new inserted), and the block and the aggregate are recomputed at those keys as for any keyed input
(``inner_join``, ``keyed``), the outer rows at them read, t not.

A run that keeps the counts never reads t, where the keyed recompute read it at every key its change
reached, at new and at old (TPC-H Q22's orders by customer: 3 M rows a run at SF 1 for ~900
customers). After complete runs (which write no counts), where only they wrote the MV since the
counts' own run and the MV logs still hold every change since, the counts go on from that run: t's
change from their watermark to the MV's, counted through the subquery's own conditions, is applied
first (a range of its own: ``_caught_up``), then the run's own as always. Otherwise without a trusted
state (the first FAST run, that change purged, a crash between the state and the MV commits) the
counts are rebuilt from t at the pinned version, and old = new − net;
where some input then averages under ``MIN_ROWS_PER_KEY`` matching rows a key (or the warehouse is
remote: ``_rebuilt``), the MV keeps an empty state tagged "declined" instead, and its runs recompute
by key as before, until its query changes.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from functools import reduce

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql.types import DataType, IntegerType, LongType, StructField, StructType

from workers import warehouse
from workers.ddl.tree.counted import MIN_ROWS_PER_KEY
from workers.ddl.tree.values import Aggregate, Block, Keyed, Node, Scan, TreePlan, identity
from workers.jobs.changes.reads import Changes
from workers.jobs.delta.metadata import MvWatermark
from workers.jobs.fast import apply
from workers.jobs.fast.aggregate.state import StateStore, caught_up_from, layout_id, origin_ranges
from workers.jobs.fast.operators.keyed import KEY, Signed
from workers.jobs.fast.operators.nodes import Evaluation
from workers.jobs.fast.operators.scan import ScanFrames, split_changes
from workers.jobs.spark.columns import q
from workers.jobs.spark.held import hold_counted, sums

INPUT, MATCHES = "input", "matches"
DECLINED = " declined"  # ends the layout an MV's counts not worth keeping are tagged with (kept empty)
_NET, _OLD, _NEW = "__mvs_net", "__mvs_old", "__mvs_new"


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
class Integrated:
    """The tree a run computes (every counted input a scan of its key sets, or none where the counts
    are declined), its frames, what it writes to the key counts, and the rules it applies (its
    message: the counted inputs as planned, or recomputed by key where declined)."""

    tree: TreePlan
    frames: ScanFrames
    helper: apply.HelperState | None  # None: the key counts left as they are (declined)
    rules: list[str]


@dataclass(frozen=True)
class _KeySets:
    """Per counted input: its key set (``KEY``, ``MATCHES``) at old, or at new where ``at_new`` (a
    rebuild); and what the run writes to the state (None: carried as it is)."""

    counts: dict[int, DataFrame]
    at_new: bool
    write: apply.StateWrite | None
    # Caught up (``_caught_up``): per input, its counts that complete runs' change moved (``KEY``,
    # ``_OLD``, ``_NEW``: at the counts' own run and at the MV's watermark), to be written too.
    moved: Mapping[int, DataFrame] = field(default_factory=dict)
    origin: MvWatermark | None = None  # the MV commit the counts read belong to, where not the newest


def integrate(
    scope: apply.Scope,
    tree: TreePlan,
    ev: Evaluation,
    state: StateStore,
    ranges: Mapping[str, tuple[int, int]],
) -> Integrated | None:
    """``tree``'s counted inputs as scans of their key sets (see the module's note), the run's
    ``ranges`` starting at the MV's watermark; None: none."""
    counted = counted_inputs(tree)
    if not counted:
        return None
    store = state.beside(warehouse.key_counts_table_name(state.mv_name))
    # The key's type as the input holds it (what the matching rows' SQL selects): no query planned.
    types = {c.index: _key_type(ev.at(c.node, True), c.key) for c in counted}
    schema = StructType(
        [
            StructField(INPUT, IntegerType(), False),
            *[StructField(c.column, types[c.index], True) for c in counted],
            StructField(MATCHES, LongType(), False),
        ]
    )
    described = [(identity(c.node), c.keyed.matches, types[c.index].simpleString()) for c in counted]
    layout = layout_id("key counts", described)
    declined = f"{layout}{DECLINED}"  # the state of an MV whose counts are not worth keeping: none
    # Declined by the layout alone, whatever run tagged it: a complete refresh since does not make
    # the next FAST run count again (its count reads the input whole: Q4's 11 s first run).
    if store.newest_layout() == declined:
        return _declined(tree, ev, None)
    kept = store.read(layout, pinned=True)
    sets: _KeySets | None = None
    if kept is not None:
        sets = _KeySets({c.index: _kept(kept, c) for c in counted}, False, None)
    else:
        # The counts' own range is what a run after complete runs pays beyond a steady one (REBUILD's
        # figure, ``worker.costs``), not part of FAST's steady cost.
        with scope.rebuilding():
            sets = _caught_up(ev, counted, store, layout, ranges)
    if sets is None:
        with scope.rebuilding():
            sets, why = _rebuilt(ev, counted, schema, layout)
        if sets is None:
            ev.note(f"key counts not kept: {why}; state rebuilt from the bases in {store.table}, empty")
            empty = apply.StateWrite(scope.session.createDataFrame([], schema), declined)
            return _declined(
                tree, ev, None if why == NOTHING_TO_COUNT else apply.HelperState(store.table, empty)
            )
        ev.note(f"key counts: state rebuilt from the bases in {store.table}")
    frames, flipped = _key_set_frames(ev, counted, sets, store.table)
    write = sets.write
    if write is None and (flipped or sets.moved):
        reached = _reached(counted, dict((c.index, flips) for c, flips in flipped), sets.moved)
        source = reduce(DataFrame.unionByName, [_merged_rows(c, flips, schema) for c, flips in reached])
        spec = apply.keyed_upsert(source, [INPUT, *[c.column for c in counted]], schema)
        write = apply.StateWrite(source, layout, spec)
    helper = apply.HelperState(store.table, write, sets.origin)  # carried as caught up, if unchanged
    return Integrated(_rewritten(tree, counted), frames, helper, tree.describe())


def _caught_up(
    ev: Evaluation,
    counted: list[Counted],
    store: StateStore,
    layout: str,
    ranges: Mapping[str, tuple[int, int]],
) -> _KeySets | None:
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
        at_origin = _kept(kept, c)
        start, watermark = since[c.node.table][0], ranges[c.node.table][0]
        change = (
            split_changes(scope.changes(c.node.table, start, watermark).frame) if start < watermark else None
        )
        net = _net(ev, c, change)
        if net is None:
            counts[c.index] = at_origin
            continue
        flips = _flips(scope, net, at_origin, at_new=False, table=store.table)
        counts[c.index] = _counts_at_other(at_origin, flips, at_new=False)
        moved[c.index] = flips
    ev.note(f"key counts: {caught_up_from(since)} in {store.table}")
    return _KeySets(counts, False, None, moved, found[0])


def counts_catch_up(
    store: StateStore, tree: TreePlan, ranges: Mapping[str, tuple[int, int]]
) -> dict[str, tuple[int, int]] | None:
    """The ranges a run over ``ranges`` (from the MV's watermark) reads where it would catch ``tree``'s
    key counts (``store``) up from their own run (``_caught_up``): each counted input's from the
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


def _reached(
    counted: list[Counted], flipped: Mapping[int, DataFrame], moved: Mapping[int, DataFrame]
) -> list[tuple[Counted, DataFrame]]:
    """Per counted input, the counts the run writes (``KEY``, ``_NEW``: at new): those its change
    moves (``flipped``), and those only the complete runs' change moved (``moved``, caught up: their
    count at the MV's watermark is their count at new)."""
    reached = []
    for c in counted:
        run, before = flipped.get(c.index), moved.get(c.index)
        if before is not None and run is not None:
            before = before.join(run.select(KEY), KEY, "left_anti")
        parts = [f.select(KEY, _NEW) for f in (run, before) if f is not None]
        if parts:
            reached.append((c, reduce(DataFrame.unionByName, parts)))
    return reached


def _declined(tree: TreePlan, ev: Evaluation, helper: apply.HelperState | None) -> Integrated:
    """The run of ``tree`` without its counts: its counted inputs recomputed by key."""
    uncounted = _uncounted(tree)
    return Integrated(uncounted, ev.frames, helper, uncounted.describe())


def _key_type(rows: DataFrame, key: str) -> DataType:
    return next(f.dataType for f in rows.schema.fields if f.name.lower() == key.lower())


def _kept(kept: DataFrame, c: Counted) -> DataFrame:
    return kept.where(F.col(INPUT) == c.index).select(F.col(c.column).alias(KEY), MATCHES)


# Why a rebuild keeps no counts, where no key has a match yet: decided at the next run, not now.
NOTHING_TO_COUNT = "no matching row yet"


def _rebuilt(
    ev: Evaluation, counted: list[Counted], schema: StructType, layout: str
) -> tuple[_KeySets | None, str]:
    """The counts at the pinned version, written whole; or None and why they are not kept: some input
    averages under ``MIN_ROWS_PER_KEY`` matching rows a key, the counts would be read by Spark (a
    remote warehouse: ``arrow.read_small`` reads local tables only; at SF 1 Q22 ran 0.89x COMPLETE so,
    1.33x by delta-rs), or some input has no match yet (``NOTHING_TO_COUNT``: no state written)."""
    if not warehouse.is_local(ev.scope.settings):
        return None, "a remote warehouse, where the counts would be read by Spark"
    found = {c.index: _counts_at_new(ev, c) for c in counted}
    if any(per_key is None for _, per_key in found.values()):
        return None, NOTHING_TO_COUNT
    if any(per_key is not None and per_key < MIN_ROWS_PER_KEY for _, per_key in found.values()):
        return None, f"under {MIN_ROWS_PER_KEY} matching rows a key"
    counts = {i: frame for i, (frame, _) in found.items()}
    rows = reduce(DataFrame.unionByName, [_state_rows(c, counts[c.index], schema) for c in counted])
    return _KeySets(counts, True, apply.StateWrite(rows, layout)), ""


def _key_set_frames(
    ev: Evaluation, counted: list[Counted], sets: _KeySets, table: str
) -> tuple[ScanFrames, list[tuple[Counted, DataFrame]]]:
    """The run's frames with each counted input's key sets at old and new, and its flipped keys as its
    change rows (inserted: a first match, deleted: the last one gone); and the counts each changed
    input reached (``_flips``)."""
    old, new, reads = dict(ev.frames.old), dict(ev.frames.new), dict(ev.frames.reads)
    flipped: list[tuple[Counted, DataFrame]] = []
    first, last = (F.col(_OLD) <= 0) & (F.col(_NEW) > 0), (F.col(_OLD) > 0) & (F.col(_NEW) <= 0)
    for c in counted:
        counts = sets.counts[c.index]
        keys = _key_rows(c, counts)
        old[c.frame_name] = new[c.frame_name] = keys  # unchanged: one key set for both versions
        net = _net(ev, c, ev.delta(c.node))
        if net is None:
            continue
        flips = _flips(ev.scope, net, counts, at_new=sets.at_new, table=table)
        flipped.append((c, flips))
        if c.keyed.count_column is not None:  # every count the change moves is a change of the input
            other = _key_rows(c, _counts_at_other(counts, flips, at_new=sets.at_new))
            old[c.frame_name], new[c.frame_name] = (other, keys) if sets.at_new else (keys, other)
            reached, added, removed = sums(
                net, F.lit(1), F.greatest(F.col(_NET), F.lit(0)), F.greatest(-F.col(_NET), F.lit(0))
            )
            # At most two rows a key (its rows at old and at new; none for a count of 0).
            reads[c.frame_name] = Changes(_count_change(c, flips), False, 2 * reached)
            ev.note(
                f"{c.keyed.operator} by key counts: {reached} keys gained or lost matching rows "
                f"({added} added, {removed} removed)"
            )
            continue
        on, off = (flips.where(f).select(F.col(KEY).alias(c.key)) for f in (first, last))
        if sets.at_new:
            old[c.frame_name] = keys.join(on, c.key, "left_anti").unionByName(off)
        else:
            new[c.frame_name] = keys.join(off, c.key, "left_anti").unionByName(on)
        gained, lost = sums(flips, first, last)
        if gained + lost:
            changed = on.withColumn("_change_type", F.lit("insert")).unionByName(
                off.withColumn("_change_type", F.lit("delete"))
            )
            reads[c.frame_name] = Changes(changed, False, gained + lost)
        ev.note(f"{c.keyed.operator} by key counts: {gained} keys gained a first match, {lost} lost the last")
    key_sets = frozenset(c.frame_name for c in counted)
    return replace(ev.frames, old=old, new=new, reads=reads, key_sets=key_sets), flipped


def _key_rows(c: Counted, counts: DataFrame) -> DataFrame:
    """The input a block reads in place of a counted one: its key set (``KEY`` of ``counts`` as the
    key column), or for a LEFT JOIN's (``Keyed.count_column``) one row per key with its count in the
    column the aggregate above sums (``Aggregate.over_key_sets``)."""
    key = F.col(KEY).alias(c.key)
    if c.keyed.count_column is None:
        return counts.select(key)
    return counts.select(key, F.col(MATCHES).alias(c.keyed.count_column))


def _counts_at_other(counts: DataFrame, flips: DataFrame, *, at_new: bool) -> DataFrame:
    """The counts (``KEY``, ``MATCHES`` > 0) at the version ``counts`` are not at (at old where
    ``at_new``): theirs but at the keys the change reaches (``flips``)."""
    moved = flips.select(KEY, F.col(_OLD if at_new else _NEW).alias(MATCHES)).where(F.col(MATCHES) > 0)
    return counts.join(flips.select(KEY), KEY, "left_anti").unionByName(moved)


def _count_change(c: Counted, flips: DataFrame) -> DataFrame:
    """A LEFT JOIN's counted input's change rows (``_key_rows``' form): per key the change reaches,
    its row at old deleted and its row at new inserted (none for a count of 0)."""
    assert c.keyed.count_column is not None, "a LEFT JOIN's counted input"
    column = c.keyed.count_column

    def rows(count: str, kind: str) -> DataFrame:
        found = flips.where(F.col(count) > 0)
        return found.select(
            F.col(KEY).alias(c.key),
            F.col(count).alias(column),
            F.lit(kind).alias("_change_type"),
        )

    return rows(_OLD, "delete").unionByName(rows(_NEW, "insert"))


def _matching_keys(ev: Evaluation, c: Counted, rows: DataFrame) -> DataFrame:
    """The keys (``KEY``) of ``rows`` (the input's, at a version or changed) that pass the subquery's
    own conditions, one per row; not NULL (a NULL key matches none)."""
    found = ev.sql(c.keyed.matches or "", {c.node.view: rows})
    return found.select(F.col(q(found.columns[0])).alias(KEY)).where(F.col(KEY).isNotNull())


def _net(ev: Evaluation, c: Counted, delta: Signed | None) -> DataFrame | None:
    """The net change of the count per key (``KEY``, ``_NET`` ≠ 0) from the input's change rows
    (``delta``: gained, lost), held; None where it has none (the input unchanged, or no change row
    passing the own conditions)."""
    if delta is None:
        return None
    signed = [
        _matching_keys(ev, c, rows).withColumn(_NET, F.lit(sign))
        for rows, sign in zip(delta, (1, -1), strict=True)
    ]
    both = reduce(DataFrame.unionByName, signed)
    net, rows = hold_counted(
        ev.scope.session, both.groupBy(KEY).agg(F.sum(_NET).alias(_NET)).where(F.col(_NET) != 0)
    )
    return net if rows else None


def _counts_at_new(ev: Evaluation, c: Counted) -> tuple[DataFrame, float | None]:
    """The input's matching rows counted per key at the pinned version (the rebuild), held, and how
    many a key has on average (None without any)."""
    keys = _matching_keys(ev, c, ev.at(c.node, True))
    per_key = keys.groupBy(KEY).agg(F.count(F.lit(1)).alias(MATCHES))
    # Every key of the whole input: usually past the driver's limit.
    counts, found = hold_counted(ev.scope.session, per_key, large=True)
    return counts, sums(counts, F.col(MATCHES))[0] / found if found else None


def _flips(scope: apply.Scope, net: DataFrame, counts: DataFrame, *, at_new: bool, table: str) -> DataFrame:
    """Per key the change reaches: its count at old (``_OLD``) and at new (``_NEW``), held; ``counts``
    are at new where ``at_new``, else at old. A count below 0 means the state is not what its tag
    says: ``Inconsistent`` (the run refreshes completely)."""
    found = F.coalesce(F.col(MATCHES), F.lit(0)).cast("long")
    old, new = (found - F.col(_NET), found) if at_new else (found, found + F.col(_NET))
    joined = net.join(counts, KEY, "left").select(KEY, old.alias(_OLD), new.alias(_NEW))
    flips = hold_counted(scope.session, joined)[0]
    (below,) = sums(flips, (F.col(_OLD) < 0) | (F.col(_NEW) < 0))
    if below:
        raise apply.Inconsistent(f"the key counts in {table} go below zero at {below} keys")
    return flips


def _state_rows(c: Counted, counts: DataFrame, schema: StructType) -> DataFrame:
    """``counts`` (``KEY``, ``MATCHES``) as rows of the state table."""
    return counts.select(*_columns(c, schema, F.col(KEY), F.col(MATCHES)))


def _merged_rows(c: Counted, flips: DataFrame, schema: StructType) -> DataFrame:
    """The state rows of the keys the change reaches, with the MERGE's ``OP``: a count of 0 deleted."""
    op = F.when(F.col(_NEW) > 0, "upsert").otherwise("delete").alias(apply.OP)
    return flips.select(*_columns(c, schema, F.col(KEY), F.col(_NEW)), op)


def _columns(c: Counted, schema: StructType, key: Column, matches: Column) -> list[Column]:
    out = [F.lit(c.index).cast("int").alias(INPUT)]
    for column in schema.fields[1:-1]:
        value = key if column.name == c.column else F.lit(None)
        out.append(value.cast(column.dataType).alias(column.name))
    return [*out, matches.cast("long").alias(MATCHES)]


def _uncounted(tree: TreePlan) -> TreePlan:
    """``tree`` as it runs where the counts are declined: its counted inputs recomputed by key."""

    def plain(block: Block, inputs: tuple[Node, ...]) -> Block:
        keyed = tuple(replace(k, matches=None, count_column=None) for k in block.keyed)
        return replace(block, inputs=inputs, keyed=keyed, over_key_sets=None)

    return _mapped(tree, plain, lambda aggregate: replace(aggregate, over_key_sets=None))


def _rewritten(tree: TreePlan, counted: list[Counted]) -> TreePlan:
    """``tree`` with every counted input a scan of its key sets, its block's SQL reading them. Its
    ``scans`` and ``block_sql`` stay the planned tree's (the nested tree runs from ``root``)."""
    scans = {c.keyed.view: Scan(c.frame_name, c.keyed.view, c.keyed.view) for c in counted}

    def over_key_sets(block: Block, inputs: tuple[Node, ...]) -> Block:
        inputs = tuple(scans.get(n.view, n) for n in inputs)
        return replace(block, sql=block.over_key_sets or block.sql, inputs=inputs)

    def over_counts(aggregate: Aggregate) -> Aggregate:
        return replace(aggregate, sql=aggregate.over_key_sets or aggregate.sql)

    return _mapped(tree, over_key_sets, over_counts)


def _mapped(
    tree: TreePlan,
    on_block: Callable[[Block, tuple[Node, ...]], Block],
    on_aggregate: Callable[[Aggregate], Aggregate],
) -> TreePlan:
    """``tree`` with each block replaced by ``on_block`` of it and its inputs (mapped first), each
    aggregate by ``on_aggregate`` of it (its input mapped first)."""

    def mapped(node: Node) -> Node:
        if isinstance(node, Scan):
            return node
        if isinstance(node, Aggregate):
            inner = mapped(node.input)
            assert isinstance(inner, Block)
            return on_aggregate(replace(node, input=inner))
        inputs = tuple(mapped(n) for n in node.inputs)
        return on_block(node, inputs) if isinstance(node, Block) else replace(node, inputs=inputs)

    root = mapped(tree.block)
    assert isinstance(root, Block)
    return replace(tree, root=root)
