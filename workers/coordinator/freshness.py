"""Freshness goals: an MV whose data falls further behind its base tables than its goal is STALE.

The goal is the MV's ``FRESHNESS`` (``MvSpec.freshness_ms``), else its ``TARGET LAG``; an MV with
neither has none. How far behind an MV is, is measured on the base tables, not on its runs: the age
of the oldest base-table commit its data does not reflect (its checkpoint, which the coordinator
folds in from heartbeats, against each base's Delta log), 0 when it reflects every commit. So an MV
over tables that do not change never goes stale, whatever its trigger, and one whose refreshes stop
— paused, failing, its worker gone — goes stale as soon as a base commit it misses is older than the
goal. An MV never refreshed is behind since its creation.

The coordinator decides (``FreshnessWatch.check``, pure, driven by its clock): it alone sees every
task's checkpoint, also when the owner is silent, which is when users most need telling. It
publishes a ``FreshnessEvent`` on the freshness topic when a task turns STALE and when it is
RECOVERED, and exports per-task gauges. After a failover the new coordinator announces the MVs
stale at that moment again (a repeated STALE); one that recovered in between gets no RECOVERED.
Nothing is decided for an MV while a base's log cannot be read (the table is gone, or the warehouse
is not local: ``workers.warehouse`` reads local Delta logs only so far).
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Protocol

from workers.catalog.specs import TARGET_LAG
from workers.records import Record
from workers.sched.gauges import FreshnessGauges

log = logging.getLogger(__name__)
STALE, RECOVERED = "STALE", "RECOVERED"
CHECK_EVERY_S = 1.0  # the coordinator looks at the bases' logs this often


class BaseCommits(Protocol):
    """What the watch reads of the base tables' Delta logs."""

    def latest_version(self, table: str) -> int | None:
        """Newest committed version; None when unknown (no table, a remote warehouse)."""
        ...

    def commit_ms(self, table: str, version: int) -> int | None:
        """When ``version`` was committed (epoch ms); None when unknown."""
        ...


@dataclass(frozen=True)
class Goal:
    ms: int
    source: str  # FRESHNESS | TARGET_LAG


def freshness_goal(task: Mapping[str, object]) -> Goal | None:
    """The MV's freshness goal: its FRESHNESS, else its TARGET LAG; None for MV logs and other MVs."""
    mv = task.get("mv")
    if task.get("kind") != "MV" or not isinstance(mv, Mapping):
        return None
    if mv.get("freshness_ms"):
        return Goal(int(mv["freshness_ms"]), "FRESHNESS")
    trigger = mv.get("trigger") or {}
    if trigger.get("kind") == TARGET_LAG and trigger.get("interval_ms"):
        return Goal(int(trigger["interval_ms"]), TARGET_LAG)
    return None


def bases_known(task: Mapping[str, object], commits: BaseCommits) -> bool:
    """Whether every base table's latest version is known (it exists, its log is readable here)."""
    mv = task["mv"]
    assert isinstance(mv, Mapping)
    return all(commits.latest_version(base) is not None for base in mv["base_tables"])


def behind_since(task: Mapping[str, object], commits: BaseCommits) -> int | None:
    """Epoch ms of the oldest base-table commit the MV's data does not reflect; None when it reflects
    every commit (bases whose version is unknown are left out: see ``bases_known``)."""
    mv = task["mv"]
    assert isinstance(mv, Mapping)
    checkpoint = task.get("checkpoint") or {}
    assert isinstance(checkpoint, Mapping)
    oldest: int | None = None
    for base in mv["base_tables"]:
        latest = commits.latest_version(base)
        seen = checkpoint.get(base)
        if latest is None or (seen is not None and latest <= seen):
            continue
        since = task["created_at"] if seen is None else commits.commit_ms(base, seen + 1)
        if isinstance(since, int) and (oldest is None or since < oldest):
            oldest = since
    return oldest


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
            if not bases_known(task, commits):  # a base gone, a remote warehouse: nothing to decide
                if task_id in self._gauges:
                    gauges[task_id] = self._gauges[task_id]
                continue
            since = behind_since(task, commits)
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


class WarehouseCommits:
    """``BaseCommits`` of a local warehouse, read from ``_delta_log`` (milliseconds, no Spark); a
    commit's time never changes, so it is read once."""

    def __init__(
        self, latest_version: Callable[[str], int | None], read_commit: Callable[[str, int], list[Record]]
    ) -> None:
        self._latest = latest_version
        self._read = read_commit
        self._times: dict[tuple[str, int], int | None] = {}

    def latest_version(self, table: str) -> int | None:
        try:
            return self._latest(table)
        except (NotImplementedError, OSError, ValueError):
            return None  # a remote warehouse, or a name no folder can have: nothing to say

    def commit_ms(self, table: str, version: int) -> int | None:
        key = (table, version)
        if key not in self._times:
            if len(self._times) > 10_000:
                self._times.clear()
            try:
                actions = self._read(table, version)
            except (NotImplementedError, OSError, ValueError):
                return None  # not there any more (log cleanup): decided without it
            info: Record = next((a["commitInfo"] for a in actions if "commitInfo" in a), {})
            stamp = info.get("timestamp")
            self._times[key] = stamp if isinstance(stamp, int) else None
        return self._times[key]
