"""The value types of ``BoundedExecutor``: priorities, submit status, cancel token, outcome, metrics.

Kept apart from the executor's machinery so callers (the maintainer, tests) can import the
vocabulary without the threads; ``executor`` re-exports all of them.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from enum import Enum, IntEnum


class Priority(IntEnum):
    """Lower runs first; FIFO within one priority (seed 003's priority queue, inverted)."""

    URGENT = 0  # REFRESH_NOW from the user
    CHANGE = 10  # ON_CHANGE / TARGET_LAG: base tables moved
    PERIODIC = 20  # EVERY
    PURGE = 30  # MV-log purge: never in the way of a refresh


class SubmitStatus(Enum):
    ACCEPTED = "accepted"  # queued (or started) as a new run
    COALESCED = "coalesced"  # folded into the queued run, or one more run after the current one
    REJECTED = "rejected"  # no room in time, or shut down


class CancelToken:
    """Set when the run should stop (cancel, timeout, shutdown); the body polls or waits on it."""

    def __init__(self) -> None:
        self._event = threading.Event()

    def is_set(self) -> bool:
        return self._event.is_set()

    def wait(self, timeout: float | None) -> bool:
        """Block up to ``timeout`` seconds (real time); True once cancellation was requested."""
        return self._event.wait(timeout)

    def set(self) -> None:
        self._event.set()

    def __bool__(self) -> bool:
        return self.is_set()


@dataclass(frozen=True)
class RunOutcome:
    """What became of one run; delivered exactly once per accepted run to ``on_done``.

    ``canceled`` means cancellation was requested before the run ended (the body may still have
    returned a result). ``timed_out`` outcomes are delivered at the deadline, before the body
    returns; whatever it returns later is dropped. Times are on the executor's clock.
    """

    key: str
    result: object | None
    error: BaseException | None
    timed_out: bool
    canceled: bool
    started: float
    ended: float

    @property
    def ok(self) -> bool:
        return self.error is None and not self.timed_out and not self.canceled

    @property
    def duration(self) -> float:
        return self.ended - self.started


@dataclass(frozen=True)
class ExecutorMetrics:
    """A consistent snapshot. Counters only grow; ``running``/``waiting``/``zombies`` are levels.

    ``submitted == completed + failed + canceled + timeout + running + waiting`` at any snapshot.
    """

    submitted: int
    running: int
    waiting: int
    completed: int
    failed: int
    timeout: int
    rejected: int  # submits turned away (queue full, shut down); queued runs not started by start_by
    canceled: int
    coalesced: int = 0
    zombies: int = 0  # timed-out bodies that have not returned yet (hold no slot)
    max_concurrency: int = 0
    queue_size: int = 0


# The fields of ``ExecutorMetrics`` that count runs (they only grow) and those that are levels.
EXECUTOR_COUNTERS = ("submitted", "completed", "failed", "timeout", "rejected", "canceled", "coalesced")
EXECUTOR_LEVELS = ("running", "waiting", "zombies", "max_concurrency", "queue_size")
