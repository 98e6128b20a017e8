"""Burst and overload (issue 31): a burst the pool drains before its tasks are due again waits in the
queue, never turned away; a run not started by the time its task is due again is counted rejected
(the worker cannot carry its load) and still runs; the ClickHouse queue bound still turns submits away.

First through the executor alone, then through the path a worker runs (task host, maintainers, the
executor sized to the tasks it owns). Time is a ManualClock moved by the test; deadlines are checked
by explicit ``check_timeouts()`` calls, except in the one watchdog test on the real clock.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass

import pytest

from tests.unit.maintainer_harness import WAIT, Harness, mv
from tests.unit.test_sched_executor import ACCEPTED, REJECTED, Gate
from workers.sched.clock import ManualClock
from workers.sched.executor import BoundedExecutor
from workers.sched.executor_types import CancelToken

INTERVAL_S = 60.0
BURST = 500


def _noop(_token: CancelToken) -> None:
    return None


# -- the executor ---------------------------------------------------------------------------------------
@dataclass
class Held:
    """A one-slot executor on a manual clock whose slot a gated run holds until ``blocker`` opens."""

    clock: ManualClock
    ex: BoundedExecutor
    blocker: Gate


@pytest.fixture
def held() -> Iterator[Held]:
    clock = ManualClock(start=1000.0)
    ex = BoundedExecutor(1, 10, clock=clock, watchdog=False)
    blocker = Gate()
    assert ex.submit("blocker", blocker, priority=0) is ACCEPTED
    assert blocker.started.wait(WAIT)
    yield Held(clock, ex, blocker)
    blocker.release.set()
    ex.shutdown(timeout_s=WAIT)


def test_a_burst_larger_than_the_slots_waits_in_the_queue(held: Held) -> None:
    clock, ex = held.clock, held.ex
    ex.set_queue_size(BURST)
    statuses = [
        ex.submit(f"k{i}", _noop, priority=20, start_by=clock.monotonic() + INTERVAL_S)
        for i in range(BURST - 1)
    ]
    assert statuses == [ACCEPTED] * (BURST - 1)
    assert ex.metrics().waiting == BURST - 1
    held.blocker.release.set()
    assert ex.wait_idle(timeout_s=WAIT)
    clock.advance(INTERVAL_S)  # every run started before its task was due again
    ex.check_timeouts()
    m = ex.metrics()
    assert (m.rejected, m.completed, m.waiting) == (0, BURST, 0)


def test_a_run_not_started_before_its_task_is_due_again_is_rejected_once_and_still_runs(held: Held) -> None:
    clock, ex = held.clock, held.ex
    order: list[str] = []
    now = clock.monotonic()
    for key, start_by in (("a", now + 10), ("b", now + 10), ("c", now + 20), ("d", None)):
        assert ex.submit(key, lambda _t, k=key: order.append(k), priority=20, start_by=start_by) is ACCEPTED
    clock.advance(9.999)
    ex.check_timeouts()
    assert ex.metrics().rejected == 0
    clock.advance(0.001)  # a and b: due again, still queued
    ex.check_timeouts()
    assert ex.metrics().rejected == 2
    clock.advance(100.0)  # c too; d has no due time; nobody counts twice
    ex.check_timeouts()
    ex.check_timeouts()
    assert (ex.metrics().rejected, ex.metrics().waiting) == (3, 4)
    held.blocker.release.set()
    assert ex.wait_idle(timeout_s=WAIT)
    assert order == ["a", "b", "c", "d"]  # the queued runs kept their places
    assert (ex.metrics().completed, ex.metrics().rejected) == (5, 3)


def test_a_run_started_or_canceled_in_time_is_not_counted(held: Held) -> None:
    clock, ex = held.clock, held.ex
    started = Gate()
    try:
        ex.submit("started", started, priority=10, start_by=clock.monotonic() + 10)
        ex.submit("canceled", Gate(), priority=20, start_by=clock.monotonic() + 10)
        assert ex.cancel("canceled")
        held.blocker.release.set()
        assert started.started.wait(WAIT)
        clock.advance(10)
        ex.check_timeouts()
        assert ex.metrics().rejected == 0
    finally:
        started.release.set()


def test_the_queue_bound_still_turns_submits_away_and_set_queue_size_moves_it(held: Held) -> None:
    ex = held.ex
    ex.set_queue_size(2)
    assert ex.submit("a", Gate(), priority=0) is ACCEPTED
    assert ex.submit("b", Gate(), priority=0) is REJECTED  # running + queued == queue_size
    ex.set_queue_size(3)
    assert ex.submit("b", _noop, priority=0) is ACCEPTED
    ex.set_queue_size(0)  # never below the slots; nothing queued is dropped
    m = ex.metrics()
    assert (m.queue_size, m.waiting, m.rejected) == (1, 2, 1)
    assert ex.cancel("a")


def test_the_watchdog_counts_a_run_past_its_start_by_on_the_real_clock() -> None:
    ex = BoundedExecutor(1, 4, name="overdue")
    blocker = Gate()
    try:
        ex.submit("blocker", blocker, priority=0)
        ex.submit("late", _noop, priority=0, start_by=time.monotonic() + 0.05)
        counted = threading.Event()
        deadline = time.monotonic() + WAIT
        while time.monotonic() < deadline and not counted.is_set():
            if ex.metrics().rejected == 1:
                counted.set()
            else:
                counted.wait(0.01)
        assert counted.is_set(), "the watchdog never counted the queued run past its start_by"
    finally:
        blocker.release.set()
        ex.shutdown(timeout_s=WAIT)


# -- the path a worker runs -----------------------------------------------------------------------------
def test_every_owned_task_due_at_once_is_queued_not_rejected() -> None:
    h = Harness(slots=2, queue=1)  # the host sizes the queue to the tasks it owns
    gates = [h.runner.gate("mv:m0"), h.runner.gate("mv:m1")]  # hold both slots: the rest queue
    try:
        maintainers = [h.add(mv(f"m{i}", "EVERY", int(INTERVAL_S * 1000))) for i in range(BURST)]
        assert h.executor.metrics().queue_size == BURST
        assert h.tick(settle=False) == BURST  # all due at the same instant
        snap = h.executor.metrics()
        assert (snap.submitted, snap.rejected, snap.waiting) == (BURST, 0, BURST - 2)
        assert all(h.states(m.task_id) == ["PENDING"] for m in maintainers[2:])
        for gate in gates:
            gate.release.set()
        h.settle()
        h.executor.check_timeouts()
        assert h.executor.metrics().rejected == 0
        assert all(h.states(m.task_id) == ["COMPLETED"] for m in maintainers)
    finally:
        for gate in gates:
            gate.release.set()
        h.executor.shutdown(timeout_s=WAIT)


def test_an_overload_is_counted_rejected_and_each_queued_run_still_serves_its_task() -> None:
    h = Harness(slots=1)
    try:
        h.add(mv("blocker", "EVERY", int(INTERVAL_S * 1000)))
        gate = h.runner.gate("mv:blocker")  # a run slower than the tasks' interval
        h.tick(settle=False)
        assert gate.started.wait(WAIT)
        slow = [h.add(mv(f"q{i}", "EVERY", int(INTERVAL_S * 1000))) for i in range(3)]
        h.tick(settle=False)  # queued behind the blocker
        h.clock.advance(INTERVAL_S)  # due again, still queued
        h.executor.check_timeouts()
        h.metrics.track_executor(h.executor)  # as the manager does: what an operator scrapes
        assert h.metrics.registry.get_sample_value("mvs_sched_rejected_total", {"pool": "runs"}) == 3
        assert [h.states(m.task_id) for m in slow] == [["PENDING"]] * 3  # one run each, not a second
        gate.release.set()
        h.settle()
        assert [h.states(m.task_id) for m in slow] == [["COMPLETED"]] * 3
        assert [h.refreshes(m.task_id) for m in slow] == [1, 1, 1]
        assert h.executor.metrics().rejected == 3
    finally:
        gate.release.set()
        h.executor.shutdown(timeout_s=WAIT)
