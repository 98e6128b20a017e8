"""BoundedExecutor: priorities, bounds, coalescing, resizing, promotion; how runs end (timeouts,
cancellation, shutdown) is in ``test_sched_executor_ending``, which shares the bodies and fixtures here.

No sleeping: bodies block on Events that the test sets; every real-time wait has a deadline
(WAIT) so a bug fails the test instead of hanging it. Timeouts are driven by a ManualClock and
explicit ``check_timeouts()`` calls, except for one watchdog test on the real clock.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import pytest

from workers.sched.clock import ManualClock
from workers.sched.executor import BoundedExecutor
from workers.sched.executor_types import CancelToken, Priority, RunOutcome, SubmitStatus

WAIT = 5.0
ACCEPTED, COALESCED, REJECTED = SubmitStatus.ACCEPTED, SubmitStatus.COALESCED, SubmitStatus.REJECTED


class Gate:
    """A body that announces its start, then blocks until released (ignores its token)."""

    def __init__(self, result: object = None) -> None:
        self.started = threading.Event()
        self.release = threading.Event()
        self.result = result

    def __call__(self, token: CancelToken) -> object:
        self.started.set()
        assert self.release.wait(WAIT), "gate never released"
        return self.result


class Cancellable:
    """A body that runs until its token is set (as a Spark job until its group is canceled)."""

    def __init__(self) -> None:
        self.started = threading.Event()

    def __call__(self, token: CancelToken) -> object:
        self.started.set()
        assert token.wait(WAIT), "never canceled"
        return "stopped"


class Outcomes:
    def __init__(self) -> None:
        self._cond = threading.Condition()
        self.items: list[RunOutcome] = []

    def __call__(self, outcome: RunOutcome) -> None:
        with self._cond:
            self.items.append(outcome)
            self._cond.notify_all()

    def of(self, key: str, count: int = 1) -> list[RunOutcome]:
        with self._cond:
            assert self._cond.wait_for(lambda: len([o for o in self.items if o.key == key]) >= count, WAIT)
            return [o for o in self.items if o.key == key]


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock(start=1000.0, wall_start_ms=1_700_000_000_000)


@pytest.fixture
def one_slot(clock: ManualClock) -> Iterator[BoundedExecutor]:
    ex = BoundedExecutor(1, 10, clock=clock, watchdog=False)
    yield ex
    ex.shutdown(timeout_s=WAIT)


class Recorder:
    """A body that appends its key to a shared order list."""

    def __init__(self, order: list[str], key: str) -> None:
        self.order = order
        self.key = key

    def __call__(self, token: CancelToken) -> object:
        self.order.append(self.key)  # one slot: appends never overlap
        return self.key


def assert_balanced(ex: BoundedExecutor) -> None:
    m = ex.metrics()
    assert m.submitted == m.completed + m.failed + m.canceled + m.timeout + m.running + m.waiting


def test_priorities_order_runs_with_one_slot(one_slot: BoundedExecutor) -> None:
    order: list[str] = []
    blocker = Gate()
    assert one_slot.submit("blocker", blocker, priority=Priority.URGENT) is ACCEPTED
    assert blocker.started.wait(WAIT)
    for key, prio in [
        ("c", Priority.PERIODIC),
        ("b1", Priority.URGENT),
        ("d", Priority.PURGE),
        ("b2", Priority.URGENT),
        ("e", Priority.CHANGE),
    ]:
        assert one_slot.submit(key, Recorder(order, key), priority=prio) is ACCEPTED
    assert one_slot.metrics().waiting == 5
    blocker.release.set()
    assert one_slot.wait_idle(timeout_s=WAIT)
    assert order == ["b1", "b2", "e", "c", "d"]
    assert one_slot.metrics().completed == 6
    assert_balanced(one_slot)


def test_fifo_within_a_priority(one_slot: BoundedExecutor) -> None:
    order: list[str] = []
    blocker = Gate()
    one_slot.submit("blocker", blocker, priority=Priority.PERIODIC)
    assert blocker.started.wait(WAIT)
    keys = [f"mv:{i}" for i in range(8)]
    for key in keys:
        one_slot.submit(key, Recorder(order, key), priority=Priority.PERIODIC)
    blocker.release.set()
    assert one_slot.wait_idle(timeout_s=WAIT)
    assert order == keys


def test_coalescing_into_a_queued_run_keeps_one_run_and_the_most_urgent_priority(
    one_slot: BoundedExecutor,
) -> None:
    order: list[str] = []
    blocker = Gate()
    one_slot.submit("blocker", blocker, priority=Priority.URGENT)
    assert blocker.started.wait(WAIT)
    assert one_slot.submit("p", Recorder(order, "p"), priority=Priority.PERIODIC) is ACCEPTED
    assert one_slot.submit("x", Recorder(order, "x"), priority=Priority.CHANGE) is ACCEPTED
    assert one_slot.submit("p", Recorder(order, "p"), priority=Priority.URGENT) is COALESCED
    assert one_slot.submit("p", Recorder(order, "p"), priority=Priority.PURGE) is COALESCED  # stays URGENT
    assert one_slot.metrics().waiting == 2
    blocker.release.set()
    assert one_slot.wait_idle(timeout_s=WAIT)
    assert order == ["p", "x"]
    assert one_slot.metrics().coalesced == 2


def test_queue_full_is_rejected_and_counted(clock: ManualClock) -> None:
    ex = BoundedExecutor(1, 2, clock=clock, watchdog=False)
    blocker = Gate()
    assert ex.submit("a", blocker, priority=0) is ACCEPTED
    assert ex.submit("b", Gate(), priority=0) is ACCEPTED
    assert ex.submit("c", Gate(), priority=0) is REJECTED  # running + queued == queue_size
    assert ex.submit("b", Gate(), priority=0) is COALESCED  # a known key needs no room
    m = ex.metrics()
    assert (m.rejected, m.running, m.waiting, m.submitted) == (1, 1, 1, 2)
    assert ex.cancel("b")
    blocker.release.set()
    assert ex.shutdown(timeout_s=WAIT)


def test_queue_size_never_below_max_concurrency(clock: ManualClock) -> None:
    ex = BoundedExecutor(3, 1, clock=clock, watchdog=False)
    assert ex.metrics().queue_size == 3
    ex.shutdown()


def test_wait_s_timed_wait_then_rejected(clock: ManualClock) -> None:
    ex = BoundedExecutor(1, 1, clock=clock, watchdog=False)
    blocker = Gate()
    ex.submit("a", blocker, priority=0)
    t0 = time.monotonic()
    assert ex.submit("b", Gate(), priority=0, wait_s=0.05) is REJECTED
    assert time.monotonic() - t0 >= 0.05
    assert ex.metrics().rejected == 1
    blocker.release.set()
    assert ex.shutdown(timeout_s=WAIT)


@pytest.mark.parametrize("wait_s", [None, WAIT])
def test_wait_s_blocks_until_room(clock: ManualClock, wait_s: float | None) -> None:
    ex = BoundedExecutor(1, 1, clock=clock, watchdog=False)
    blocker = Gate()
    ex.submit("a", blocker, priority=0)
    statuses: list[SubmitStatus] = []
    returned = threading.Event()
    later = Gate()
    later.release.set()

    def submitter() -> None:
        statuses.append(ex.submit("b", later, priority=0, wait_s=wait_s))
        returned.set()

    t = threading.Thread(target=submitter)
    t.start()
    assert not returned.wait(0.05)  # still blocked: no room
    blocker.release.set()
    assert returned.wait(WAIT)
    t.join(WAIT)
    assert statuses == [ACCEPTED]
    assert later.started.wait(WAIT)
    assert ex.shutdown(timeout_s=WAIT)


def test_a_key_never_runs_twice_at_once_and_reruns_exactly_once(clock: ManualClock) -> None:
    ex = BoundedExecutor(4, 10, clock=clock, watchdog=False)  # slots to spare: the key is the limit
    lock = threading.Lock()
    state = {"active": 0, "max_active": 0, "runs": 0}
    first_started, release_first = threading.Event(), threading.Event()
    outcomes = Outcomes()

    def body(token: CancelToken) -> object:
        with lock:
            state["active"] += 1
            state["runs"] += 1
            run = state["runs"]
            state["max_active"] = max(state["max_active"], state["active"])
        if run == 1:
            first_started.set()
            assert release_first.wait(WAIT)
        with lock:
            state["active"] -= 1
        return run

    assert ex.submit("mv:a", body, priority=Priority.CHANGE, on_done=outcomes) is ACCEPTED
    assert first_started.wait(WAIT)
    for _ in range(5):
        assert ex.submit("mv:a", body, priority=Priority.CHANGE, on_done=outcomes) is COALESCED
    assert ex.metrics().waiting == 0  # the re-run is held, not queued beside the running one
    release_first.set()
    assert ex.wait_idle(timeout_s=WAIT)
    assert state == {"active": 0, "max_active": 1, "runs": 2}
    assert [o.result for o in outcomes.of("mv:a", 2)] == [1, 2]  # in run order
    assert ex.metrics().submitted == 2
    assert_balanced(ex)
    ex.shutdown()


def test_set_max_concurrency_up_and_down(one_slot: BoundedExecutor) -> None:
    gates = {k: Gate() for k in "abc"}
    for key, gate in gates.items():
        one_slot.submit(key, gate, priority=0)
    assert gates["a"].started.wait(WAIT)
    assert one_slot.metrics().running == 1
    one_slot.set_max_concurrency(3)
    assert gates["b"].started.wait(WAIT) and gates["c"].started.wait(WAIT)
    assert one_slot.metrics().running == 3

    one_slot.set_max_concurrency(1)
    d = Gate()
    d.release.set()
    one_slot.submit("d", d, priority=0)
    for key in "ab":
        gates[key].release.set()
        assert one_slot.wait_idle(key, timeout_s=WAIT)
    m = one_slot.metrics()
    assert (m.running, m.waiting, m.max_concurrency) == (1, 1, 1)  # c still running: d must wait
    assert not d.started.is_set()
    gates["c"].release.set()
    assert d.started.wait(WAIT)
    with pytest.raises(ValueError):
        one_slot.set_max_concurrency(0)


def test_promote_raises_a_queued_run_only(one_slot: BoundedExecutor) -> None:
    order: list[str] = []
    blocker = Gate()
    one_slot.submit("blocker", blocker, priority=0)
    assert blocker.started.wait(WAIT)
    for key in ("a", "b"):
        one_slot.submit(key, lambda token, key=key: order.append(key), priority=Priority.PERIODIC)
    assert not one_slot.promote("blocker", Priority.URGENT)  # started: nothing to promote
    assert not one_slot.promote("never", Priority.URGENT)
    assert one_slot.promote("b", Priority.URGENT)
    assert one_slot.promote("a", Priority.PURGE)  # queued, but a lower priority changes nothing
    blocker.release.set()
    assert one_slot.wait_idle(timeout_s=WAIT)
    assert order == ["b", "a"]
