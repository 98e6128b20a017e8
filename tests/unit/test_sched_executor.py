"""BoundedExecutor: priorities, bounds, coalescing, timeouts, cancellation, resizing, shutdown.

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


def test_timeout_cancels_frees_the_slot_and_keeps_the_key_busy(
    one_slot: BoundedExecutor, clock: ManualClock
) -> None:
    outcomes = Outcomes()
    cancels: list[str] = []
    slow = Gate(result="late")
    tokens: list[CancelToken] = []

    def slow_body(token: CancelToken) -> object:
        tokens.append(token)
        return slow(token)

    assert (
        one_slot.submit(
            "slow",
            slow_body,
            priority=0,
            timeout_s=10.0,
            on_done=outcomes,
            on_cancel=lambda: cancels.append("slow"),
        )
        is ACCEPTED
    )
    nxt = Gate()
    assert one_slot.submit("next", nxt, priority=0, on_done=outcomes) is ACCEPTED
    assert slow.started.wait(WAIT)

    clock.advance(9.9)
    assert one_slot.check_timeouts() == []
    clock.advance(0.1)
    assert one_slot.check_timeouts() == ["slow"]
    assert one_slot.check_timeouts() == []  # once
    assert cancels == ["slow"]
    assert tokens[0].is_set()
    (timed_out,) = outcomes.of("slow")
    assert (timed_out.timed_out, timed_out.result) == (True, None)
    assert (timed_out.started, timed_out.ended) == (1000.0, 1010.0)
    assert not timed_out.ok

    assert nxt.started.wait(WAIT)  # the slot was freed while the slow body is still running
    assert not slow.release.is_set()
    m = one_slot.metrics()
    assert (m.timeout, m.zombies, m.running) == (1, 1, 1)

    again = Gate(result="second")
    again.release.set()
    assert one_slot.submit("slow", again, priority=0, on_done=outcomes) is COALESCED
    nxt.release.set()
    assert one_slot.wait_idle("next", timeout_s=WAIT)
    assert not again.started.is_set()  # never beside its own timed-out body

    slow.release.set()  # the old body returns: its "late" result is dropped
    assert again.started.wait(WAIT)
    assert one_slot.wait_idle(timeout_s=WAIT)
    assert [o.result for o in outcomes.of("slow", 2)] == [None, "second"]
    assert one_slot.metrics().zombies == 0
    assert_balanced(one_slot)


def test_cancel_queued_and_running(one_slot: BoundedExecutor) -> None:
    outcomes = Outcomes()
    cancels: list[str] = []
    running = Cancellable()
    one_slot.submit("r", running, priority=0, on_done=outcomes, on_cancel=lambda: cancels.append("r"))
    queued = Gate()
    one_slot.submit("q", queued, priority=0, on_done=outcomes)
    assert running.started.wait(WAIT)

    assert one_slot.cancel("q") is True
    (q,) = outcomes.of("q")
    assert q.canceled and not q.timed_out and q.result is None
    assert one_slot.cancel("r") is True
    assert cancels == ["r"]
    (r,) = outcomes.of("r")
    assert r.canceled and r.result == "stopped"
    assert one_slot.cancel("r") is False and one_slot.cancel("unknown") is False
    assert not queued.started.is_set()
    assert one_slot.metrics().canceled == 2
    assert_balanced(one_slot)


def test_cancel_drops_a_pending_rerun(one_slot: BoundedExecutor) -> None:
    runs: list[str] = []
    body = Cancellable()

    def counted(token: CancelToken) -> object:
        runs.append("run")
        return body(token)

    one_slot.submit("k", counted, priority=0)
    assert body.started.wait(WAIT)
    assert one_slot.submit("k", counted, priority=0) is COALESCED
    assert one_slot.cancel("k")
    assert one_slot.wait_idle(timeout_s=WAIT)
    assert runs == ["run"]


def test_failure_is_an_outcome(one_slot: BoundedExecutor) -> None:
    outcomes = Outcomes()

    def boom(token: CancelToken) -> object:
        raise RuntimeError("spark said no")

    one_slot.submit("f", boom, priority=0, on_done=outcomes)
    (o,) = outcomes.of("f")
    assert isinstance(o.error, RuntimeError) and not o.ok
    assert one_slot.wait_idle(timeout_s=WAIT)
    assert one_slot.metrics().failed == 1


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


def test_shutdown_cancels_drops_and_then_rejects(one_slot: BoundedExecutor) -> None:
    outcomes = Outcomes()
    running = Cancellable()
    one_slot.submit("r", running, priority=0, on_done=outcomes)
    one_slot.submit("q", Gate(), priority=0, on_done=outcomes)
    assert running.started.wait(WAIT)
    assert one_slot.shutdown(timeout_s=WAIT) is True
    assert outcomes.of("r")[0].canceled and outcomes.of("q")[0].canceled
    assert one_slot.submit("new", Gate(), priority=0) is REJECTED
    assert one_slot.submit("r", Gate(), priority=0) is REJECTED
    assert one_slot.shutdown() is True  # idempotent
    m = one_slot.metrics()
    assert (m.rejected, m.running, m.waiting) == (2, 0, 0)
    assert_balanced(one_slot)


def test_shutdown_wakes_blocked_submitters(clock: ManualClock) -> None:
    ex = BoundedExecutor(1, 1, clock=clock, watchdog=False)
    blocker = Gate()
    ex.submit("a", blocker, priority=0, on_cancel=blocker.release.set)  # on_cancel ends the body
    statuses: list[SubmitStatus] = []
    t = threading.Thread(target=lambda: statuses.append(ex.submit("b", Gate(), priority=0, wait_s=None)))
    t.start()
    assert blocker.started.wait(WAIT)
    assert ex.shutdown(timeout_s=WAIT)
    t.join(WAIT)
    assert statuses == [REJECTED]


def test_shutdown_without_cancel_lets_running_finish(clock: ManualClock) -> None:
    ex = BoundedExecutor(1, 2, clock=clock, watchdog=False)
    body = Cancellable()
    outcomes = Outcomes()
    ex.submit("a", body, priority=0, on_done=outcomes)
    assert body.started.wait(WAIT)
    assert ex.shutdown(cancel_running=False, timeout_s=0.05) is False  # body still waiting
    ex.cancel("a")
    assert ex.shutdown(timeout_s=WAIT) is True
    assert outcomes.of("a")[0].canceled


def test_watchdog_times_out_on_the_real_clock() -> None:
    ex = BoundedExecutor(2, 4, name="wd")
    outcomes = Outcomes()
    cancels = threading.Event()
    ex.submit("k", Cancellable(), priority=0, timeout_s=0.05, on_done=outcomes, on_cancel=cancels.set)
    (o,) = outcomes.of("k")
    assert o.timed_out and cancels.is_set()
    assert o.ended - o.started >= 0.05
    assert ex.shutdown(timeout_s=WAIT)


def test_callback_errors_do_not_break_the_executor(one_slot: BoundedExecutor) -> None:
    def bad_done(outcome: RunOutcome) -> None:
        raise RuntimeError("callback bug")

    done = Gate()
    done.release.set()
    one_slot.submit("a", done, priority=0, on_done=bad_done)
    assert one_slot.wait_idle(timeout_s=WAIT)
    again = Gate()
    again.release.set()
    assert one_slot.submit("a", again, priority=0) is ACCEPTED
    assert again.started.wait(WAIT)


def test_pool_threads_are_reused_and_leave_at_shutdown(clock: ManualClock) -> None:
    ex = BoundedExecutor(2, 8, clock=clock, name="pool", watchdog=False)
    threads: set[int] = set()

    def body(token: CancelToken) -> object:
        threads.add(threading.get_ident())
        return None

    for i in range(50):
        assert ex.submit(f"k{i % 5}", body, priority=0) in (ACCEPTED, COALESCED)
        assert ex.wait_idle(timeout_s=WAIT)
    assert 1 <= len(threads) <= 3  # not a thread per run (the finishing thread may hand over once)
    assert ex.shutdown(timeout_s=WAIT)
    gone = threading.Event()
    for _ in range(int(WAIT / 0.01)):
        if not [t for t in threading.enumerate() if t.name.startswith("pool-worker-")]:
            gone.set()
            break
        gone.wait(0.01)
    assert gone.is_set(), "idle pool threads outlived the shutdown"


def test_a_stuck_timed_out_body_keeps_its_thread_but_not_its_slot(clock: ManualClock) -> None:
    ex = BoundedExecutor(1, 4, clock=clock, watchdog=False)
    stuck = Gate()
    ex.submit("stuck", stuck, priority=0, timeout_s=5.0)
    assert stuck.started.wait(WAIT)
    clock.advance(5.0)
    assert ex.check_timeouts() == ["stuck"]
    after = Gate()
    after.release.set()
    assert ex.submit("next", after, priority=0) is ACCEPTED
    assert after.started.wait(WAIT)  # on another thread: the stuck one is still in its body
    assert ex.metrics().zombies == 1
    stuck.release.set()
    assert ex.wait_idle(timeout_s=WAIT) and ex.metrics().zombies == 0
    assert ex.shutdown(timeout_s=WAIT)


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
