"""The executor's watchdog: a thread that times runs out at their deadlines.

It sleeps until the soonest deadline (at most WATCHDOG_MAX_INTERVAL_S, since an injected clock
may move without it knowing), then calls the executor's ``check_timeouts``.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable

from workers.sched.clock import Clock

log = logging.getLogger(__name__)

WATCHDOG_MAX_INTERVAL_S = 0.5  # also the timeout latency under a clock other than the system one


class Watchdog:
    """Calls ``check()`` at the soonest of ``deadlines()`` (times on ``clock``).

    Shares its owner's lock (``cond``): ``deadlines`` is read and ``wake_if_sooner`` called with
    it held, so a deadline added while the watchdog computes its sleep is never missed.
    """

    def __init__(
        self,
        cond: threading.Condition,
        clock: Clock,
        name: str,
        check: Callable[[], object],
        deadlines: Callable[[], Iterable[float]],
    ) -> None:
        self._cond = cond
        self._clock = clock
        self._check = check
        self._deadlines = deadlines
        self._next_check = float("inf")  # on ``clock``
        self._stop = threading.Event()
        self._wake = threading.Event()
        self._name = name
        self._thread = threading.Thread(target=self._watch, name=f"{name}-watchdog", daemon=True)
        self._thread.start()

    def wake_if_sooner(self, deadline: float) -> None:
        """A run got ``deadline``: wake the thread if it sleeps past it (lock held)."""
        if deadline < self._next_check:
            self._wake.set()

    def stop(self) -> None:
        """Ask the thread to end; ``join`` waits for it."""
        self._stop.set()
        self._wake.set()

    def join(self, timeout_s: float) -> None:
        if self._thread is not threading.current_thread():  # a check's callback may shut down
            self._thread.join(timeout_s)

    def _watch(self) -> None:
        while not self._stop.is_set():
            self._wake.clear()  # before checking, so a wake during the check is kept
            try:
                self._check()
            except Exception:  # the watchdog must outlive any bug
                log.exception("%s: watchdog", self._name)
            self._wake.wait(self._delay())

    def _delay(self) -> float:
        with self._cond:
            soonest = min(self._deadlines(), default=None)
            now = self._clock.monotonic()
            delay = WATCHDOG_MAX_INTERVAL_S
            if soonest is not None:
                delay = min(max(soonest - now, 0.001), WATCHDOG_MAX_INTERVAL_S)
            self._next_check = now + delay
        return delay
