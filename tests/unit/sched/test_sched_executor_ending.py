"""BoundedExecutor: how runs end — timeouts, cancellation, failures, shutdown — and its threads.

As ``test_sched_executor`` (whose bodies and fixtures these share): no sleeping, every wait has
a deadline, timeouts driven by a ManualClock except for the one watchdog test on the real clock.
"""

from __future__ import annotations

import threading

from tests.unit.sched import test_sched_executor as base
from tests.unit.sched.test_sched_executor import (
    ACCEPTED,
    COALESCED,
    REJECTED,
    WAIT,
    Cancellable,
    Gate,
    Outcomes,
    assert_balanced,
)
from workers.sched.clock import ManualClock
from workers.sched.executor import BoundedExecutor
from workers.sched.executor_types import CancelToken, RunOutcome, SubmitStatus

# The same fixtures (assigned, not imported, so that the test parameters naming them are no redefinition).
clock = base.clock
one_slot = base.one_slot


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


def test_shutdown_waits_until_a_cancelled_runs_outcome_is_delivered(clock: ManualClock) -> None:
    """A worker closes its outbox right after shutdown: an outcome still on its way would be lost
    (the run's end record with it: a run left RUNNING in the history for ever)."""
    ex = BoundedExecutor(1, 1, clock=clock, watchdog=False)
    body = Cancellable()
    delivering, proceed = threading.Event(), threading.Event()
    outcomes = Outcomes()

    def slow_delivery(outcome: RunOutcome) -> None:
        delivering.set()
        proceed.wait(WAIT)
        outcomes(outcome)

    ex.submit("a", body, priority=0, on_done=slow_delivery)
    assert body.started.wait(WAIT)
    assert ex.shutdown(timeout_s=0.05) is False  # the body returned; its outcome is still on its way
    assert delivering.wait(WAIT)
    proceed.set()
    assert ex.shutdown(timeout_s=WAIT) is True
    assert outcomes.of("a")[0].canceled


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
