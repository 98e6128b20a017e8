"""Semi and anti joins (EXISTS, NOT EXISTS, IN) whose input is integrated: matching rows per key.

``EXISTS (SELECT … FROM t WHERE t.c = o.x AND <t's own conditions>)`` (NOT EXISTS alike; ``o.x IN
(SELECT t.c FROM t WHERE <t's own conditions>)``) reads t only through the set of keys that some row
of t passing its own conditions holds (``Keyed.matches``: those rows' keys). As DBSP integrates a
join's side, the MV keeps, per such input, how many of its rows match each key (helper state
``<mv>__mvkeys``: ``input``, the key in ``k<input>``, ``matches`` > 0; trusted by the rule of
``aggregate.state``: written before the MV commit, tagged with its run). A run then

* counts its change rows through the subquery's own conditions, net per key (``_net``: the change rows
  only, a few thousand at most);
* reads the kept counts at those keys, so old = kept, new = kept + net; the keys whose count goes
  from 0 to more (``on``) or back (``off``) are all that changes of the set;
* binds the input, in the block's SQL with that subquery reading its keys (``Block.over_key_sets``),
  to the key set at old (kept) and at new (kept − off + on), with ``on`` / ``off`` as its change: a
  scan like any other to the block's rule (``inner_join``), which reads the outer rows at the flipped
  keys only.

t itself is never read, where the keyed recompute read it at every key its change reached, at new
and at old (TPC-H Q22's orders by customer: 3 M rows a run at SF 1 for ~900 customers). Without a
trusted state (the first FAST run, after a COMPLETE one, a crash between the state and the MV
commits) the counts are rebuilt from t at the pinned version, and old = new − net.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from functools import reduce

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql.types import IntegerType, LongType, StructField, StructType

from workers import warehouse
from workers.ddl.tree.values import Aggregate, Block, Keyed, Node, Scan, TreePlan, Union
from workers.jobs.changes.reads import Changes
from workers.jobs.fast import apply
from workers.jobs.fast.aggregate.state import StateStore, layout_id
from workers.jobs.fast.operators.keyed import KEY
from workers.jobs.fast.operators.nodes import Evaluation
from workers.jobs.fast.operators.scan import ScanFrames
from workers.jobs.spark.columns import q
from workers.jobs.spark.held import hold_counted, sums

INPUT, MATCHES = "input", "matches"
# The fewest matching rows a key of every counted input must average for its counts to be kept. A run
# reads the kept counts whole and rewrites their files, where the keyed recompute reads the input at
# the keys reached: the counts pay where they are many times fewer rows. TPC-H SF 1, 3 rounds: Q22's
# orders by customer (~15 a key) 837 ms a run counted, 1,111 recomputed; Q4's late lineitems by order
# (~2.8 a key, and every change flips its keys) 3.9-4.4 s counted, 1.9 s recomputed.
MIN_ROWS_PER_KEY = 8
_NET, _OLD, _NEW = "__mvs_net", "__mvs_old", "__mvs_new"


@dataclass(frozen=True)
class Counted:
    """A counted input (``Keyed.matches``) of a block of the tree, numbered in the tree's order."""

    index: int
    keyed: Keyed
    node: Node

    @property
    def table(self) -> str:
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
    """Every counted input of ``tree``'s blocks, leaves first (one numbering for state and frames)."""
    found: list[tuple[Keyed, Node]] = []

    def walk(node: Node) -> None:
        if isinstance(node, Aggregate):
            walk(node.input)
        elif isinstance(node, Block | Union):
            for n in node.inputs:
                walk(n)
        if isinstance(node, Block) and node.over_key_sets is not None:
            inputs = {n.view: n for n in node.inputs}
            found.extend((k, inputs[k.view]) for k in node.keyed if k.matches is not None)

    walk(tree.block)
    return [Counted(i, k, n) for i, (k, n) in enumerate(found)]


@dataclass(frozen=True)
class Integrated:
    """The run's tree and frames with every counted input a scan of its key sets, and what it writes
    to the key counts (``apply.HelperState``)."""

    tree: TreePlan
    frames: ScanFrames
    helper: apply.HelperState


def integrate(scope: apply.Scope, tree: TreePlan, ev: Evaluation, state: StateStore) -> Integrated | None:
    """``tree``'s counted inputs as scans of their key sets (see the module's note); None: none."""
    counted = counted_inputs(tree)
    if not counted:
        return None
    store = state.beside(warehouse.key_counts_table_name(state.mv_name))
    types = {c.index: _matching_keys(ev, c, ev.at(c.node, False)).schema[0].dataType for c in counted}
    schema = StructType(
        [
            StructField(INPUT, IntegerType(), False),
            *[StructField(c.column, types[c.index], True) for c in counted],
            StructField(MATCHES, LongType(), False),
        ]
    )
    layout = layout_id("key counts", [(c.keyed.matches, types[c.index].simpleString()) for c in counted])
    declined = f"{layout} declined"  # the state of an MV whose counts are not worth keeping: none
    found = store.trusted_layout()
    if found == declined:
        return Integrated(tree, ev.frames, apply.HelperState(store.table, None))
    nets = {c.index: net for c in counted if (net := _net(ev, c)) is not None}
    kept = store.read(layout) if found == layout else None
    write: apply.StateWrite | None = None
    if kept is None:
        with scope.rebuilding():
            counted_at_new = {c.index: _counts_at_new(ev, c) for c in counted}
            counts = {i: frame for i, (frame, _) in counted_at_new.items()}
            few = [i for i, (_, per_key) in counted_at_new.items() if per_key < MIN_ROWS_PER_KEY]
            if few:
                empty = scope.session.createDataFrame([], schema)
                write = apply.StateWrite(empty, declined)
            else:
                rows = [_state_rows(c, counts[c.index], schema) for c in counted]
                write = apply.StateWrite(reduce(DataFrame.unionByName, rows), layout)
        if few:
            ev.note(
                f"key counts not kept: under {MIN_ROWS_PER_KEY} matching rows a key; state rebuilt from "
                f"the bases in {store.table}, empty"
            )
            return Integrated(tree, ev.frames, apply.HelperState(store.table, write))
        ev.note(f"key counts: state rebuilt from the bases in {store.table}")
    else:
        counts = {
            c.index: kept.where(F.col(INPUT) == c.index).select(F.col(c.column).alias(KEY), MATCHES)
            for c in counted
        }
    old, new, reads = dict(ev.frames.old), dict(ev.frames.new), dict(ev.frames.reads)
    merged: list[DataFrame] = []
    for c in counted:
        keys = counts[c.index].select(F.col(KEY).alias(c.key))
        old[c.table] = new[c.table] = keys  # unchanged: one key set for both versions
        if c.index not in nets:
            continue
        flips = _flips(scope, nets[c.index], counts[c.index], rebuilt=kept is None)
        on = flips.where((F.col(_OLD) <= 0) & (F.col(_NEW) > 0)).select(F.col(KEY).alias(c.key))
        off = flips.where((F.col(_OLD) > 0) & (F.col(_NEW) <= 0)).select(F.col(KEY).alias(c.key))
        if kept is None:  # the counts are at new
            old[c.table] = keys.join(on, c.key, "left_anti").unionByName(off)
        else:
            new[c.table] = keys.join(off, c.key, "left_anti").unionByName(on)
        gained, lost = sums(
            flips, (F.col(_OLD) <= 0) & (F.col(_NEW) > 0), (F.col(_OLD) > 0) & (F.col(_NEW) <= 0)
        )
        if gained + lost:
            changed = on.withColumn("_change_type", F.lit("insert")).unionByName(
                off.withColumn("_change_type", F.lit("delete"))
            )
            reads[c.table] = Changes(changed, False, gained + lost)
        merged.append(_merged_rows(c, flips, schema))
        ev.note(f"{c.keyed.operator} by key counts: {gained} keys gained a first match, {lost} lost the last")
    if write is None and merged:
        source = reduce(DataFrame.unionByName, merged)
        spec = apply.keyed_upsert(source, [INPUT, *[c.column for c in counted]], schema)
        write = apply.StateWrite(source, layout, spec)
    frames = replace(ev.frames, old=old, new=new, reads=reads, counted=frozenset(c.table for c in counted))
    return Integrated(_rewritten(tree, counted), frames, apply.HelperState(store.table, write))


def _matching_keys(ev: Evaluation, c: Counted, rows: DataFrame) -> DataFrame:
    """The keys (``KEY``) of ``rows`` (the input's, at a version or changed) that pass the subquery's
    own conditions, one per row; not NULL (a NULL key matches none)."""
    found = ev.sql(c.keyed.matches or "", {c.node.view: rows})
    return found.select(F.col(q(found.columns[0])).alias(KEY)).where(F.col(KEY).isNotNull())


def _net(ev: Evaluation, c: Counted) -> DataFrame | None:
    """The net change of the count per key (``KEY``, ``_NET`` ≠ 0) from the input's change rows, held;
    None where it has none (the input unchanged, or no change row passing the own conditions)."""
    delta = ev.delta(c.node)
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


def _counts_at_new(ev: Evaluation, c: Counted) -> tuple[DataFrame, float]:
    """The input's matching rows counted per key at the pinned version (the rebuild), held, and how
    many a key has on average (infinite without any)."""
    keys = _matching_keys(ev, c, ev.at(c.node, True))
    counts, found = hold_counted(ev.scope.session, keys.groupBy(KEY).agg(F.count(F.lit(1)).alias(MATCHES)))
    return counts, sums(counts, F.col(MATCHES))[0] / found if found else float("inf")


def _flips(scope: apply.Scope, net: DataFrame, counts: DataFrame, *, rebuilt: bool) -> DataFrame:
    """Per key the change reaches: its count at old (``_OLD``) and at new (``_NEW``), held; ``counts``
    are at new where ``rebuilt``, else at old."""
    found = F.coalesce(F.col(MATCHES), F.lit(0)).cast("long")
    if rebuilt:
        old, new = found - F.col(_NET), found
    else:
        old, new = found, found + F.col(_NET)
    joined = net.join(counts, KEY, "left").select(KEY, old.alias(_OLD), new.alias(_NEW))
    return hold_counted(scope.session, joined)[0]


def _state_rows(c: Counted, counts: DataFrame, schema: StructType) -> DataFrame:
    """``counts`` (``KEY``, ``MATCHES``) as rows of the state table."""
    return counts.select(*_columns(c, schema, F.col(KEY), F.col(MATCHES)))


def _merged_rows(c: Counted, flips: DataFrame, schema: StructType) -> DataFrame:
    """The state rows of the keys the change reaches, with the MERGE's ``OP``: a count of 0 deleted."""
    op = F.when(F.col(_NEW) > 0, "upsert").otherwise("delete").alias(apply.OP)
    return flips.select(*_columns(c, schema, F.col(KEY), F.col(_NEW)), op)


def _columns(c: Counted, schema: StructType, key: Column, matches: Column) -> list[Column]:
    out = [F.lit(c.index).cast("int").alias(INPUT)]
    for field in schema.fields[1:-1]:
        value = key if field.name == c.column else F.lit(None)
        out.append(value.cast(field.dataType).alias(field.name))
    return [*out, matches.cast("long").alias(MATCHES)]


def _rewritten(tree: TreePlan, counted: list[Counted]) -> TreePlan:
    """``tree`` with every counted input a scan of its key sets, its block's SQL reading them."""
    scans = {c.keyed.view: Scan(c.table, c.keyed.view, c.keyed.view) for c in counted}

    def rewrite(node: Node) -> Node:
        if isinstance(node, Scan):
            return node
        if isinstance(node, Aggregate):
            inner = rewrite(node.input)
            assert isinstance(inner, Block)
            return replace(node, input=inner)
        inputs = tuple(scans.get(n.view) or rewrite(n) for n in node.inputs)
        if isinstance(node, Block) and node.over_key_sets is not None:
            return replace(node, sql=node.over_key_sets, inputs=inputs)
        return replace(node, inputs=inputs)

    root = rewrite(tree.block)
    assert isinstance(root, Block)
    return replace(tree, root=root)
