"""The versions a run of an MV over MVs reads: a consistent cut.

An MV reading MVs (and maybe base tables beside them) must read inputs that reflect the same
versions of the base tables: a fan-in ``c`` over ``a`` and ``b``, both over ``sales``, may not join
``a`` at sales@41 with ``b`` at sales@42. Each MV commit records, beside its watermark, the base
versions it reflects (``MvWatermark.reflects``); the cut takes, per base table, the oldest version
any input reflects, pins each base read directly at it, and each upstream MV at its newest version
reflecting exactly those versions (walking back its commits; the versions between two MV commits
hold the same content). When an upstream has no such version (it refreshed past it in one step), or
the cut would go back behind what the MV already reflects, the run waits for the upstreams to meet
and says so. A chain (one upstream, no base beside it) never walks back: its cut is the upstream's
latest. Pure: the commits are read through ``reflected``.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass

from workers.status import WAITING

# An upstream MV at a version → its newest ``mvs`` commit at or before it (None: none).
Reflected = Callable[[str, int], "Reflection | None"]


@dataclass(frozen=True)
class Reflection:
    delta_version: int  # of the MV commit
    reflects: Mapping[str, int]  # base table -> version


@dataclass(frozen=True)
class Cut:
    pinned: dict[str, int]  # every input -> the version the run reads
    reflects: dict[str, int]  # base table -> the version the result reflects


def cut_text(target: Mapping[str, int]) -> str:
    """``sales@v42, stock@v7``: base versions as run messages and status show them."""
    return ", ".join(f"{base}@v{version}" for base, version in sorted(target.items()))


def consistent_cut(
    latest: Mapping[str, int],
    upstream: Collection[str],
    floor: Mapping[str, int],
    reflected: Reflected,
) -> Cut | str:
    """The cut for inputs at ``latest`` (the MVs among them: ``upstream``), never below ``floor``
    (what the MV reflects now), or why the run must wait (a message starting with ``WAITING``)."""
    found: dict[str, Reflection] = {}
    for mv in upstream:
        reflection = reflected(mv, latest[mv])
        if reflection is None:
            return f"{WAITING}{mv}'s first refresh"
        found[mv] = reflection
    direct = {table: version for table, version in latest.items() if table not in found}
    target = dict(direct)
    for reflection in found.values():
        for base, version in reflection.reflects.items():
            target[base] = min(target.get(base, version), version)
    pinned = {table: target[table] for table in direct}
    for mv, reflection in found.items():
        pin = latest[mv]
        while any(version != target[base] for base, version in reflection.reflects.items()):
            older = reflected(mv, reflection.delta_version - 1) if reflection.delta_version > 0 else None
            if older is None or any(v < target[b] for b, v in older.reflects.items()):
                shown = "; ".join(f"{m} reflects {cut_text(r.reflects)}" for m, r in sorted(found.items()))
                return f"{WAITING}a consistent cut at {cut_text(target)} ({shown})"
            pin, reflection = reflection.delta_version - 1, older
        pinned[mv] = pin
    behind = sorted(t for t, v in pinned.items() if v < floor.get(t, -1))
    if behind:
        return f"{WAITING}a consistent cut at {cut_text(target)} not behind the MV's ({', '.join(behind)})"
    return Cut(pinned, target)
