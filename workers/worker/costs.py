"""What an MV's refreshes cost per technique: priors from the plan and the sizes, learnt from runs. Pure.

Three costs, each a fixed part plus a part per row it handles (``TechniqueCost``):
- FAST, a steady incremental run: per change row of its range; its prior grows with the plan (scans,
  operator tree, top-N: their Spark jobs) and, where the change is joined with other bases, with the
  rows of those bases it reads (``fast_prior``);
- COMPLETE, a recomputation: per row it reads and writes (the bases' and the MV's);
- REBUILD, what the first FAST run after a complete one pays on top of a steady run: its helper
  state (join aggregates, trees, top-N) is rebuilt from the bases, about a complete read (a complete
  run does not keep that state). Per row of the complete run; timed by the run itself (``Rebuilt``:
  an MV that keeps no state learns 0, and so does one whose state caught up from its own run:
  ``workers.jobs.fast.aggregate.state``, ``StateStore.origin``).

A cost not yet learnt is None and its prior is used; COMPLETE's at the machine's pace
(``CostModel.pace``): the priors were calibrated on a quiet machine, and under load every run takes
3-10x what they say, so a technique measured here would look dearer than the other's unmeasured
prior (a 1-row aggregate's FAST measured at 3 s against a 1 s prior chose COMPLETE at its 1 s prior;
it took 11 s). Learning (``CostModel.learned``): an average weighted by ``max(1 / (runs + 1),
LEARNING_WEIGHT)``, so the first outcome replaces the prior (an uncalibrated prior is worth no more
than one measurement) and later ones move it by at least 30 %; an outcome over ``SIZE_SPAN`` times
more or fewer rows than the last one learnt replaces it.
Calibration (SF 1 TPC-H baseline of session 23 and ``bench.fast_vs_complete`` at 1M rows, this
2-core machine): a complete run reads ~0.5 µs a row; a steady FAST run costs ~0.8 s on one base,
~0.3 s more per further scan (0.6 s before a join's narrowed reads listed their files from the log:
session 25's SF 1 run, q12 1.0 s, q14 1.0 s, q19 0.9 s, q05 3.1 s), ~0.5 s more for an operator tree
(3 s before its interior steps read their inputs once: session 27's SF 1 run, the 11 trees fitted
within 2x, q04 2.4 s, q15 1.1 s, q21 11 s) and ~2 s for a top-N; its first run after a complete one
1-2.5 complete runs more where it keeps state.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

from workers.jobs.delta.sizes import ChangeSize
from workers.jobs.rebuilt import NO_REBUILD, Rebuilt

FAST, COMPLETE, REBUILD = "FAST", "COMPLETE", "REBUILD"
# Weight of the newest outcome in a learnt cost once it has a few (the first ones weigh more).
LEARNING_WEIGHT = 0.3
# An outcome over this many times more (or fewer) rows than the last one learnt replaces the estimate
# at its size (``TechniqueCost.learned``).
SIZE_SPAN = 10.0
# Priors (module docstring: calibration). COMPLETE: per row read or written.
COMPLETE_FIXED_MS, COMPLETE_MS_PER_ROW = 500.0, 0.0005
# FAST: fixed per run, per further scan, for an operator tree, for a top-N; per change row.
FAST_FIXED_MS, FAST_MS_PER_SCAN, FAST_TREE_MS, FAST_TOP_N_MS = 800.0, 300.0, 500.0, 2000.0
FAST_MS_PER_ROW = 0.02
# Share of a complete read a FAST run pays for each base row it joins the change with (narrowed
# reads, no write): an operator tree reads more of them (keyed recomputes of its blocks).
FAST_JOIN_READ_SHARE, FAST_TREE_READ_SHARE = 0.1, 0.4
# REBUILD's prior: a complete read of the rows COMPLETE handles.
REBUILD_PRIOR_SHARE = 1.0
# The pace is at least 1 (FAST under its prior says the plan is light, not that the machine is fast)
# and at most 10 (the loads seen: runs at 3-10x the priors).
PACE_BOUNDS = (1.0, 10.0)
# The priors before session 23, which commits of then kept as if learnt: read back as not learnt.
_OLD_PRIORS = {FAST: (1200.0, 0.02), COMPLETE: (1000.0, 0.002)}


@dataclass(frozen=True)
class TechniqueCost:
    fixed_ms: float
    ms_per_row: float
    runs: int = 0  # outcomes learnt from (0: a prior, or COMPLETE's figure from the first build)
    # Runs of the other technique since this one last ran (its figure's age); REBUILD's: COMPLETE runs
    # since a FAST run right after a complete one measured it.
    idle: int = 0
    rows: int | None = None  # the rows of the last outcome learnt (None: a prior, or from before)

    def estimate_ms(self, rows: int) -> float:
        return self.fixed_ms + self.ms_per_row * rows

    def learned(self, rows: int, took_ms: float) -> TechniqueCost:
        """This cost after a run of ``rows`` that took ``took_ms``: the part that dominated the
        estimate moves towards what the outcome says of it. An outcome over ``SIZE_SPAN`` times
        more or fewer rows than the last one replaces the estimate at its size: a figure learnt at
        another order of magnitude says little of this one (``bench.fast_vs_complete``, 1M rows:
        FAST took 0.1 s appending 1 row, 0.9 s merging 1,100, and steps of 30 % from the first kept
        FORCE's estimate at 0.1-0.7 s over three runs at 1,100 rows; one FAST line fits both no
        better)."""
        far = self.rows is not None and not 1 / SIZE_SPAN <= (rows + 1) / (self.rows + 1) <= SIZE_SPAN
        weight = 1.0 if far else max(1 / (self.runs + 1), LEARNING_WEIGHT)
        by_rows = self.ms_per_row * rows
        if rows == 0 or by_rows < self.fixed_ms:
            fixed = _weighted(self.fixed_ms, max(took_ms - by_rows, 0.0), weight)
            return TechniqueCost(fixed, self.ms_per_row, self.runs + 1, rows=rows)
        per_row = _weighted(self.ms_per_row, max(took_ms - self.fixed_ms, 0.0) / rows, weight)
        return TechniqueCost(self.fixed_ms, per_row, self.runs + 1, rows=rows)

    def record(self) -> tuple[float, ...]:
        kept = (self.fixed_ms, self.ms_per_row, self.runs, self.idle)
        return kept if self.rows is None else (*kept, self.rows)

    def aged(self) -> TechniqueCost:
        """This cost after a run of the other technique."""
        return replace(self, idle=self.idle + 1)


def _weighted(old: float, new: float, weight: float) -> float:
    return (1 - weight) * old + weight * new


@dataclass(frozen=True)
class PlanShape:
    """What a FAST plan's cost grows with, known from the plan alone: its kind, the table of each
    scan (a self-join's table twice), whether a top-N sits on top."""

    kind: str
    scans: tuple[str, ...]
    top_n: bool = False

    @property
    def tree(self) -> bool:
        return self.kind == "tree"


COMPLETE_PRIOR = TechniqueCost(COMPLETE_FIXED_MS, COMPLETE_MS_PER_ROW)


def fast_prior(shape: PlanShape | None, size: ChangeSize | None, complete: TechniqueCost) -> TechniqueCost:
    """A steady FAST run's cost before any is measured. ``complete``: the COMPLETE cost (learnt from
    the first build, usually), which prices a row read on this machine."""
    if shape is None:
        return TechniqueCost(FAST_FIXED_MS, FAST_MS_PER_ROW)
    fixed = FAST_FIXED_MS + FAST_MS_PER_SCAN * (len(shape.scans) - 1)
    fixed += (FAST_TREE_MS if shape.tree else 0.0) + (FAST_TOP_N_MS if shape.top_n else 0.0)
    share = FAST_TREE_READ_SHARE if shape.tree else FAST_JOIN_READ_SHARE
    fixed += share * complete.ms_per_row * joined_rows(shape.scans, size)
    return TechniqueCost(fixed, FAST_MS_PER_ROW)


def joined_rows(scans: Sequence[str], size: ChangeSize | None) -> int:
    """Rows of the bases a FAST run joins the change with: every scanned base (each once) that
    another scan's change meets — another base that changed, or its own second occurrence."""
    if size is None or len(scans) < 2 or not size.bases:
        return 0
    by_name = {b.name: b for b in size.bases}

    def changed(table: str) -> bool:
        found = by_name.get(table)
        return found is None or found.change_rows is None or found.change_rows > 0

    changed_scans = sum(changed(t) for t in scans)
    total = 0
    for table in dict.fromkeys(scans):
        others = changed_scans - (1 if changed(table) else 0)
        base = by_name.get(table)
        if others > 0 and base is not None and base.rows is not None:
            total += base.rows
    return total


def rows_handled(technique: str, size: ChangeSize | None) -> int | None:
    """The rows a technique's cost grows with: FAST the change rows, COMPLETE (and REBUILD) the
    bases' rows read and the MV's written (its rows before: the result's size is not known ahead)."""
    if size is None:
        return None
    if technique == FAST:
        return size.change_rows
    if size.base.rows is None:
        return None
    mv_rows = size.mv.rows if size.mv is not None and size.mv.rows is not None else 0
    return size.base.rows + mv_rows


@dataclass(frozen=True)
class CostModel:
    """One MV's costs per technique; None: not learnt yet (the priors, ``fast_prior`` for FAST)."""

    fast: TechniqueCost | None = None
    complete: TechniqueCost | None = None
    rebuild: TechniqueCost | None = None
    # The MV's last run was a COMPLETE probe (a try, not a switch by cost): going back to FAST is
    # judged on the steady figures. Not kept in MV commits, which keep the costs from before the
    # run: a new owner judges a return by the rebuild it pays.
    complete_probe: bool = False

    def pace(self, shape: PlanShape | None = None, size: ChangeSize | None = None) -> float:
        """How much slower than the priors this machine runs, from FAST measured for this MV while
        COMPLETE is not (FAST's estimate over its prior's, for this run's rows; ``PACE_BOUNDS``): it
        scales COMPLETE's prior. Not the other way round: COMPLETE's cost over its prior says as much
        about the query's rows (a join's) as about the machine, and a FAST prior scaled up by it keeps
        FORCE on COMPLETE, where FAST is never measured (1-row join, 1M rows: COMPLETE in 3 rounds,
        7.8x FAST). 1 when the rows are unknown."""
        rows = rows_handled(FAST, size)
        if self.fast is None or self.complete is not None or rows is None:
            return 1.0
        prior = fast_prior(shape, size, COMPLETE_PRIOR).estimate_ms(rows)
        low, high = PACE_BOUNDS
        return min(max(self.fast.estimate_ms(rows) / prior, low), high) if prior > 0 else 1.0

    def complete_cost(self, shape: PlanShape | None = None, size: ChangeSize | None = None) -> TechniqueCost:
        """COMPLETE's cost; its prior at the pace FAST's measurement shows (``shape``, ``size``)."""
        if self.complete is not None:
            return self.complete
        pace = self.pace(shape, size)
        return TechniqueCost(COMPLETE_PRIOR.fixed_ms * pace, COMPLETE_PRIOR.ms_per_row * pace)

    def fast_cost(self, shape: PlanShape | None, size: ChangeSize | None) -> TechniqueCost:
        return self.fast or fast_prior(shape, size, self.complete_cost())

    def rebuild_cost(self, shape: PlanShape | None = None, size: ChangeSize | None = None) -> TechniqueCost:
        """A state rebuild reads the bases: its prior is COMPLETE's price of a row."""
        if self.rebuild is not None:
            return self.rebuild
        return TechniqueCost(0.0, REBUILD_PRIOR_SHARE * self.complete_cost(shape, size).ms_per_row)

    def estimate_ms(
        self, technique: str, size: ChangeSize | None, shape: PlanShape | None = None
    ) -> float | None:
        """A run's estimate (FAST: steady; REBUILD: what a FAST run after a complete one pays
        more); None when the rows it grows with are unknown."""
        rows = rows_handled(technique, size)
        if rows is None:
            return None
        if technique == FAST:
            return self.fast_cost(shape, size).estimate_ms(rows)
        if technique == COMPLETE:
            return self.complete_cost(shape, size).estimate_ms(rows)
        return self.rebuild_cost(shape, size).estimate_ms(rows)

    def learned(
        self,
        technique: str,
        size: ChangeSize | None,
        took_ms: float,
        shape: PlanShape | None = None,
        after_complete: bool = False,
        rebuilt: Rebuilt = NO_REBUILD,
        probe: bool = False,
    ) -> CostModel:
        """The model after a run of ``technique`` over ``size`` that took ``took_ms``; unchanged
        when the run's rows are unknown. A first build (no MV yet) teaches COMPLETE only a lower
        cost: it pays for making the table (Spark's writer, a cold start), which a recompute does
        not (taught by builds, FORCE kept FAST at 30 % of 1M rows where FAST took 2.8-3.9x COMPLETE:
        ``bench.fast_vs_complete``, session 23); what it teaches counts as a prior (``runs`` 0):
        the first recompute replaces it, and FORCE probes COMPLETE until one has run.

        A FAST run says how long it rebuilt helper state (``rebuilt``): the steady cost learns the
        rest of the run, and REBUILD that time where the run came right ``after_complete`` (what
        the planner charges such a run). Before runs measured it, a guess split a first run (within
        2x of the steady prior: no state kept) and put TPC-H Q05's 4.3 s, 2.6 s of it a rebuild,
        down as steady: FORCE recomputed at 2.2-3.6 s where FAST took 1.3-1.8. A rebuild that
        replaced the change (a top-N's rows table recomputed) leaves the steady cost as it was,
        age included (Q21's would have learnt 0.7 s from the rest of such a run, against 6 s): the
        next run probes FAST steady. FAST's first run teaches a figure that counts as a prior
        (``runs`` 0), as the first build's does for COMPLETE: it compiles the code of each of its
        plans, which later runs take from the code cache (TPC-H SF 1 q19, session 30: 1.3 s, then
        0.74-0.87 s steady); the next FAST run replaces it. A run of one technique ages the other's
        figure (``idle``); a COMPLETE run ages REBUILD's as well. ``probe``: the run was a probe of
        ``technique`` (``complete_probe``)."""
        was = replace(self, complete_probe=probe and technique == COMPLETE)
        rows = rows_handled(technique, size)
        if rows is None:
            return was
        if technique == COMPLETE:
            complete = was.complete_cost(shape, size)
            # REBUILD ages too: where FAST's only run rebuilt instead (no steady figure), its age says
            # how long FAST has not run.
            aged_others = replace(
                was,
                fast=was.fast.aged() if was.fast is not None else None,
                rebuild=was.rebuild.aged() if was.rebuild is not None else None,
            )
            if size is not None and size.mv is None:
                if took_ms >= complete.estimate_ms(rows):
                    return was  # a first build (it also makes the table) is no cheaper than a recompute
                # ...and may still be dearer (TPC-H SF 1, session 27: 1.2-2.7x): a prior, not runs.
                return replace(aged_others, complete=replace(complete.learned(rows, took_ms), runs=0))
            return replace(aged_others, complete=complete.learned(rows, took_ms))
        aged = replace(was, complete=was.complete.aged() if was.complete is not None else None)
        steady = aged.fast_cost(shape, size).learned(rows, max(took_ms - rebuilt.ms, 0.0))
        if aged.fast is None:  # the first run compiles its plans' code: a prior, which the next replaces
            steady = replace(steady, runs=0)
        fast = aged.fast if rebuilt.instead else steady
        read_rows = rows_handled(REBUILD, size)
        if not after_complete or read_rows is None:
            return replace(aged, fast=fast)
        return replace(aged, fast=fast, rebuild=aged.rebuild_cost(shape, size).learned(read_rows, rebuilt.ms))

    def record(self) -> dict[str, tuple[float, ...]]:
        """Technique → (fixed ms, ms per row, runs, idle[, rows]) of each learnt cost: what an MV commit keeps
        for the MV's next owner."""
        learnt = ((FAST, self.fast), (COMPLETE, self.complete), (REBUILD, self.rebuild))
        return {name: cost.record() for name, cost in learnt if cost is not None}

    def restored(self, costs: Mapping[str, Sequence[float]]) -> CostModel:
        """This model with the techniques ``costs`` (``record``'s form, from an MV commit) names. An
        older commit's pair (fixed ms, ms per row) counts as one outcome learnt; without a fifth field
        the rows of the last outcome are unknown (the next one is weighed as usual)."""

        def cost(name: str, mine: TechniqueCost | None) -> TechniqueCost | None:
            kept = costs.get(name)
            if kept is None or len(kept) < 2 or tuple(kept) == _OLD_PRIORS.get(name):
                return mine
            runs = int(kept[2]) if len(kept) > 2 and math.isfinite(kept[2]) else 1
            idle = int(kept[3]) if len(kept) > 3 and math.isfinite(kept[3]) else 0
            rows = int(kept[4]) if len(kept) > 4 and math.isfinite(kept[4]) and kept[4] >= 0 else None
            return TechniqueCost(float(kept[0]), float(kept[1]), max(runs, 0), max(idle, 0), rows)

        return CostModel(cost(FAST, self.fast), cost(COMPLETE, self.complete), cost(REBUILD, self.rebuild))
