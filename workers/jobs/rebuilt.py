"""What a FAST run spent rebuilding helper state from the bases: the value the run measures
(``workers.jobs.fast.apply.Scope.rebuilding``), returns (``RefreshResult.rebuilt``) and the worker's
cost model learns from (``workers.worker.costs``)."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["NO_REBUILD", "Rebuilt"]


@dataclass(frozen=True)
class Rebuilt:
    """How long a run rebuilt helper state, or caught key counts up in a range of their own (0:
    neither): what it paid beyond a steady run. And whether that rebuild replaced the change the run
    would have applied (a top-N's rows table recomputed: the rest of the run says nothing of a steady
    one)."""

    ms: float = 0.0
    instead: bool = False

    def plus(self, ms: float, *, instead: bool = False) -> Rebuilt:
        """This measure with ``ms`` more of rebuilding (``instead``: that rebuild replaced the change)."""
        return Rebuilt(self.ms + ms, self.instead or instead)


NO_REBUILD = Rebuilt()
