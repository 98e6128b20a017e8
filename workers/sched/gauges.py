"""``TaskGauges``: one task's numbers for the metrics endpoint, read at scrape time.

Apart from ``metrics`` so that the maintainer, which produces them, need not import
prometheus_client.
"""

from __future__ import annotations

from typing import NamedTuple


class TaskGauges(NamedTuple):
    """One task's per-task gauges at scrape time; None leaves a series out."""

    task_id: str
    lag_s: float | None  # age of the data an MV reflects (None: not an MV, or never refreshed here)
    next_run_in_s: float | None  # None: nothing scheduled (ON DEMAND, paused, failed, running)


class FreshnessGauges(NamedTuple):
    """One MV's freshness against its goal (FRESHNESS or TARGET LAG), as the coordinator last decided."""

    task_id: str
    lag_s: float  # age of the oldest base-table commit the MV does not reflect (0: current)
    goal_s: float
    stale: bool
