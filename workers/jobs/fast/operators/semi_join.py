"""Semi and anti joins (EXISTS, NOT EXISTS, IN) and COUNTed LEFT JOINs whose input is integrated:
matching rows per key.

``EXISTS (SELECT … FROM t WHERE t.c = o.x AND <t's own conditions>)`` (NOT EXISTS alike; ``o.x IN
(SELECT t.c FROM t WHERE <t's own conditions>)``) reads t only through the set of keys that some row
of t passing its own conditions holds (``Keyed.matches``: those rows' keys). As DBSP integrates a
join's side, the MV keeps, per such input, how many of its rows match each key (helper state
``<mv>__mvkeys``: ``input``, the key in ``k<input>``, ``matches`` > 0; trusted by the rule of
``aggregate.state``: written before the MV commit, tagged with its run). A run then

* counts its change rows through the subquery's own conditions, net per key (``net_change``: the change rows
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
first (a range of its own: ``caught_up``), then the run's own as always. Otherwise without a trusted
state (the first FAST run, that change purged, a crash between the state and the MV commits) the
counts are rebuilt from t at the pinned version, and old = new − net;
where some input then averages under ``MIN_ROWS_PER_KEY`` matching rows a key (or the warehouse is
remote: ``_rebuilt``), the MV keeps an empty state tagged "declined" instead, and its runs recompute
by key as before, until its query changes.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from functools import reduce

from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql.types import DataType, IntegerType, LongType, StructField, StructType

from workers import warehouse
from workers.ddl.tree.counted import MIN_ROWS_PER_KEY
from workers.ddl.tree.values import Aggregate, Block, Node, Scan, TreePlan, identity
from workers.jobs.changes.reads import Changes
from workers.jobs.fast import apply
from workers.jobs.fast.aggregate.state import StateStore, layout_id
from workers.jobs.fast.operators.key_counts import (
    DECLINED,
    INPUT,
    MATCHES,
    NET,
    NEW,
    OLD,
    Counted,
    KeySets,
    caught_up,
    counted_flips,
    counted_inputs,
    counts_at_other,
    kept_counts,
    matching_keys,
    merged_rows,
    net_change,
    reached_counts,
    state_rows,
)
from workers.jobs.fast.operators.keyed import KEY
from workers.jobs.fast.operators.nodes import Evaluation
from workers.jobs.fast.operators.scan import ScanFrames
from workers.jobs.spark.held import hold_counted, sums


@dataclass(frozen=True)
class Integrated:
    """The tree a run computes (every counted input a scan of its key sets, or none where the counts
    are declined), its frames, what it writes to the key counts, and the rules it applies (its
    message: the counted inputs as planned, or recomputed by key where declined)."""

    tree: TreePlan
    frames: ScanFrames
    helper: apply.HelperState | None  # None: the key counts left as they are (declined)
    rules: list[str]


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
    sets: KeySets | None = None
    if kept is not None:
        sets = KeySets({c.index: kept_counts(kept, c) for c in counted}, False, None)
    else:
        # The counts' own range is what a run after complete runs pays beyond a steady one (REBUILD's
        # figure, ``worker.costs``), not part of FAST's steady cost.
        with scope.rebuilding():
            sets = caught_up(ev, counted, store, layout, ranges)
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
        reached = reached_counts(counted, dict((c.index, flips) for c, flips in flipped), sets.moved)
        source = reduce(DataFrame.unionByName, [merged_rows(c, flips, schema) for c, flips in reached])
        spec = apply.keyed_upsert(source, [INPUT, *[c.column for c in counted]], schema)
        write = apply.StateWrite(source, layout, spec)
    helper = apply.HelperState(store.table, write, sets.origin)  # carried as caught up, if unchanged
    return Integrated(_rewritten(tree, counted), frames, helper, tree.describe())


def _declined(tree: TreePlan, ev: Evaluation, helper: apply.HelperState | None) -> Integrated:
    """The run of ``tree`` without its counts: its counted inputs recomputed by key."""
    uncounted = _uncounted(tree)
    return Integrated(uncounted, ev.frames, helper, uncounted.describe())


def _key_type(rows: DataFrame, key: str) -> DataType:
    return next(f.dataType for f in rows.schema.fields if f.name.lower() == key.lower())


# Why a rebuild keeps no counts, where no key has a match yet: decided at the next run, not now.
NOTHING_TO_COUNT = "no matching row yet"


def _rebuilt(
    ev: Evaluation, counted: list[Counted], schema: StructType, layout: str
) -> tuple[KeySets | None, str]:
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
    rows = reduce(DataFrame.unionByName, [state_rows(c, counts[c.index], schema) for c in counted])
    return KeySets(counts, True, apply.StateWrite(rows, layout)), ""


def _key_set_frames(
    ev: Evaluation, counted: list[Counted], sets: KeySets, table: str
) -> tuple[ScanFrames, list[tuple[Counted, DataFrame]]]:
    """The run's frames with each counted input's key sets at old and new, and its flipped keys as its
    change rows (inserted: a first match, deleted: the last one gone); and the counts each changed
    input reached (``counted_flips``)."""
    old, new, reads = dict(ev.frames.old), dict(ev.frames.new), dict(ev.frames.reads)
    flipped: list[tuple[Counted, DataFrame]] = []
    first, last = (F.col(OLD) <= 0) & (F.col(NEW) > 0), (F.col(OLD) > 0) & (F.col(NEW) <= 0)
    for c in counted:
        counts = sets.counts[c.index]
        keys = _key_rows(c, counts)
        old[c.frame_name] = new[c.frame_name] = keys  # unchanged: one key set for both versions
        net = net_change(ev, c, ev.delta(c.node))
        if net is None:
            continue
        flips = counted_flips(ev.scope, net, counts, at_new=sets.at_new, table=table)
        flipped.append((c, flips))
        if c.keyed.count_column is not None:  # every count the change moves is a change of the input
            other = _key_rows(c, counts_at_other(counts, flips, at_new=sets.at_new))
            old[c.frame_name], new[c.frame_name] = (other, keys) if sets.at_new else (keys, other)
            reached, added, removed = sums(
                net, F.lit(1), F.greatest(F.col(NET), F.lit(0)), F.greatest(-F.col(NET), F.lit(0))
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

    return rows(OLD, "delete").unionByName(rows(NEW, "insert"))


def _counts_at_new(ev: Evaluation, c: Counted) -> tuple[DataFrame, float | None]:
    """The input's matching rows counted per key at the pinned version (the rebuild), held, and how
    many a key has on average (None without any)."""
    keys = matching_keys(ev, c, ev.at(c.node, True))
    per_key = keys.groupBy(KEY).agg(F.count(F.lit(1)).alias(MATCHES))
    # Every key of the whole input: usually past the driver's limit.
    counts, found = hold_counted(ev.scope.session, per_key, large=True)
    return counts, sums(counts, F.col(MATCHES))[0] / found if found else None


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
