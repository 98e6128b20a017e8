"""The executor's threads: a pool that executes started runs, reusing idle threads.

As ClickHouse's pool (``max_free_threads``): a run is handed to an idle thread, or to a new
thread when none is idle; a thread whose run timed out is simply not idle until its body
returns, so a stuck body never holds a slot, only its thread. Idle threads beyond ``max_idle``
exit, and any idle thread exits after IDLE_EXIT_S. Starting a thread per run instead costs a GIL
hand-off on the dispatch path (measured: a quarter of a busy scheduler loop at a thousand runs a
second).
"""

from __future__ import annotations

import itertools
import threading
from collections.abc import Callable
from dataclasses import dataclass, field

from workers.sched.executor_types import CancelToken
from workers.sched.run_queue import Job

IDLE_EXIT_S = 60.0  # an idle thread lives this long (real time) waiting for another run


@dataclass
class Run:
    """A started job: its token, its deadline on the executor's clock, and how it is ending."""

    job: Job
    started: float
    deadline: float | None
    token: CancelToken = field(default_factory=CancelToken)
    canceled: bool = False
    timed_out: bool = False
    cancel_called: bool = False  # on_cancel was called (at most once per run)


class Worker:
    """A pool thread's mailbox: the run handed to it, and the event that wakes it for one."""

    __slots__ = ("run", "wake")

    def __init__(self, run: Run) -> None:
        self.run: Run | None = run
        self.wake = threading.Event()


_thread_ids = itertools.count(1)


class WorkerPool:
    """Threads named ``<name>-worker-<n>`` that call ``execute(run)`` for each run handed to them.

    Shares its owner's lock (``cond``): ``assign``, ``close`` and ``max_idle`` are used with it
    held, ``start`` without it (so a slot never waits on a thread start under the lock).
    """

    def __init__(
        self, cond: threading.Condition, name: str, execute: Callable[[Run], None], max_idle: int
    ) -> None:
        self._cond = cond
        self._name = name
        self._execute = execute
        self.max_idle = max_idle
        self._idle: list[Worker] = []  # most recently used last
        self._closed = False

    def assign(self, run: Run) -> Worker | None:
        """Hand ``run`` to the warmest idle thread (None), or return a new worker to ``start``."""
        if self._idle:
            worker = self._idle.pop()
            worker.run = run
            worker.wake.set()
            return None
        return Worker(run)

    def start(self, worker: Worker) -> None:
        name = f"{self._name}-worker-{next(_thread_ids)}"
        threading.Thread(target=self._work, args=(worker,), name=name, daemon=True).start()

    def close(self) -> None:
        """Idle threads exit now, busy ones once their body returns."""
        self._closed = True
        for worker in self._idle:
            worker.wake.set()
        self._idle.clear()

    def _work(self, worker: Worker) -> None:
        """Run what it is handed, then wait idle for more; exit when not needed."""
        while True:
            run = worker.run
            assert run is not None
            self._execute(run)
            with self._cond:
                worker.run = None
                worker.wake.clear()
                if self._closed or len(self._idle) >= self.max_idle:
                    return
                self._idle.append(worker)
            worker.wake.wait(IDLE_EXIT_S)
            with self._cond:
                if worker.run is None:  # not handed a run: timed out idle, or closed
                    if worker in self._idle:
                        self._idle.remove(worker)
                    return
