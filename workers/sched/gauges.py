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
