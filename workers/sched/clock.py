"""Time sources: one protocol, the real clock, and a manual clock for tests.

Scheduling uses ``monotonic()`` (immune to wall-clock jumps); records carry ``wall_ms()``
(epoch milliseconds, the unit of every time field in the Avro records).
"""

from __future__ import annotations

import threading
import time
from typing import Protocol, runtime_checkable


@runtime_checkable
class Clock(Protocol):
    def monotonic(self) -> float:
        """Seconds from an arbitrary origin, never going backwards; for scheduling."""
        ...

    def wall_ms(self) -> int:
        """Epoch milliseconds; for records only, never for deadlines."""
        ...


class SystemClock:
    """The process clock."""

    def monotonic(self) -> float:
        return time.monotonic()

    def wall_ms(self) -> int:
        return time.time_ns() // 1_000_000

    def __repr__(self) -> str:
        return "SystemClock()"


class ManualClock:
    """A clock that moves only when told to; both readings advance together.

    Thread-safe, so a test can advance it while worker threads read it.
    """

    def __init__(self, start: float = 1000.0, wall_start_ms: int = 1_700_000_000_000) -> None:
        self._lock = threading.Lock()
        self._start = float(start)
        self._now = float(start)
        self._wall_start_ms = int(wall_start_ms)

    def monotonic(self) -> float:
        with self._lock:
            return self._now

    def wall_ms(self) -> int:
        with self._lock:
            # From the total elapsed time (rounded to the microsecond), so many small advances add up.
            return self._wall_start_ms + round((self._now - self._start) * 1e6) // 1000

    def advance(self, seconds: float) -> float:
        """Move both readings forward; returns the new monotonic time."""
        if seconds < 0:
            raise ValueError("a monotonic clock cannot go backwards")
        with self._lock:
            self._now += seconds
            return self._now

    def __repr__(self) -> str:
        return f"ManualClock(monotonic={self.monotonic()!r}, wall_ms={self.wall_ms()!r})"
