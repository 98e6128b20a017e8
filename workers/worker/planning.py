"""FORCE's choice by cost, and the planning information every refresh run records. Pure.

The costs come from ``workers.worker.costs`` (priors from the plan and the sizes, learnt per MV
from its runs' outcomes); ``plan_run`` takes every input as a value (the sizes from the Delta logs:
``workers.jobs.delta.sizes``), so it is tested without Spark.

FORCE takes the cheaper estimate; a bulk change (at least ``BULK_SHARE`` of the bases' rows) is
recomputed whatever the estimates say. The first FAST run after a complete one rebuilds the MV's
helper state (or catches it up from its own run, learnt as a rebuild of 0: ``costs``): its estimate
includes that (REBUILD), which is counted over ``REBUILD_PAYBACK_RUNS`` runs when choosing (the
steady runs after it pay it back).

A technique whose figure may be wrong is run once (a probe) where its estimate is within
``PROBE_FACTOR`` of the other's: a wrong figure is corrected only by running it. FAST is probed
where it
- never ran for the MV (a wrong FAST is learnt from and left at once, a wrong COMPLETE never would be);
- ran once and rebuilt its state instead of applying the change (a top-N's rows table recomputed,
  which teaches the steady cost nothing), not right after a complete run (that run would rebuild
  again): TPC-H SF 1 q03 recomputed at 2.7-3.0 s for good, where steady FAST took 2.5 s;
- is measured only by its first run, which compiles its plans' code, once a recompute has measured
  COMPLETE: TPC-H SF 1 q19 took 1.3 s, then 0.74-0.87 s (right after a complete run, judged with
  the rebuild it then pays);
- was left for COMPLETE ``REPROBE_AFTER_RUNS`` runs ago (its figure may be an outlier, or stale), or
  its one run rebuilt instead that many runs ago (that probe rebuilds again; the next run, not right
  after a complete one, measures FAST steady).
COMPLETE is probed, once FAST is measured and where it and the rebuild of FAST's state it causes
(weighted over ``REBUILD_PAYBACK_RUNS``, as FAST's own) are within the factor of FAST, where no recompute has
measured it: at its prior, or known only from the first build (which also makes the table: 1.2-2.7x
a recompute on TPC-H SF 1; q20 at SF 1 ran FAST at 1.9 s for good against its build's 1.8 s, where a
recompute took 0.86 s); or was left for FAST that many runs. FAST and COMPLETE keep their meaning:
the planning information then says what the other would have cost.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from workers.jobs.delta.sizes import ChangeSize, TableSize
from workers.records import Record
from workers.worker.costs import (
    COMPLETE,
    FAST,
    LEARNING_WEIGHT,
    REBUILD,
    CostModel,
    PlanShape,
    TechniqueCost,
    rows_handled,
)

__all__ = [
    "BULK_SHARE",
    "COMPLETE",
    "FAST",
    "LEARNING_WEIGHT",
    "PROBE_FACTOR",
    "REBUILD_PAYBACK_RUNS",
    "REPROBE_AFTER_RUNS",
    "Candidate",
    "CostModel",
    "PlanShape",
    "Planning",
    "TechniqueCost",
    "fast_unchecked",
    "plan_run",
    "rows_handled",
]

# A change of at least this share of the bases' rows is a bulk load: recomputing wins.
BULK_SHARE = 0.5
# A state rebuild is counted over this many runs: at TPC-H SF 1 q01's rebuild (~1.8 complete runs)
# was paid back by its steady FAST runs (0.23x COMPLETE) within 2.3 runs.
REBUILD_PAYBACK_RUNS = 3
# FAST never measured is tried when its estimate is at most this many times COMPLETE's: the priors
# were off by up to ~2x on the shapes measured (TPC-H SF 1 q06, q19: estimated 1.05-1.08x COMPLETE
# where FAST took 0.54-0.72x of it; the operator trees, session 27: q15 estimated 2.5 s, took 1.1 s).
# A wrong probe costs one run; a FAST never tried costs every run after it.
PROBE_FACTOR = 2.0
# FAST measured, then left for COMPLETE this many runs, is tried again under the same factor: its
# one figure may be an outlier (a run under load) or stale (the data, the machine moved on), and
# nothing else would ever correct it. A probe right after a complete run may pay a state rebuild too,
# and then one more run measures FAST steady: at most two runs in this many pay the probe.
REPROBE_AFTER_RUNS = 50
# The FAST candidate's note where a FORCE recompute by cost or bulk did not check FAST's preconditions.
FAST_UNCHECKED = "preconditions not checked: the recompute did not need them"


@dataclass(frozen=True)
class Candidate:
    technique: str  # FAST | COMPLETE
    estimated_ms: float | None  # None: the sizes it grows with are unknown
    available: bool
    note: str = ""  # why it is not available

    def record(self) -> Record:
        return {
            "technique": self.technique,
            "estimated_ms": self.estimated_ms,
            "available": self.available,
            "note": self.note or None,
        }


@dataclass(frozen=True)
class Planning:
    """What a run considered and why it took ``choice`` (the run record's ``planning``)."""

    choice: str
    reason: str  # "complete: …" / "fast: …", as the decision's reason starts
    candidates: tuple[Candidate, ...]
    size: ChangeSize | None
    probe: bool = False  # ``choice`` runs to be measured, not because its estimate is the lower

    def record(self) -> Record:
        size = self.size
        base = size.base if size is not None else TableSize(None, 0, 0)
        return {
            "choice": self.choice,
            "reason": self.reason,
            "candidates": [c.record() for c in self.candidates],
            "change_rows": size.change_rows if size is not None else None,
            "change_bytes": size.change_bytes if size is not None else None,
            "base_rows": base.rows,
            "base_bytes": base.bytes if size is not None else None,
            "base_files": base.files if size is not None else None,
            "mv_rows": size.mv.rows if size is not None and size.mv is not None else None,
        }


def plan_run(
    mode: str,
    fast_blocker: str | None,
    size: ChangeSize | None,
    model: CostModel,
    shape: PlanShape | None = None,
    after_complete: bool = False,
) -> Planning:
    """The technique of a run in refresh ``mode`` (COMPLETE | FAST | FORCE). ``fast_blocker``: why
    FAST cannot run now ("complete: first build", …), None when it can. ``shape``: the FAST plan's
    (its prior); ``after_complete``: the MV's last run recomputed it (a FAST run rebuilds its helper
    state). FAST stays strict: it recomputes only where it cannot be exact."""
    steady_ms, complete_ms = model.estimate_ms(FAST, size, shape), model.estimate_ms(COMPLETE, size, shape)
    rebuild_ms = model.estimate_ms(REBUILD, size, shape) if after_complete else 0.0
    fast_ms = None if steady_ms is None or rebuild_ms is None else steady_ms + rebuild_ms
    complete = Candidate(COMPLETE, complete_ms, True)

    def planned(choice: str, reason: str, fast_note: str = "") -> Planning:
        fast = Candidate(FAST, fast_ms if not fast_note else None, not fast_note, fast_note)
        return Planning(choice, reason, (fast, complete), size)

    if mode == "COMPLETE":
        return planned(COMPLETE, "complete: refresh mode COMPLETE", "refresh mode COMPLETE")
    if fast_blocker is not None:
        return planned(COMPLETE, fast_blocker, fast_blocker.removeprefix("complete: "))
    if mode == "FAST":
        return planned(FAST, "fast: refresh mode FAST")
    share = size.change_share if size is not None else None
    if share is not None and share >= BULK_SHARE:
        return planned(COMPLETE, f"complete: bulk change: {_change_text(size)}")
    if fast_ms is None or steady_ms is None or rebuild_ms is None or complete_ms is None:
        return planned(FAST, "fast: cost: sizes unknown, FAST while it can")
    # One complete run since FAST ran, a probe: going back is judged on the steady figures. Else a
    # COMPLETE probe measured between FAST's steady figure and its rebuild-charged one would stay
    # ~REPROBE_AFTER_RUNS runs on the dearer. Not after a switch by cost (or a bulk change): going
    # back pays the rebuild, which must pay back (TPC-H SF 1 q13, q22, session 34: COMPLETE chosen
    # on a cold first FAST figure, FAST again the next run at 3.3 s against 3.5 s steady, paying a
    # 2.9 s rebuild).
    returning = after_complete and model.complete_probe and model.fast is not None and model.fast.idle == 1
    known = model.complete  # None: COMPLETE at its prior (the build taught nothing)
    counted_ms = steady_ms + (0.0 if returning else rebuild_ms / REBUILD_PAYBACK_RUNS)
    versus = f"FAST est. {_duration(fast_ms)}"
    if rebuild_ms and returning:
        versus += f" ({_duration(rebuild_ms)} of it a state rebuild, not counted after one complete run)"
    elif rebuild_ms:
        versus += f" ({_duration(rebuild_ms)} of it a state rebuild, over {REBUILD_PAYBACK_RUNS} runs)"
    versus += f" vs COMPLETE est. {_duration(complete_ms)}"

    def probed(choice: str, what: str) -> Planning:
        """``choice`` run once to be measured (a probe), ``what`` saying why."""
        return replace(planned(choice, f"{choice.lower()}: probe: {what}; {versus}"), probe=True)

    if complete_ms < counted_ms:
        if counted_ms <= PROBE_FACTOR * complete_ms:
            if model.fast is None and model.rebuild is None:
                return probed(FAST, "FAST never run for this MV")
            if model.fast is None and not after_complete:  # not right after a complete run: it rebuilds
                why = "its one run rebuilt the state instead of applying the change"
                return probed(FAST, f"FAST never measured steady ({why})")
            # Right after a complete run this probe rebuilds the state as well, which the compiles
            # it corrects for do not pay for (TPC-H SF 1 q09, session 34: a 15 s probe where COMPLETE
            # took 4.4 s and steady FAST 6.3-6.7 s): judged then on the whole run.
            probe_ms = fast_ms if after_complete else counted_ms
            first_only = (
                model.fast is not None and model.fast.runs == 0 and known is not None and known.runs > 0
            )
            if first_only and probe_ms <= PROBE_FACTOR * complete_ms:
                return probed(FAST, "FAST measured only by its first run")
            if model.fast is not None and model.fast.idle >= REPROBE_AFTER_RUNS:
                return probed(FAST, f"FAST last ran {model.fast.idle} runs ago")
            # FAST's one run rebuilt instead and COMPLETE has run since (every run is then right after
            # a complete one, where the probe above waits): aged by REBUILD's figure, which it set.
            # Judged with the rebuild spread, as the re-probe above: once in that many runs, where the
            # whole run (a rebuild instead) would rarely pass.
            idle = model.rebuild.idle if model.rebuild is not None else 0
            if model.fast is None and idle >= REPROBE_AFTER_RUNS:
                return probed(FAST, f"FAST last ran {idle} runs ago, never steady")
        return planned(COMPLETE, f"complete: cost: {_change_text(size)}; {versus}")
    # A COMPLETE probe costs FAST's helper state as well: the FAST run after it rebuilds that (TPC-H
    # Q05: a 2.8 s probe, then a 4.5 s FAST run, where steady FAST took 1.6-1.7 s), but only where
    # the probe was wrong and FAST comes back: a one-off cost, weighted as FAST's own rebuild above
    # (over REBUILD_PAYBACK_RUNS). A wrong probe then costs at most ~3 FAST runs more, once (and once
    # per REPROBE_AFTER_RUNS). Counted whole, it kept FORCE off COMPLETE where recomputing was cheaper
    # (TPC-H SF 1 q17, session 36: COMPLETE est. 5.2 s + a 7.5 s rebuild against FAST's 4.9 s, where
    # recomputes took 4.0-4.5 s and FAST 5.1-6.3 s; q08 likewise).
    induced_ms = (model.estimate_ms(REBUILD, size, shape) or 0.0) / REBUILD_PAYBACK_RUNS
    if model.fast is not None and complete_ms + induced_ms <= PROBE_FACTOR * counted_ms:
        # At its prior too (a build dearer than the prior teaches nothing: costs.py): the prior, at
        # FAST's pace, overestimated recomputes of 1M rows 1.6-2.3x (``bench.fast_vs_complete``,
        # session 35: ~1.2 s where they took 0.52-0.72 s, FAST 0.9-1.4 s, kept for good).
        if known is None:
            return probed(COMPLETE, "never measured by a recompute")
        if known.runs == 0:
            return probed(COMPLETE, "known only from the first build")
        if known.idle >= REPROBE_AFTER_RUNS:
            return probed(COMPLETE, f"COMPLETE last ran {known.idle} runs ago")
    return planned(FAST, f"fast: cost: {_change_text(size)}; {versus}")


def fast_unchecked(planning: Planning) -> Planning:
    """``planning`` (a recompute by cost or bulk, planned as if FAST could run) saying that whether
    FAST could run was not checked: its estimate stays, as the choice's reason."""
    candidates = tuple(
        replace(c, note=FAST_UNCHECKED) if c.technique == FAST else c for c in planning.candidates
    )
    return replace(planning, candidates=candidates)


def _change_text(size: ChangeSize | None) -> str:
    """The change as "2.1 M change rows ≈ 64 % of the base"."""
    assert size is not None and size.change_rows is not None
    share = size.change_share
    of_base = f" ≈ {_percent(share)} of the base" if share is not None else ""
    return f"{_count(size.change_rows)} change rows{of_base}"


def _count(rows: int) -> str:
    for unit, scale in (("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if rows >= scale:
            return f"{rows / scale:.1f} {unit}"
    return str(rows)


def _percent(share: float) -> str:
    percent = share * 100
    return f"{percent:.0f} %" if percent >= 10 else f"{percent:.2g} %"


def _duration(ms: float) -> str:
    return f"{ms / 1000:.0f} s" if ms >= 10_000 else f"{ms / 1000:.1f} s"
