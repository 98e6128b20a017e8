"""When things are due: a keyed min-heap, a guard for proposed due times, and a wake-up signal.

These are the three pieces of the TiDB scheduler loop (seed 000 §6.2): wait on timer or
notifier, pop what is due, compute the next wake-up. ``validate_next_due`` closes seed 000
risk 2 (an unchecked zero or stale next time re-triggers a task in a tight loop).
"""

from __future__ import annotations

import heapq
import itertools
import logging
import math
import threading
from collections.abc import Hashable
from typing import Generic, TypeVar

from workers.catalog.specs import MAX_INTERVAL_MS
from workers.sched.triggers import MIN_RUN_SPACING_S

log = logging.getLogger(__name__)

K = TypeVar("K", bound=Hashable)

# Rebuild the heap once stale entries outnumber live ones by this factor (bounds memory under
# frequent reschedules while keeping schedule/remove O(log n) amortised).
_COMPACT_FACTOR = 2
_COMPACT_MIN = 64


class DueQueue(Generic[K]):
    """Keys ordered by due time; each key appears at most once.

    Lazy deletion: moving or removing a key leaves its old heap entry behind, recognised as
    stale by its sequence number. Ties on due time keep insertion order (the sequence number).
    Not thread-safe: the owner (one scheduler loop) serialises access.
    """

    def __init__(self) -> None:
        self._heap: list[tuple[float, int, K]] = []
        self._live: dict[K, tuple[float, int]] = {}
        self._seq = itertools.count()

    def schedule(self, key: K, due: float) -> None:
        """Insert ``key`` or move it to ``due``."""
        if math.isnan(due):
            raise ValueError(f"due time of {key!r} is NaN; use validate_next_due first")
        seq = next(self._seq)
        self._live[key] = (due, seq)
        heapq.heappush(self._heap, (due, seq, key))
        self._maybe_compact()

    def remove(self, key: K) -> None:
        """Forget ``key``; no error if absent."""
        if self._live.pop(key, None) is not None:
            self._maybe_compact()

    def due_at(self, key: K) -> float | None:
        entry = self._live.get(key)
        return None if entry is None else entry[0]

    def pop_due(self, now: float, limit: int | None = None) -> list[K]:
        """Remove and return keys with due <= now, earliest first, at most ``limit`` of them."""
        out: list[K] = []
        while self._heap and (limit is None or len(out) < limit):
            due, seq, key = self._heap[0]
            if self._live.get(key) != (due, seq):
                heapq.heappop(self._heap)  # stale entry
                continue
            if due > now:
                break
            heapq.heappop(self._heap)
            del self._live[key]
            out.append(key)
        return out

    def next_due(self) -> float | None:
        """Earliest due time, or None when empty."""
        while self._heap:
            due, seq, key = self._heap[0]
            if self._live.get(key) == (due, seq):
                return due
            heapq.heappop(self._heap)
        return None

    def keys(self) -> list[K]:
        """Live keys, earliest first (a snapshot; O(n log n))."""
        return [k for k, _ in sorted(self._live.items(), key=lambda kv: kv[1])]

    def clear(self) -> None:
        self._heap.clear()
        self._live.clear()

    def __len__(self) -> int:
        return len(self._live)

    def __contains__(self, key: object) -> bool:
        return key in self._live

    def _maybe_compact(self) -> None:
        if len(self._heap) > _COMPACT_MIN and len(self._heap) > _COMPACT_FACTOR * len(self._live) + 1:
            self._heap = [(due, seq, key) for key, (due, seq) in self._live.items()]
            heapq.heapify(self._heap)


def validate_next_due(
    proposed: float | None,
    now: float,
    *,
    min_delay: float = MIN_RUN_SPACING_S,
    max_delay: float = MAX_INTERVAL_MS / 1000,  # no schedule is longer than the longest interval
) -> tuple[float, str | None]:
    """A safe due time for ``proposed`` and, when it had to be changed, the reason why.

    Anything earlier than ``now + min_delay`` (None, 0, NaN, the past, "right now") becomes
    ``now + min_delay``: a task can then re-trigger at most once per ``min_delay``, never in a
    tight loop. Anything beyond ``now + max_delay`` (including +inf) is pulled in to it, so a
    typo'd timestamp cannot park a task for centuries. Reasons: ``missing``, ``nan``, ``zero``,
    ``past``, ``too_soon``, ``too_far``.

    Callers that legitimately mean "never" (ON_DEMAND) must not pass None here.
    """
    if min_delay < 0 or max_delay < min_delay:
        raise ValueError(f"need 0 <= min_delay <= max_delay, got {min_delay}, {max_delay}")
    earliest = now + min_delay
    reason: str | None
    if proposed is None:
        reason = "missing"
    elif math.isnan(proposed):
        reason = "nan"
    elif proposed == 0:
        reason = "zero"  # the usual "unset" timestamp
    elif proposed <= now:
        reason = "past"
    elif proposed < earliest:
        reason = "too_soon"
    elif proposed > now + max_delay:
        return now + max_delay, "too_far"
    else:
        return proposed, None
    return earliest, reason


class Wakeup:
    """Many producers, one consumer: any number of ``wake()`` calls make one ``wait()`` return.

    Like seed 000's Notifier (a channel of size 1): the wake-up is a level, not a count, and
    ``wait`` consumes it. The consumer must read the shared state *after* ``wait`` returns, so a
    wake that lands between the return and the clear is never lost (its state change is read).
    """

    def __init__(self) -> None:
        self._event = threading.Event()

    def wake(self) -> None:
        self._event.set()

    def wait(self, timeout: float | None = None) -> bool:
        """Block until woken or ``timeout`` seconds pass; True if woken. Consumes the wake-up."""
        if timeout is not None and timeout < 0:
            timeout = 0.0
        woken = self._event.wait(timeout)
        if woken:
            self._event.clear()
        return woken

    def is_set(self) -> bool:
        """A wake-up is pending (not yet consumed)."""
        return self._event.is_set()

    def clear(self) -> None:
        self._event.clear()
