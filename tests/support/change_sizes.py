"""Change sizes for FORCE's pure tests: what the Delta logs would say of a run."""

from __future__ import annotations

from workers.jobs.delta.sizes import ChangeSize, TableSize


def size(change: int | None, base: int | None, mv: int | None = 0) -> ChangeSize:
    """``change`` rows over bases of ``base`` rows, the MV of ``mv`` rows (None: not built yet)."""
    return ChangeSize(change, None, TableSize(base, 1, 1), None if mv is None else TableSize(mv, 1, 1))
