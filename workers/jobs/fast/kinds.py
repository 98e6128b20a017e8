"""Each FAST plan kind (``workers.ddl.plan.FAST_KINDS``) and its rule: the one place a run tells
kinds apart. A rule computes the change a run commits (``Change``) from the run's change rows; it
may raise ``Inconsistent`` when the MV cannot be what its watermark says (the run then refreshes
completely).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

from pyspark.sql import functions as F

from workers.config import Settings
from workers.ddl.plan import FastKind, FastRefreshPlan
from workers.ddl.tree.values import tree_from_json
from workers.jobs.changes.reads import Changes
from workers.jobs.complete import read_at
from workers.jobs.delta.metadata import MvWatermark
from workers.jobs.fast import append, apply, having, join, union
from workers.jobs.fast.aggregate.merge import aggregate_merge
from workers.jobs.fast.aggregate.state import StateStore
from workers.jobs.fast.apply import COMPUTE_STEP, INSERT_TYPES, Change, Scope
from workers.jobs.fast.inputs import base_input
from workers.jobs.fast.operators.top import tree_change
from workers.jobs.fast.top_n import InnerRun, top_n_change
from workers.jobs.request import RunRequest


@dataclass(frozen=True)
class Run:
    """What a rule knows of its run: the request, its plan, and every base's versions (since, until]
    (a join or union has several; ``plan.base_table`` is the first)."""

    settings: Settings
    request: RunRequest
    plan: FastRefreshPlan
    ranges: Mapping[str, tuple[int, int]]
    mv: MvWatermark  # the MV's newest commit tag, as the run read it (its helper state is trusted by it)
    # The run goes on from its helper state's watermark, before the MV's (``StateStore.origin``): ``mv``
    # is then the older commit the state belongs to, ``ranges`` start at its watermark.
    catching_up: bool = False

    def state_store(self, scope: Scope) -> StateStore:
        """The MV's helper state (``workers.jobs.fast.aggregate.state``), as of the MV content read."""
        return StateStore(scope.session, self.settings, self.request.mv_name, self.mv)


# The change to commit, and whether its change rows were shared with another MV's run.
ChangeRule = Callable[[Scope, Run], tuple[Change, bool]]


@dataclass(frozen=True)
class Rule:
    change: ChangeRule
    # Matches MV rows by their values (a projection's rows have no key): rows whose columns cannot be
    # compared (MAP, VARIANT) make it impossible.
    matches_rows: bool


def _base_changes(scope: Scope, run: Run) -> Changes:
    since, until = run.ranges[run.plan.base_table]
    return scope.changes(run.plan.base_table, since, until)


def _projection(scope: Scope, run: Run) -> tuple[Change, bool]:
    """Appended when the base only appended (known from its log, no job), else its merge."""
    read, base, query = _base_changes(scope, run), run.plan.base_table, run.request.query
    since, until = run.ranges[base]
    inserted = append.inserted_rows(scope.session, run.settings, base, since, until)
    if inserted is not None:
        rows = read.frame.where(F.col("_change_type").isin(*INSERT_TYPES))
        appended = scope.run_query(query, base, rows)
        return Change("append", inserted, f"{inserted} rows inserted", appended=appended), read.shared
    mv = scope.mv_frame()
    scope.step(COMPUTE_STEP)
    return apply.projection_change(scope, query, base, read.frame, mv), read.shared


def _aggregate(scope: Scope, run: Run) -> tuple[Change, bool]:
    read, base, plan = _base_changes(scope, run), run.plan.base_table, run.plan
    mv = scope.mv_frame()
    scope.step(COMPUTE_STEP)
    base_at_v = read_at(scope.session, run.settings, base, run.ranges[base][1])
    at_v = base_input(scope, run.request.query, plan, base_at_v)
    store = run.state_store(scope)
    change = aggregate_merge(
        scope,
        run.request.query,
        plan,
        read.frame,
        mv,
        at_v,
        store,
        change_rows=read.rows,
        catching_up=run.catching_up,
    )
    return change, read.shared


def _aggregate_having(scope: Scope, run: Run) -> tuple[Change, bool]:
    """The groups the change rows reach, recomputed (``workers.jobs.fast.having``)."""
    read, base = _base_changes(scope, run), run.plan.base_table
    mv = scope.mv_frame()
    scope.step(COMPUTE_STEP)
    at_v = read_at(scope.session, run.settings, base, run.ranges[base][1])
    return having.having_change(scope, run.request.query, run.plan, read.frame, mv, at_v), read.shared


def _join(scope: Scope, run: Run) -> tuple[Change, bool]:
    """A join's delta rules over every base's change rows (``workers.jobs.fast.join``)."""
    return join.join_change(scope, run.request, run.plan, run.ranges)


def _join_aggregate(scope: Scope, run: Run) -> tuple[Change, bool]:
    """The aggregate's merge of the join's change rows (its delta rules), linear in them: helper
    state kept as for one base, rebuilt from the join at the bases' new versions when untrusted."""
    joined = join.joined_inputs(scope, run.request, run.plan, run.ranges)
    store = run.state_store(scope)
    plan, query = joined.plan, run.request.query
    change = aggregate_merge(
        scope, query, plan, joined.rows, joined.mv, joined.at_v, store, catching_up=run.catching_up
    )
    return change, joined.shared


def _join_aggregate_having(scope: Scope, run: Run) -> tuple[Change, bool]:
    return having.join_having_change(scope, run.request, run.plan, run.ranges)


def _union(scope: Scope, run: Run) -> tuple[Change, bool]:
    """Each branch over its base's change rows (``workers.jobs.fast.union``)."""
    return union.union_change(scope, run.request, run.plan, run.ranges)


def _tree(scope: Scope, run: Run) -> tuple[Change, bool]:
    """Each operator of the tree by its rule (``workers.jobs.fast.operators``)."""
    assert run.plan.tree is not None, "a tree plan holds its tree"
    tree = tree_from_json(run.plan.tree)
    return tree_change(scope, tree, run.ranges, run.state_store(scope), catching_up=run.catching_up)


def _top_n(scope: Scope, run: Run) -> tuple[Change, bool]:
    """The inner query's rows kept by its own kind's rule, the MV their top n (``fast.top_n``)."""
    top = run.plan.top_n
    assert top is not None, "a top_n plan holds its inner plan"

    def inner_rule(inner_scope: Scope, inner: InnerRun) -> tuple[Change, bool]:
        inner_run = Run(run.settings, inner.request, top.inner, inner.ranges, inner.mv)
        return KINDS[top.inner.kind].change(inner_scope, inner_run)

    return top_n_change(scope, run.request, top, run.ranges, run.mv, inner_rule)


KINDS: Mapping[FastKind, Rule] = {
    "projection": Rule(_projection, matches_rows=True),
    "aggregate": Rule(_aggregate, matches_rows=False),
    "aggregate_having": Rule(_aggregate_having, matches_rows=False),
    "join_projection": Rule(_join, matches_rows=True),
    "join_aggregate": Rule(_join_aggregate, matches_rows=False),
    "join_aggregate_having": Rule(_join_aggregate_having, matches_rows=False),
    "union_projection": Rule(_union, matches_rows=True),
    "tree": Rule(_tree, matches_rows=True),  # a projection at its top matches rows
    "top_n": Rule(_top_n, matches_rows=True),  # the MV's rows are matched by their values
}
