"""How fresh an MV is, for the status page: its lag against the goal its trigger sets. Pure.

**Lag** is how long the MV's content has been behind its bases (``workers.freshness.behind_since``):
0 when it reflects every base's newest Delta version. **Goal** is the lag the MV promises: its
FRESHNESS or TARGET LAG (``workers.freshness.freshness_goal``, the goal the coordinator announces
STALE against); else for EVERY the interval, and for ON_CHANGE the version poll, each plus the time a
refresh takes (the last run's duration, at least ``REFRESH_GRACE_MS``); ON DEMAND promises none.

Status, first match: ``paused`` (PAUSED) · ``error`` (FAILED, or the last run failed) · ``fresh``
(lag ≤ goal) · ``unknown`` (behind, but a base's commit times cannot be read) · ``late`` (lag ≤
``STALE_FACTOR`` × goal, or any lag of an ON DEMAND MV: it waits for its user) · ``stale``.
"""

from __future__ import annotations

from typing_extensions import TypedDict

from workers.catalog.specs import EVERY, ON_CHANGE, effective_trigger
from workers.freshness import freshness_goal
from workers.records import Record
from workers.sched.triggers import ON_CHANGE_POLL_S

FRESH, LATE, STALE, ERROR, PAUSED, UNKNOWN = "fresh", "late", "stale", "error", "paused", "unknown"
# Beyond this many goals behind, an MV is stale rather than late.
STALE_FACTOR = 2
# The least time allowed for a refresh to land after it is due (a skipped last run says nothing).
REFRESH_GRACE_MS = 10_000


class FreshnessJson(TypedDict):
    task_id: str
    name: str
    status: str  # fresh | late | stale | error | paused | unknown
    lag_ms: int | None  # how long the content has been behind its bases (0: current; None: unknown)
    goal_ms: int | None  # the lag the trigger promises (None: ON DEMAND, no promise)
    behind_since_ms: int | None  # when the oldest base commit the MV does not reflect was made
    reason: str  # the status in words, for people


def goal_ms(task: Record) -> int | None:
    """The lag the MV promises (module docstring); None for ON DEMAND without a FRESHNESS goal."""
    declared = freshness_goal(task)
    if declared is not None:
        return declared.ms
    trigger = effective_trigger(task["mv"])
    kind, interval = trigger["kind"], trigger.get("interval_ms")
    run = task.get("last_run") or {}
    took = (run["ended_at"] - run["started_at"]) if run.get("ended_at") else 0
    grace = max(REFRESH_GRACE_MS, took)
    if kind == EVERY and interval:
        return int(interval) + grace
    if kind == ON_CHANGE:
        return int(ON_CHANGE_POLL_S * 1000) + grace
    return None


def _seconds(ms: int) -> str:
    seconds = ms / 1000
    if seconds < 120:
        return f"{seconds:.0f}s"
    if seconds < 7200:
        return f"{seconds / 60:.0f}min"
    return f"{seconds / 3600:.1f}h"


def _status(task: Record, lag_versions: int | None, lag: int | None, goal: int | None) -> tuple[str, str]:
    run = task.get("last_run") or {}
    error = task.get("error")
    if task["state"] == "PAUSED":
        return PAUSED, "paused: no refresh runs until RESUME"
    if task["state"] == "FAILED" or run.get("state") == "ERROR":
        problem = (error or {}).get("message") or run.get("message") or "no message"
        where = "failed" if task["state"] == "FAILED" else "last run failed"
        return ERROR, f"{where}: {problem}"
    if lag_versions == 0:
        return FRESH, "current: reflects the newest version of every base"
    goal_text = "on demand" if goal is None else f"goal {_seconds(goal)}"
    behind = "behind" if lag_versions is None else f"{lag_versions} version(s) behind"
    if lag is None:
        return UNKNOWN, f"{behind}, since an unknown time ({goal_text})"
    words = f"{behind} for {_seconds(lag)} ({goal_text})"
    if goal is not None and lag <= goal:
        return FRESH, words
    if goal is None or lag <= STALE_FACTOR * goal:
        return LATE, words
    return STALE, words


def freshness_json(
    task: Record, lag_versions: int | None, behind_since: int | None, now_ms: int
) -> FreshnessJson:
    """An MV task's freshness at ``now_ms``, from its lag in versions (``workers.status.behind_versions``)
    and when it fell behind (``workers.freshness.behind_since``)."""
    goal = goal_ms(task)
    current = lag_versions == 0
    lag = 0 if current else None if behind_since is None else max(0, now_ms - behind_since)
    status, reason = _status(task, lag_versions, lag, goal)
    return {
        "task_id": task["task_id"],
        "name": task["name"],
        "status": status,
        "lag_ms": lag,
        "goal_ms": goal,
        "behind_since_ms": None if current else behind_since,
        "reason": reason,
    }
