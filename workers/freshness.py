"""How far behind its base tables an MV is, and the freshness goal it is held to. Pure but for
``WarehouseCommits``, which reads the bases' Delta logs.

One definition for the coordinator (which announces STALE / RECOVERED: ``workers.coordinator.freshness``)
and the status page (which colours each MV: ``workers.api.freshness``).

**Behind since** is measured on the base tables, not on the MV's runs: the commit time of the oldest
base version its data does not reflect (its checkpoint against each base's Delta log), never before
the MV was created; a base the MV has never read counts from its creation. So an MV over tables that
do not change is never behind, whatever its trigger, and one whose refreshes stop — paused, failing,
its worker gone — falls behind with the first base commit it misses.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from workers.catalog.specs import TARGET_LAG
from workers.records import Record

FRESHNESS = "FRESHNESS"


class BaseCommits(Protocol):
    """What freshness reads of the base tables' Delta logs."""

    def latest_version(self, table: str) -> int | None:
        """Newest committed version; None when unknown (no table, an unreadable log)."""
        ...

    def commit_ms(self, table: str, version: int) -> int | None:
        """When ``version`` was committed (epoch ms); None when unknown (cleaned up, no timestamp)."""
        ...


@dataclass(frozen=True)
class Goal:
    ms: int
    source: str  # FRESHNESS | TARGET_LAG


def freshness_goal(task: Mapping[str, Any]) -> Goal | None:
    """The MV's declared freshness goal: its FRESHNESS, else its TARGET LAG; None for MV logs and
    MVs with neither."""
    mv = task.get("mv")
    if task.get("kind") != "MV" or not isinstance(mv, Mapping):
        return None
    if mv.get("freshness_ms"):
        return Goal(int(mv["freshness_ms"]), FRESHNESS)
    trigger = mv.get("trigger") or {}
    if trigger.get("kind") == TARGET_LAG and trigger.get("interval_ms"):
        return Goal(int(trigger["interval_ms"]), TARGET_LAG)
    return None


def missed_versions(task: Mapping[str, Any], commits: BaseCommits) -> dict[str, int]:
    """Per base the MV is behind on, the first version its data does not reflect. Bases whose latest
    version is unknown are left out (see ``bases_known``)."""
    checkpoint: Mapping[str, int] = task.get("checkpoint") or {}
    missed: dict[str, int] = {}
    for base in task["mv"]["base_tables"]:
        latest = commits.latest_version(base)
        first_missing = checkpoint.get(base, -1) + 1
        if latest is not None and latest >= first_missing:
            missed[base] = first_missing
    return missed


def bases_known(task: Mapping[str, Any], commits: BaseCommits) -> bool:
    """Whether every base table's latest version is known (it exists, its log is readable here)."""
    return all(commits.latest_version(base) is not None for base in task["mv"]["base_tables"])


def behind_since(task: Mapping[str, Any], missed: Mapping[str, int], commits: BaseCommits) -> int | None:
    """Epoch ms since which the MV has been behind (module docstring), given ``missed_versions``;
    None when it misses nothing, or when no missed commit's time can be read."""
    checkpoint: Mapping[str, int] = task.get("checkpoint") or {}
    times = [
        task["created_at"] if base not in checkpoint else commits.commit_ms(base, version)
        for base, version in missed.items()
    ]
    known = [at for at in times if isinstance(at, int)]
    return max(min(known), task["created_at"]) if known else None


class WarehouseCommits:
    """``BaseCommits`` read from the warehouse's Delta logs (milliseconds, no Spark). A commit's time
    never changes, so each is read once."""

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
            return None  # unreachable storage, or a name no table can have: nothing to say

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
