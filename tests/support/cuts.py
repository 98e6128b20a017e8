"""Consistent cuts, checked from the Delta logs alone: every commit of an MV reading several MVs of
one base read them at versions reflecting one and the same version of that base (issue 29). Used by
the fleet test and ``bench.pipeline``."""

from __future__ import annotations

from collections.abc import Sequence

from workers.config import Settings
from workers.jobs import read_watermark
from workers.jobs.delta import log as deltalog


def inconsistent_cuts(
    settings: Settings, mv: str, upstreams: Sequence[str], base: str
) -> tuple[int, list[str]]:
    """Every refresh commit of ``mv``: the version of ``base`` that each of ``upstreams`` reflects at
    the version ``mv`` read, and ``mv``'s own ``reflects``, are one. The number of commits checked, and
    what each inconsistent one read."""
    checked, wrong = 0, []
    for commit in deltalog.iter_commits(None, settings, mv):
        mark = read_watermark(None, settings, mv, at=commit.version)
        if mark is None or mark.delta_version != commit.version:
            continue  # not a refresh commit (e.g. the change data feed turned on)
        seen = {}
        for upstream in upstreams:
            side = read_watermark(None, settings, upstream, at=mark.watermark[upstream])
            seen[upstream] = side.reflects.get(base) if side is not None else None
        checked += 1
        if len(set(seen.values())) != 1 or next(iter(seen.values())) != mark.reflects.get(base):
            wrong.append(f"{mv} v{commit.version}: reflects {mark.reflects}, read {seen}")
    return checked, wrong
