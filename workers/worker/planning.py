"""FORCE's choice by cost, and the planning information every refresh run records. Pure.

Each technique costs a fixed part plus a part per row it handles: FAST the change rows of its range,
COMPLETE the rows it reads and writes (the bases' and the MV's). The figures start from rough priors
and are learnt per MV from its runs' outcomes
(``CostModel.learned``: an exponentially weighted average, of the fixed part from runs where it
dominates, of the per-row part from the others). ``plan_run`` takes every input as a value (the
sizes from the Delta logs: ``workers.jobs.delta.sizes``), so it is tested without Spark.

FORCE takes the cheaper estimate; a bulk change (at least ``BULK_SHARE`` of the bases' rows) is
recomputed whatever the estimates say. FAST and COMPLETE keep their meaning: the planning
information then says what the other would have cost.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace

from workers.jobs.delta.sizes import ChangeSize, TableSize
from workers.records import Record

FAST, COMPLETE = "FAST", "COMPLETE"
# A change of at least this share of the bases' rows is a bulk load: recomputing wins.
BULK_SHARE = 0.5
# Weight of the newest outcome in a learnt cost.
LEARNING_WEIGHT = 0.3
# Priors, rough and not yet calibrated (each MV's own runs correct them): a FAST run's fixed cost is
# its Spark jobs and Delta commits, then per change row it reads, matches and merges; a complete run
# reads every base row and writes every MV row.
FAST_FIXED_MS, FAST_MS_PER_ROW = 1200.0, 0.02
COMPLETE_FIXED_MS, COMPLETE_MS_PER_ROW = 1000.0, 0.002


@dataclass(frozen=True)
class TechniqueCost:
    fixed_ms: float
    ms_per_row: float

    def estimate_ms(self, rows: int) -> float:
        return self.fixed_ms + self.ms_per_row * rows

    def learned(self, rows: int, took_ms: float) -> TechniqueCost:
        """This cost after a run of ``rows`` that took ``took_ms``: the part that dominated the
        estimate moves towards what the outcome says of it."""
        by_rows = self.ms_per_row * rows
        if by_rows < self.fixed_ms:
            fixed = max(took_ms - by_rows, 0.0)
            return replace(self, fixed_ms=_weighted(self.fixed_ms, fixed))
        per_row = max(took_ms - self.fixed_ms, 0.0) / rows
        return replace(self, ms_per_row=_weighted(self.ms_per_row, per_row))


def _weighted(old: float, new: float) -> float:
    return (1 - LEARNING_WEIGHT) * old + LEARNING_WEIGHT * new


@dataclass(frozen=True)
class CostModel:
    """One MV's costs per technique (priors until its runs teach it)."""

    fast: TechniqueCost = field(default_factory=lambda: TechniqueCost(FAST_FIXED_MS, FAST_MS_PER_ROW))
    complete: TechniqueCost = field(
        default_factory=lambda: TechniqueCost(COMPLETE_FIXED_MS, COMPLETE_MS_PER_ROW)
    )

    def record(self) -> dict[str, tuple[float, float]]:
        """Technique → (fixed ms, ms per row): what an MV commit keeps for the MV's next owner."""
        return {
            FAST: (self.fast.fixed_ms, self.fast.ms_per_row),
            COMPLETE: (self.complete.fixed_ms, self.complete.ms_per_row),
        }

    def restored(self, costs: Mapping[str, tuple[float, float]]) -> CostModel:
        """This model with the techniques ``costs`` (``record``'s form, from an MV commit) names."""
        fast, complete = costs.get(FAST), costs.get(COMPLETE)
        return replace(
            self,
            fast=self.fast if fast is None else TechniqueCost(*fast),
            complete=self.complete if complete is None else TechniqueCost(*complete),
        )

    def estimate_ms(self, technique: str, size: ChangeSize | None) -> float | None:
        rows = rows_handled(technique, size)
        if rows is None:
            return None
        return (self.fast if technique == FAST else self.complete).estimate_ms(rows)

    def learned(self, technique: str, size: ChangeSize | None, took_ms: float) -> CostModel:
        """The model after a run of ``technique`` over ``size`` that took ``took_ms``; unchanged
        when the run's rows are unknown."""
        rows = rows_handled(technique, size)
        if rows is None:
            return self
        if technique == FAST:
            return replace(self, fast=self.fast.learned(rows, took_ms))
        return replace(self, complete=self.complete.learned(rows, took_ms))


def rows_handled(technique: str, size: ChangeSize | None) -> int | None:
    """The rows a technique's cost grows with: FAST the change rows, COMPLETE the bases' rows read
    and the MV's written (its rows before: the result's size is not known ahead)."""
    if size is None:
        return None
    if technique == FAST:
        return size.change_rows
    if size.base.rows is None:
        return None
    mv_rows = size.mv.rows if size.mv is not None and size.mv.rows is not None else 0
    return size.base.rows + mv_rows


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


def plan_run(mode: str, fast_blocker: str | None, size: ChangeSize | None, model: CostModel) -> Planning:
    """The technique of a run in refresh ``mode`` (COMPLETE | FAST | FORCE). ``fast_blocker``: why
    FAST cannot run now ("complete: first build", …), None when it can. FAST stays strict: it
    recomputes only where it cannot be exact."""
    fast_ms, complete_ms = model.estimate_ms(FAST, size), model.estimate_ms(COMPLETE, size)
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
    if fast_ms is None or complete_ms is None:
        return planned(FAST, "fast: cost: sizes unknown, FAST while it can")
    versus = f"FAST est. {_duration(fast_ms)} vs COMPLETE est. {_duration(complete_ms)}"
    if complete_ms < fast_ms:
        return planned(COMPLETE, f"complete: cost: {_change_text(size)}; {versus}")
    return planned(FAST, f"fast: cost: {_change_text(size)}; {versus}")


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
