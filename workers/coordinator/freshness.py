"""Freshness goals: an MV whose data falls further behind its base tables than its goal is STALE.

The goal and how far behind an MV is are defined once, in ``workers.freshness``: the goal is the MV's
``FRESHNESS``, else its ``TARGET LAG`` (an MV with neither has none); the lag is the age of the oldest
base commit its data does not reflect (its checkpoint, which the coordinator folds in from
heartbeats, against each base's Delta log).

The coordinator decides (``FreshnessWatch.check``, pure, driven by its clock): it alone sees every
task's checkpoint, also when the owner is silent, which is when users most need telling. It
publishes a ``FreshnessEvent`` on the freshness topic when a task turns STALE and when it is
RECOVERED, and exports per-task gauges. After a failover the new coordinator announces the MVs
stale at that moment again (a repeated STALE); one that recovered in between gets no RECOVERED.
Nothing is decided for an MV while a base's latest version, or the time of the commit it misses,
cannot be read (the table is gone, the log was cleaned up, the storage is unreachable).
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Iterable, Mapping

from workers.freshness import BaseCommits, Goal, bases_known, behind_since, freshness_goal, missed_versions
from workers.records import Record
from workers.sched.gauges import FreshnessGauges

log = logging.getLogger(__name__)
STALE, RECOVERED = "STALE", "RECOVERED"
CHECK_EVERY_S = 1.0  # the coordinator looks at the bases' logs this often


def freshness_event(
    task: Mapping[str, object],
    goal: Goal,
    state: str,
    lag_ms: int,
    since: int | None,
    now_ms: int,
    epoch: int,
) -> Record:
    """The FreshnessEvent record (topic freshness, key = task id)."""
    return {
        "event_id": uuid.uuid4().hex,
        "task_id": task["task_id"],
        "name": task["name"],
        "state": state,
        "goal_ms": goal.ms,
        "goal_source": goal.source,
        "lag_ms": lag_ms,
        "behind_since": since,
        "checkpoint": dict(task.get("checkpoint") or {}),  # type: ignore[call-overload]
        "coordinator_epoch": epoch,
        "at": now_ms,
    }


class FreshnessWatch:
    """Each MV's last announced freshness; ``check`` returns the events of the changes."""

    def __init__(self) -> None:
        self._stale: dict[str, bool] = {}  # task id → stale as last decided
        self._gauges: dict[str, FreshnessGauges] = {}

    def reset(self) -> None:
        """Forget everything (the coordinator stands by: another one decides now)."""
        self._stale.clear()
        self._gauges = {}

    def check(
        self, tasks: Mapping[str, Record], commits: BaseCommits, now_ms: int, epoch: int
    ) -> list[Record]:
        """Decide every MV with a goal at ``now_ms``. An MV seen for the first time is announced
        only when stale; afterwards every change is (STALE, then RECOVERED)."""
        commits = _OncePerCheck(commits)
        events: list[Record] = []
        gauges: dict[str, FreshnessGauges] = {}
        for task_id, task in tasks.items():
            goal = freshness_goal(task)
            if goal is None:
                continue
            missed = missed_versions(task, commits) if bases_known(task, commits) else None
            since = behind_since(task, missed, commits) if missed else None
            if missed is None or (missed and since is None):  # a base or a commit time unknown
                if task_id in self._gauges:
                    gauges[task_id] = self._gauges[task_id]
                continue
            lag_ms = 0 if since is None else max(0, now_ms - since)
            stale = lag_ms > goal.ms
            before = self._stale.get(task_id)
            if stale != bool(before):  # first seen: announced only when stale
                state = STALE if stale else RECOVERED
                events.append(freshness_event(task, goal, state, lag_ms, since, now_ms, epoch))
                log.log(
                    logging.WARNING if stale else logging.INFO,
                    "%s %s: %d ms behind, goal %d",
                    task_id,
                    state,
                    lag_ms,
                    goal.ms,
                )
            self._stale[task_id] = stale
            gauges[task_id] = FreshnessGauges(task_id, lag_ms / 1000, goal.ms / 1000, stale)
        for gone in set(self._stale) - set(gauges):
            del self._stale[gone]  # dropped, or its goal removed
        self._gauges = gauges
        return events

    def gauges(self) -> Iterable[FreshnessGauges]:
        """The gauges of the last check (read at scrape time, from another thread)."""
        return list(self._gauges.values())


class _OncePerCheck:
    """A base's latest version looked up once per check, however many MVs read it."""

    def __init__(self, commits: BaseCommits) -> None:
        self._commits = commits
        self._latest: dict[str, int | None] = {}

    def latest_version(self, table: str) -> int | None:
        if table not in self._latest:
            self._latest[table] = self._commits.latest_version(table)
        return self._latest[table]

    def commit_ms(self, table: str, version: int) -> int | None:
        return self._commits.commit_ms(table, version)
