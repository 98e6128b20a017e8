"""The executor's queue of submitted jobs: one per key, most urgent first, FIFO within a priority.

A ``DueQueue`` ordered by priority instead of by time: the same keyed heap with lazy deletion,
whose tie-break on insertion order gives FIFO within a priority. Not thread-safe: the executor
calls it with its lock held.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, replace

from workers.sched.due import DueQueue
from workers.sched.executor_types import CancelToken, RunOutcome


@dataclass
class Job:
    """One submitted run of ``key``: the body, its priority (lower runs first) and its callbacks."""

    key: str
    fn: Callable[[CancelToken], object]
    priority: int
    timeout_s: float | None
    on_done: Callable[[RunOutcome], None] | None
    on_cancel: Callable[[], None] | None
    start_by: float | None = None  # when its task is due again (executor clock); None: no such time


class RunQueue:
    """Jobs waiting for a slot, at most one per key."""

    def __init__(self) -> None:
        self._jobs: dict[str, Job] = {}
        self._order: DueQueue[str] = DueQueue()  # "due" is the priority

    def __contains__(self, key: object) -> bool:
        return key in self._jobs

    def __len__(self) -> int:
        return len(self._jobs)

    def push(self, job: Job) -> None:
        """Queue ``job`` behind every queued job of its priority; its key must not be queued."""
        if job.key in self._jobs:
            raise ValueError(f"{job.key!r} is already queued")
        self._jobs[job.key] = job
        self._order.schedule(job.key, job.priority)

    def coalesce(self, job: Job) -> None:
        """Fold ``job`` into the queued job of its key: the latest body and callbacks win, the
        queued place is kept unless ``job`` is more urgent."""
        queued = self._jobs[job.key]
        self._jobs[job.key] = replace(job, priority=queued.priority)
        self.promote(job.key, job.priority)

    def promote(self, key: str, priority: int) -> bool:
        """Move ``key`` up to ``priority`` (behind the jobs already there) if that is more urgent.

        False when ``key`` is not queued.
        """
        job = self._jobs.get(key)
        if job is None:
            return False
        if priority < job.priority:
            job.priority = priority
            self._order.schedule(key, priority)
        return True

    def remove(self, key: str) -> Job | None:
        self._order.remove(key)
        return self._jobs.pop(key, None)

    def pop_next(self) -> Job | None:
        """The most urgent job, taken off the queue; None when empty."""
        keys = self._order.pop_due(math.inf, limit=1)
        return self._jobs.pop(keys[0]) if keys else None

    def drain(self) -> list[Job]:
        """Every queued job, in submit order; the queue is empty afterwards."""
        jobs = list(self._jobs.values())
        self._jobs.clear()
        self._order.clear()
        return jobs
