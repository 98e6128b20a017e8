"""The one place that decides what a refresh run does: skip it, apply the MV log, or recompute.

``decide`` returns the kind and the reason the run record's message shows ("skipped: no change",
"complete: refresh mode COMPLETE", "complete: no MV log on sales", "fast: …"), and what the run
considered (``planning``: the candidates with their estimated costs, ``workers.worker.planning``,
which also makes FORCE's choice by cost). The maintainer's cheap
pre-check (no Spark: the watermark it remembers against the bases' versions) and the runner (the
watermark the MV table records) both ask ``unchanged``, the first rule of ``decide``.

Not decided here: Delta's idempotent-write fence, by which a commit of an older epoch or an
already-applied watermark is not applied (``workers.jobs``); that protects the table from stale
owners, it does not choose the work.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from workers.catalog.specs import REFRESH_MODES
from workers.ddl.plan import FastRefreshPlan
from workers.jobs import RunRequest
from workers.jobs.delta.sizes import ChangeSize
from workers.worker.planning import COMPLETE, CostModel, Planning, PlanShape, fast_unchecked, plan_run

NO_CHANGE = "skipped: no change"


class DecisionKind(enum.Enum):
    SKIP = "SKIP"
    INCREMENTAL = "INCREMENTAL"
    COMPLETE = "COMPLETE"


@dataclass(frozen=True)
class Decision:
    kind: DecisionKind
    reason: str  # what the run record's message starts with
    planning: Planning | None = None  # what was considered (None: skipped)
    shape: PlanShape | None = None  # the FAST plan's, which its cost grows with (None: no FAST plan)

    @classmethod
    def complete(
        cls, reason: str, planning: Planning | None = None, shape: PlanShape | None = None
    ) -> Decision:
        return cls(DecisionKind.COMPLETE, reason, planning, shape)


def unchanged(pinned: Mapping[str, int], reflected: Mapping[str, int] | None) -> Decision | None:
    """SKIP when the MV already reflects exactly the versions the bases are at; else None.

    ``reflected``: the watermark of the MV's content, None when unknown or not to be trusted."""
    if reflected and dict(reflected) == dict(pinned):
        return Decision(DecisionKind.SKIP, NO_CHANGE)
    return None


def decide(
    request: RunRequest,
    reflected: Mapping[str, int] | None,
    fast_blocker: Callable[[], str | None],
    size: Callable[[], ChangeSize | None] = lambda: None,
    model: CostModel | None = None,
    after_complete: bool = False,
) -> Decision:
    """What the run of ``request`` does, given the watermark the MV table records (``reflected``).

    FAST applies the MV log when the query has a fast-refresh plan and ``fast_blocker`` (the
    Delta-side preconditions: an MV log covering the MV's watermark, same columns…; called only
    then, and in FORCE only where it would run FAST or probe COMPLETE) finds nothing against
    it; otherwise it recomputes, saying why (an MV behind the retained change data is refreshed
    completely: design). FORCE, where FAST could run, takes the cheaper by
    ``model``'s estimates over ``size`` (the run's change and table sizes, read from the Delta logs;
    None: unknown, then FAST while it can); ``after_complete``: the MV's last run recomputed it.
    """
    if request.mode not in REFRESH_MODES:
        raise ValueError(f"unknown refresh mode {request.mode!r}")
    skip = unchanged(request.pinned, reflected)
    if skip is not None:
        return skip
    plan = request.plan.fast_refresh
    shape = plan_shape(plan) if plan is not None else None
    sizes, costs = size(), model or CostModel()
    if request.mode == "FORCE" and plan is not None:
        # FAST's preconditions (Delta log reads and Spark's analysis of the query: 0.1-0.3 s) are
        # checked only where FORCE would run FAST or probe COMPLETE (a blocked FAST makes that no
        # probe): a recompute by cost or bulk needs none of them (1M rows, 30 % changed: FORCE's
        # recomputes took 0.13-0.26 s longer than its twin's).
        unchecked = plan_run(request.mode, None, sizes, costs, shape, after_complete)
        if unchecked.choice == COMPLETE and not unchecked.probe:
            planning = fast_unchecked(unchecked)
        elif (blocker := fast_blocker()) is None:
            planning = unchecked
        else:
            planning = plan_run(request.mode, blocker, sizes, costs, shape, after_complete)
    else:
        if request.mode == "COMPLETE":
            blocker = None
        elif plan is None:
            blocker = f"complete: fast refresh is not possible: {request.plan.fast_reason}"
        else:
            blocker = fast_blocker()
        planning = plan_run(request.mode, blocker, sizes, costs, shape, after_complete)
    if planning.choice == COMPLETE or plan is None:
        return Decision.complete(planning.reason, planning, shape)
    since = (reflected or {}).get(plan.base_table)
    until = request.pinned.get(plan.base_table)
    reason = f"fast: changes of {plan.base_table} after v{since} up to v{until}"
    return Decision(DecisionKind.INCREMENTAL, reason, planning, shape)


def plan_shape(plan: FastRefreshPlan) -> PlanShape:
    """What FAST's cost prior reads of a plan: its kind and scans (a top-N's inner plan's)."""
    inner = plan.top_n.inner if plan.top_n is not None else plan
    scans = tuple(t.table for t in inner.tables) or (inner.base_table,)
    return PlanShape(inner.kind, scans, plan.top_n is not None)
