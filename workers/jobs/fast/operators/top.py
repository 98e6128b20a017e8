"""The top of the tree: what the run commits from the block's signed rows.

* projection (the MV is the block's rows): appended when every changed base only appended (and every
  operator is linear: an anti join loses rows on an insert), else the
  rewrite merge of ``apply.projection_change`` (net copies per distinct row, exact for duplicates);
  where the block is recomputed whole anyway, its rows at new netted against the MV's (``_recomputed``);
* aggregate (``TreePlan.aggregate``, a one-input aggregate over the block): the block's signed rows
  are its input's change rows and the block at the pinned version its input at v, merged by
  ``aggregate.merge.aggregate_merge`` through its ``InputAtV`` seam (``inputs.base_input`` over the
  block at v; with helper state where it needs one), or with HAVING the
  groups they reach recomputed (``having.having_change``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from functools import reduce

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from workers.ddl.tree.values import INPUT_VIEW, Scan, TreePlan, label
from workers.jobs.fast import append, apply, having
from workers.jobs.fast.aggregate.merge import aggregate_merge
from workers.jobs.fast.aggregate.state import CatchUpDeclined, StateStore
from workers.jobs.fast.inputs import base_input
from workers.jobs.fast.operators import semi_join
from workers.jobs.fast.operators.inner_join import block_delta
from workers.jobs.fast.operators.nodes import Evaluation
from workers.jobs.fast.operators.scan import scan_frames


def tree_change(
    scope: apply.Scope,
    tree: TreePlan,
    ranges: Mapping[str, tuple[int, int]],
    state: StateStore,
    *,
    catching_up: bool = False,
) -> tuple[apply.Change, bool]:
    """The change the tree's rules compute, named by them, and whether its change rows were shared.
    ``catching_up``: ``ranges`` start at the helper state's own run, before complete runs
    (``StateStore.origin``). The tree's rules read the bases at whatever versions the ranges start
    at, and key counts are trusted by that run alike; the aggregate at the top merges into its state
    and declines where its values are not all derived from it. Anything else declines at once
    (``CatchUpDeclined``): a projection's change or a HAVING's groups are merged into the MV, which
    reflects the complete run."""
    aggregate = tree.aggregate
    if catching_up and (tree.top != "aggregate" or aggregate is None or aggregate.kind != "aggregate"):
        raise CatchUpDeclined("only an aggregate at the top derives the MV's values from its state")
    frames = scan_frames(scope, tree, ranges)
    ev = Evaluation(scope, frames)
    rules = "; ".join(tree.describe())
    integrated = semi_join.integrate(scope, tree, ev, state, ranges)
    if integrated is not None:  # its counted inputs read as key sets (or not) from here on
        tree, rules = integrated.tree, "; ".join(integrated.rules)
        # A fresh view of the nodes: a key set's scan takes its input's view, whose memos are the input's.
        ev = Evaluation(scope, integrated.frames, changed_rows=ev.changed_rows, notes=ev.notes)
    if tree.top == "projection":
        change = _projection(scope, tree, ev, ranges)
    else:
        change = _aggregate(scope, tree, ev, state, catching_up)
    if integrated is not None and integrated.helper is not None:
        change = replace(change, helpers=(integrated.helper,))
    touched = ", ".join(f"{label(node)} {rows}" for node, rows in ev.changed_rows)
    interior = f" (interior change rows: {touched})" if touched else ""
    interior += "".join(f" ({note})" for note in ev.notes)
    return _named(change, f"operator tree [{rules}]{interior}"), frames.shared


def _named(change: apply.Change, rules: str) -> apply.Change:
    """``change`` named by the tree's rules, and so is the change its fallback computes (a one-pass
    MERGE's retry) when the commit needs it."""
    fallback = change.fallback
    retried = None if fallback is None else (lambda: _named(fallback(), rules))
    return replace(change, plan=f"{rules}, {change.plan}", fallback=retried)


def _signed(ev: Evaluation, tree: TreePlan) -> tuple[DataFrame, DataFrame]:
    found = block_delta(ev, tree.block)  # the root's change, not held: the top reads it
    if found is None:  # only a counted input changed, and no key of it flipped: no row changes
        assert ev.frames.key_sets, "a run has at least one changed base"
        empty = ev.at(tree.block, False).limit(0)
        return empty, empty
    return found


def _projection(
    scope: apply.Scope, tree: TreePlan, ev: Evaluation, ranges: Mapping[str, tuple[int, int]]
) -> apply.Change:
    session, settings, reads = scope.session, scope.settings, ev.frames.base_reads
    inserted = [append.inserted_rows(session, settings, b, *ranges[b]) for b in reads]
    if tree.linear and all(n is not None for n in inserted):  # only appends: only gained rows, appended
        gained = _signed(ev, tree)[0]
        total = sum(n or 0 for n in inserted)
        return apply.Change("append", total, f"{total} rows inserted", appended=gained)
    outputs = _recomputed(scope, tree, ev) or _signed(ev, tree)
    change_types = reduce(DataFrame.unionByName, [r.frame.select("_change_type") for r in reads.values()])
    mv = scope.mv_frame()
    return apply.projection_change(
        scope, tree.block_sql, tree.scans[0].view, change_types, mv, outputs=outputs
    )


def _recomputed(scope: apply.Scope, tree: TreePlan, ev: Evaluation) -> tuple[DataFrame, DataFrame] | None:
    """Where an input of the root is recomputed whole and changed (an uncorrelated subquery, or one
    nested where no key reaches it: TPC-H Q15's MAX, Q20's), the root's change is its rows at new
    against its rows at old, whatever the other terms: and at old they are the MV's rows (the MV is
    the root's rows). So the root is computed once, at new, and netted against the MV; None otherwise."""
    root = tree.block
    keyed = [(n, root.keyed_input(n.view)) for n in root.inputs]
    if not any(k is not None and k.column is None and ev.changed(n) for n, k in keyed):
        return None
    for node in root.inputs:  # a subtree read twice (Q15's revenue): computed once (Spark would twice)
        if not isinstance(node, Scan) and any(n is not node and ev.same(n, node) for n in root.inputs):
            ev.hold_new(node)
    mv = scope.mv_rows_by_delta_rs(scope.mv_frame().schema, None)
    return ev.at(root, True), mv if mv is not None else scope.mv_snapshot()


def _aggregate(
    scope: apply.Scope, tree: TreePlan, ev: Evaluation, state: StateStore, catching_up: bool
) -> apply.Change:
    plan, query = tree.aggregate, tree.aggregate_sql
    assert plan is not None and query is not None and plan.base_table == INPUT_VIEW
    gained, lost = _signed(ev, tree)
    rows = gained.withColumn("_change_type", F.lit("insert")).unionByName(
        lost.withColumn("_change_type", F.lit("delete"))
    )
    block = ev.at(tree.block, True)
    mv = scope.mv_frame()
    if plan.kind == "aggregate_having":
        return having.having_change(scope, query, plan, rows, mv, block)
    # The block at v is the aggregate's one input, as a base is a one-table aggregate's.
    at_v = replace(
        base_input(scope, query, plan, block), changes="the joined change rows", source="the bases"
    )
    return aggregate_merge(
        scope, query, plan, rows, mv, at_v, state, change_rows=ev.frames.change_rows, catching_up=catching_up
    )
