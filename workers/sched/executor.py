"""A bounded priority executor with per-key coalescing, real cancellation and timeouts.

Seed 003: ClickHouse's ``ThreadPoolImpl`` (priority queue, ``queue_size`` bounds running plus
queued, try/blocking/timed scheduling) with ``BackgroundSchedulePool``'s task semantics (a task
scheduled while executing is re-run once after it, never concurrently). Seed 000 risk 4: a
timeout *does* cancel the body (token + ``on_cancel``, e.g. cancel the Spark job group) and frees
the slot at once; seed 000 risk 5: after ``shutdown`` every submit is REJECTED, never a crash.

Two bounds, both counted as ``rejected`` (with a rate-limited warning): ``queue_size`` (ClickHouse:
running plus queued; a try-submit beyond it is turned away) and time: a run that could not start by
its ``start_by`` (when its task is due again) shows the pool cannot carry the load, and the due run
at that time is turned away. The queued run keeps its place and serves it (a refresh reads its base
tables when it starts), so an overload neither loses a task nor piles up runs; a burst the pool
drains before its tasks are due again waits in the queue and is never turned away. A worker sizes
``queue_size`` to the tasks it owns (``set_queue_size``): one queued run per key fits them all.

This module is the executor's state and lock: admission, coalescing, cancellation, timeouts
and outcome delivery. The queue is ``run_queue``, the threads ``worker_pool`` and ``watchdog``,
the value types ``executor_types``.
"""

from __future__ import annotations

import functools
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from workers.sched.clock import Clock, SystemClock
from workers.sched.due import DueQueue
from workers.sched.executor_types import (
    EXECUTOR_COUNTERS,
    CancelToken,
    ExecutorMetrics,
    Priority,
    RunOutcome,
    SubmitStatus,
)
from workers.sched.run_queue import Job, RunQueue
from workers.sched.watchdog import Watchdog
from workers.sched.worker_pool import Run, Worker, WorkerPool

__all__ = ["BoundedExecutor", "CancelToken", "ExecutorMetrics", "Priority", "RunOutcome", "SubmitStatus"]

log = logging.getLogger(__name__)

_REJECT_LOG_EVERY_S = 10.0  # try-submit against a full queue would otherwise flood the log


@dataclass
class _After:
    """Work collected under the lock and done after releasing it: user code never runs locked."""

    starts: list[Worker] = field(default_factory=list)  # new pool threads to start
    cancels: list[tuple[str, Callable[[], None]]] = field(default_factory=list)
    outcomes: list[tuple[Job, RunOutcome]] = field(default_factory=list)


class BoundedExecutor:
    """Runs keyed callables, at most ``max_concurrency`` at once, lower priority value first.

    A key is never queued twice and never executes twice at once. It stays *busy* while queued,
    running, timed out but its body not yet returned, or its outcome being delivered; submitting
    a busy key returns COALESCED: into the queued run if queued (latest fn and callbacks, most
    urgent priority), else as exactly one more run once it is no longer busy. So ``on_done``
    calls for one key never overlap and arrive in run order.
    """

    def __init__(
        self,
        max_concurrency: int,
        queue_size: int,
        *,
        clock: Clock | None = None,
        name: str = "runs",
        watchdog: bool = True,
    ) -> None:
        if max_concurrency < 1:
            raise ValueError(f"max_concurrency must be >= 1, got {max_concurrency}")
        self.name = name
        self._clock: Clock = clock if clock is not None else SystemClock()
        self._max = max_concurrency
        self._queue_size = max(queue_size, max_concurrency)  # as ClickHouse: never below the slots
        self._cond = threading.Condition()
        self._queued = RunQueue()
        self._start_by: DueQueue[str] = DueQueue()  # queued keys by when their task is due again
        self._running: dict[str, Run] = {}  # hold a slot
        self._zombies: dict[str, Run] = {}  # timed out, body still executing: no slot, key busy
        self._delivering: set[str] = set()  # outcome being delivered: key busy
        self._again: dict[str, Job] = {}  # one more run once the key is no longer busy
        self._pool = WorkerPool(self._cond, name, self._execute, max_idle=max_concurrency)
        self._closed = False
        self._counts = dict.fromkeys(EXECUTOR_COUNTERS, 0)
        self._rejects_unlogged = 0
        self._last_reject_log = float("-inf")
        self._watchdog: Watchdog | None = None
        if watchdog:
            self._watchdog = Watchdog(self._cond, self._clock, name, self.check_timeouts, self._deadlines)

    # ------------------------------------------------------------------ submit / cancel / timeouts

    def submit(
        self,
        key: str,
        fn: Callable[[CancelToken], object],
        *,
        priority: int,
        timeout_s: float | None = None,
        on_done: Callable[[RunOutcome], None] | None = None,
        on_cancel: Callable[[], None] | None = None,
        wait_s: float | None = 0.0,
        start_by: float | None = None,
    ) -> SubmitStatus:
        """Queue a run of ``key``. ``wait_s``: 0 try once, None block for room, > 0 wait that long.

        ``timeout_s`` counts from the start of the run, on the executor's clock. ``start_by`` (the
        executor's clock): when the key's task is due again; still queued then, the run counts one
        rejection (see the module doc) and stays queued.
        """
        if timeout_s is not None and timeout_s <= 0:
            timeout_s = None  # as seed 000: no timeout
        job = Job(key, fn, int(priority), timeout_s, on_done, on_cancel, start_by)
        give_up = None if wait_s is None else time.monotonic() + max(wait_s, 0.0)  # real time: we block
        after = _After()
        with self._cond:
            while True:
                if self._closed:
                    return self._reject_locked(key, "shut down")
                if key in self._queued:
                    self._queued.coalesce(job)
                    self._watch_start_by_locked(key, start_by)  # the earliest one counts
                    self._counts["coalesced"] += 1
                    return SubmitStatus.COALESCED
                if self._executing_locked(key):
                    prev = self._again.get(key)
                    if prev is not None:
                        job.priority = min(job.priority, prev.priority)
                    self._again[key] = job
                    self._counts["coalesced"] += 1
                    return SubmitStatus.COALESCED
                if len(self._running) + len(self._queued) < self._queue_size:
                    self._enqueue_locked(job)
                    self._dispatch_locked(after)
                    break
                remaining = None if give_up is None else give_up - time.monotonic()
                if remaining is not None and remaining <= 0:
                    return self._reject_locked(key, "queue full")
                self._cond.wait(remaining)  # the loop re-checks all: the key may have arrived meanwhile
        self._after(after)
        return SubmitStatus.ACCEPTED

    def cancel(self, key: str) -> bool:
        """Drop ``key`` if queued (outcome canceled), or set its token and call ``on_cancel`` if running.

        A pending re-run is dropped too. False if nothing of ``key`` was queued, running or pending.
        """
        after = _After()
        with self._cond:
            job = self._queued.remove(key)
            self._start_by.remove(key)
            dropped = self._again.pop(key, None) is not None
            run = self._running.get(key)
            if job is not None:
                self._counts["canceled"] += 1
                now = self._clock.monotonic()
                self._outcome_locked(after, job, RunOutcome(key, None, None, False, True, now, now))
                self._cond.notify_all()  # room for blocked submitters
            elif run is not None:
                run.canceled = True
                self._signal_locked(after, run)
            found = job is not None or run is not None or dropped
        self._after(after)
        return found

    def promote(self, key: str, priority: int) -> bool:
        """If ``key`` is queued, move it up to ``priority`` (when more urgent) and return True.

        False when it is not queued — never submitted, or already started — decided atomically,
        so a caller learns whether the run it queued can still serve a newer request.
        """
        with self._cond:
            return self._queued.promote(key, int(priority))

    def check_timeouts(self) -> list[str]:
        """Time out runs past their deadline: token set, ``on_cancel``, outcome, slot freed now; and
        count each queued run past its ``start_by`` as rejected (once). Returns the timed-out keys.

        The watchdog thread calls this; with a manual clock, tests call it after ``advance``.
        """
        after = _After()
        expired: list[str] = []
        with self._cond:
            now = self._clock.monotonic()
            for key in self._start_by.pop_due(now):
                self._reject_locked(key, "not started before its task was due again")
            for key, run in list(self._running.items()):
                if run.deadline is None or run.deadline > now:
                    continue
                expired.append(key)
                run.timed_out = True
                del self._running[key]
                self._zombies[key] = run
                self._counts["timeout"] += 1
                self._signal_locked(after, run)
                self._outcome_locked(
                    after, run.job, RunOutcome(key, None, None, True, run.canceled, run.started, now)
                )
            if expired:
                self._dispatch_locked(after)
                self._cond.notify_all()
        if expired:
            log.warning("%s: timed out %s", self.name, expired)
        self._after(after)
        return expired

    # ------------------------------------------------------------------ configuration / state

    def set_max_concurrency(self, n: int) -> None:
        """Grow or shrink the slots; shrinking lets current runs finish (seed 000 ``UpdateConfig``)."""
        if n < 1:
            raise ValueError(f"max_concurrency must be >= 1, got {n}")
        after = _After()
        with self._cond:
            self._max = n
            self._pool.max_idle = n
            self._queue_size = max(self._queue_size, n)
            self._dispatch_locked(after)
            self._cond.notify_all()
        self._after(after)

    def set_queue_size(self, n: int) -> None:
        """Bound running plus queued runs by ``n`` (never below the slots); a smaller bound turns
        away new submits only, nothing queued."""
        with self._cond:
            self._queue_size = max(n, self._max)
            self._cond.notify_all()  # blocked submitters may have room now

    @property
    def max_concurrency(self) -> int:
        with self._cond:
            return self._max

    def busy(self, key: str) -> bool:
        """``key`` is queued, executing (even timed out) or having its outcome delivered."""
        with self._cond:
            return key in self._queued or self._executing_locked(key)

    def wait_idle(self, key: str | None = None, timeout_s: float | None = None) -> bool:
        """Block (real time) until ``key`` (or every key) is neither busy nor has a pending re-run."""

        def idle() -> bool:
            if key is None:
                return not (self._queued or self._running or self._zombies or self._delivering or self._again)
            return not (key in self._queued or self._executing_locked(key) or key in self._again)

        with self._cond:
            return self._cond.wait_for(idle, timeout_s)

    def metrics(self) -> ExecutorMetrics:
        with self._cond:
            return ExecutorMetrics(
                **self._counts,
                running=len(self._running),
                waiting=len(self._queued),
                zombies=len(self._zombies),
                max_concurrency=self._max,
                queue_size=self._queue_size,
            )

    def shutdown(self, *, cancel_running: bool = True, timeout_s: float = 30.0) -> bool:
        """Reject new work, drop the queue (outcomes canceled), cancel runs if asked, wait for bodies
        and their outcomes' delivery (a caller that closes after this must not lose one).

        Idempotent; submit afterwards returns REJECTED. Pending re-runs are dropped silently.
        Returns True if every body returned and its outcome was delivered within ``timeout_s`` (real time).
        """
        after = _After()
        with self._cond:
            if not self._closed:
                self._closed = True
                now = self._clock.monotonic()
                self._start_by.clear()
                for job in self._queued.drain():
                    self._counts["canceled"] += 1
                    self._outcome_locked(after, job, RunOutcome(job.key, None, None, False, True, now, now))
                self._again.clear()
                if cancel_running:
                    for run in self._running.values():
                        run.canceled = True
                        self._signal_locked(after, run)
                self._pool.close()
                self._cond.notify_all()  # blocked submitters wake up to REJECTED
        if self._watchdog is not None:
            self._watchdog.stop()
        self._after(after)
        with self._cond:
            # A body's slot is freed before its on_done runs (outside the lock): wait for that too.
            done = self._cond.wait_for(
                lambda: not self._running and not self._zombies and not self._delivering, timeout_s
            )
            left = sorted({*self._running, *self._zombies, *self._delivering})
        if self._watchdog is not None:
            self._watchdog.join(timeout_s)
        if not done:
            log.warning("%s: shutdown left bodies running: %s", self.name, left)
        return done

    # ------------------------------------------------------------------ internals (lock held)

    def _executing_locked(self, key: str) -> bool:
        return key in self._running or key in self._zombies or key in self._delivering

    def _enqueue_locked(self, job: Job) -> None:
        self._queued.push(job)
        self._watch_start_by_locked(job.key, job.start_by)
        self._counts["submitted"] += 1

    def _watch_start_by_locked(self, key: str, start_by: float | None) -> None:
        current = self._start_by.due_at(key)
        if start_by is None or (current is not None and current <= start_by):
            return
        self._start_by.schedule(key, start_by)
        if self._watchdog is not None:
            self._watchdog.wake_if_sooner(start_by)

    def _release_locked(self, key: str) -> None:
        """Once ``key`` is no longer busy, its coalesced re-run joins the queue."""
        if self._executing_locked(key):
            return
        again = self._again.pop(key, None)
        if again is not None and not self._closed:
            self._enqueue_locked(again)  # may exceed queue_size by one: a re-run is never dropped

    def _dispatch_locked(self, after: _After) -> None:
        """Move queued jobs into free slots; ``after`` starts their threads."""
        while len(self._running) < self._max and not self._closed:
            job = self._queued.pop_next()
            if job is None:
                return
            self._start_by.remove(job.key)
            now = self._clock.monotonic()
            deadline = None if job.timeout_s is None else now + job.timeout_s
            run = Run(job, started=now, deadline=deadline)
            self._running[job.key] = run
            worker = self._pool.assign(run)
            if worker is not None:
                after.starts.append(worker)
            if deadline is not None and self._watchdog is not None:
                self._watchdog.wake_if_sooner(deadline)

    def _signal_locked(self, after: _After, run: Run) -> None:
        run.token.set()
        if not run.cancel_called and run.job.on_cancel is not None:
            run.cancel_called = True
            after.cancels.append((run.job.key, run.job.on_cancel))

    def _outcome_locked(self, after: _After, job: Job, outcome: RunOutcome) -> None:
        self._delivering.add(job.key)
        after.outcomes.append((job, outcome))

    def _reject_locked(self, key: str, why: str) -> SubmitStatus:
        self._counts["rejected"] += 1
        self._rejects_unlogged += 1
        unlogged = self._rejects_unlogged
        now = time.monotonic()
        if now - self._last_reject_log >= _REJECT_LOG_EVERY_S:
            log.warning(
                "%s: rejected %s (%s); %d rejection(s) since the last report", self.name, key, why, unlogged
            )
            self._last_reject_log = now
            self._rejects_unlogged = 0
        return SubmitStatus.REJECTED

    # ------------------------------------------------------------------ after the lock

    def _after(self, after: _After) -> None:
        """Start threads first (slots must not wait on slow callbacks), then callbacks in order."""
        while after.starts or after.cancels or after.outcomes:
            starts, after.starts = after.starts, []
            for worker in starts:
                self._pool.start(worker)
            cancels, after.cancels = after.cancels, []
            for key, on_cancel in cancels:
                _guarded(on_cancel, f"{self.name}: on_cancel of {key}")
            outcomes, after.outcomes = after.outcomes, []
            for job, outcome in outcomes:
                if job.on_done is not None:
                    _guarded(functools.partial(job.on_done, outcome), f"{self.name}: on_done of {job.key}")
                with self._cond:
                    self._delivering.discard(job.key)
                    self._release_locked(job.key)
                    self._dispatch_locked(after)
                    self._cond.notify_all()

    def _execute(self, run: Run) -> None:
        """A pool thread runs the body here."""
        result: object | None = None
        error: BaseException | None = None
        try:
            result = run.job.fn(run.token)
        except BaseException as exc:  # every failure becomes an outcome, the thread never dies loudly
            error = exc
        self._finish(run, result, error)

    def _finish(self, run: Run, result: object | None, error: BaseException | None) -> None:
        key = run.job.key
        after = _After()
        with self._cond:
            ended = self._clock.monotonic()
            if run.timed_out:
                del self._zombies[key]  # its outcome went out at the deadline; this result is dropped
                log.info("%s: timed-out run of %s returned after %.3fs", self.name, key, ended - run.started)
            else:
                del self._running[key]
                counter = "canceled" if run.canceled else "failed" if error is not None else "completed"
                self._counts[counter] += 1
                self._outcome_locked(
                    after, run.job, RunOutcome(key, result, error, False, run.canceled, run.started, ended)
                )
            self._release_locked(key)
            self._dispatch_locked(after)
            self._cond.notify_all()
        self._after(after)

    def _deadlines(self) -> list[float]:
        """The deadlines of the runs holding a slot, and the soonest ``start_by`` of a queued run
        (lock held: the watchdog's sleep)."""
        deadlines = [run.deadline for run in self._running.values() if run.deadline is not None]
        soonest = self._start_by.next_due()
        return deadlines if soonest is None else [*deadlines, soonest]


def _guarded(fn: Callable[[], object], what: str) -> None:
    try:
        fn()
    except Exception:
        log.exception("%s raised", what)
