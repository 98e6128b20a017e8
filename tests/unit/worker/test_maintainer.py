"""The maintainer FSM, when it runs: triggers and skips, then failures and retries.

Real scheduling parts around a fake Runner (``maintainer_harness``): pure scheduling logic. No
sleeping: time moves only by ``clock.advance``; runs caught mid-way block on a Gate; every
real-time wait has a deadline (WAIT) so a bug fails the test instead of hanging.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.support.maintainer_harness import (
    WAIT,
    FixedJitter,
    Harness,
    command,
    mv,
)
from workers.catalog.errors import ErrorCode, MvsError
from workers.catalog.lifecycle import TaskState
from workers.retry import REFRESH_RETRY, RetryPolicy
from workers.sched.triggers import ON_CHANGE_POLL_S


@pytest.fixture
def h() -> Iterator[Harness]:
    harness = Harness()
    yield harness
    harness.executor.shutdown(timeout_s=WAIT)


# -- triggers ----------------------------------------------------------------------------------------
def test_first_run_at_once_then_every_interval_from_the_run_start(h: Harness) -> None:
    h.add(mv("a", "EVERY", 60_000))
    t0 = h.clock.monotonic()
    assert h.due.due_at("mv:a") == t0  # a new task runs at once
    gate = h.runner.gate("mv:a")
    assert h.tick(settle=False) == 1
    assert gate.started.wait(WAIT)
    h.clock.advance(10.0)  # the run takes 10 s
    gate.release.set()
    h.settle()
    assert [r["state"] for r in h.records] == ["PENDING", "RUNNING", "COMPLETED"]
    done = h.runs("mv:a")[0]
    assert done["started_at"] == 1_700_000_000_000 and done["ended_at"] == 1_700_000_010_000
    assert done["watermark_after"] == {"t": 1} and done["trigger"] == "SCHEDULE"
    assert h.due.due_at("mv:a") == t0 + 60  # from the start: a long run does not drift the schedule
    h.runner.versions["t"] = 2
    h.clock.advance(49.9)
    assert h.tick() == 0
    h.clock.advance(0.1)
    assert h.tick() == 1
    assert h.refreshes("mv:a") == 2 and h.states("mv:a") == ["COMPLETED", "COMPLETED"]
    assert h.due.due_at("mv:a") == pytest.approx(t0 + 120)


def test_on_demand_runs_once_when_created_then_only_on_refresh_now(h: Harness) -> None:
    m = h.add(mv("d", "ON_DEMAND", None))
    h.tick()
    assert h.refreshes("mv:d") == 1 and "mv:d" not in h.due
    assert m.gauges().next_run_in_s is None
    h.runner.versions["t"] = 2
    for _ in range(24):
        h.clock.advance(3600.0)
        h.tick()
    assert h.refreshes("mv:d") == 1  # a day later: the change waits for the user
    h.send("mv:d", command("REFRESH_NOW", "mv:d", epoch=1))
    h.settle()
    last = h.runs("mv:d")[-1]
    assert (last["trigger"], last["state"], last["watermark_after"]) == ("MANUAL", "COMPLETED", {"t": 2})
    assert "mv:d" not in h.due
    h.send("mv:d", command("REFRESH_NOW", "mv:d", epoch=1))  # nothing changed since
    h.settle()
    assert h.refreshes("mv:d") == 2
    assert h.runs("mv:d")[-1]["state"] == "SKIPPED"


def test_on_change_polls_silently_and_runs_when_a_base_version_moves(h: Harness) -> None:
    h.add(mv("c", "ON_CHANGE", None))
    h.tick()
    assert h.refreshes("mv:c") == 1
    records, reads = len(h.records), h.runner.version_reads
    h.dirty.clear()
    for _ in range(5):
        h.clock.advance(ON_CHANGE_POLL_S)
        assert h.tick() == 1  # a poll
        assert h.due.due_at("mv:c") == h.clock.monotonic() + ON_CHANGE_POLL_S
    assert h.runner.version_reads == reads + 5
    assert len(h.records) == records and h.dirty == set()  # no history, no heartbeat noise
    assert h.refreshes("mv:c") == 1
    h.runner.versions["t"] = 7
    h.clock.advance(ON_CHANGE_POLL_S)
    h.tick()
    assert h.refreshes("mv:c") == 2
    assert h.runs("mv:c")[-1]["watermark_after"] == {"t": 7}


def test_target_lag_schedules_by_the_age_of_the_pinned_data(h: Harness) -> None:
    m = h.add(mv("g", "TARGET_LAG", 60_000))
    t0 = h.clock.monotonic()
    gate = h.runner.gate("mv:g")
    h.tick(settle=False)
    assert gate.started.wait(WAIT)
    h.clock.advance(5.0)  # the refresh takes 5 s; its data is as of t0, when it pinned the versions
    gate.release.set()
    h.settle()
    # due = data time + target − expected duration, so the next result lands before the lag passes 60 s
    assert h.due.due_at("mv:g") == pytest.approx(t0 + 60 - 5)
    gauges = m.gauges()
    assert gauges.lag_s == pytest.approx(5.0) and gauges.next_run_in_s == pytest.approx(50.0)
    h.clock.advance(50.0)
    h.tick()  # due, base unchanged: no job, and the MV is current as of now
    assert h.refreshes("mv:g") == 1 and h.runs("mv:g")[-1]["state"] == "SKIPPED"
    assert m.gauges().lag_s == 0.0
    assert h.due.due_at("mv:g") == pytest.approx(h.clock.monotonic() + 55)
    h.runner.versions["t"] = 2
    h.clock.advance(55.0)
    h.tick()
    assert h.refreshes("mv:g") == 2 and h.runs("mv:g")[-1]["watermark_after"] == {"t": 2}


def test_due_refresh_with_unchanged_base_runs_no_job_and_records_a_skip(h: Harness) -> None:
    h.add(mv("s", "EVERY", 10_000))
    h.tick()
    h.clock.advance(10.0)
    assert h.tick() == 1
    assert h.refreshes("mv:s") == 1
    skipped = h.runs("mv:s")[-1]
    assert (skipped["state"], skipped["message"], skipped["trigger"]) == (
        "SKIPPED",
        "skipped: no change",
        "SCHEDULE",
    )
    assert skipped["watermark_before"] == skipped["watermark_after"] == {"t": 1}
    assert skipped["ended_at"] is not None and skipped["rows_written"] == 0
    assert h.metrics.registry.get_sample_value("mvs_sched_skipped_total", {"reason": "no_change"}) == 1
    assert h.due.due_at("mv:s") == h.clock.monotonic() + 10


# -- failures and retries ------------------------------------------------------------------------------
def test_retryable_failure_warns_and_backs_off_exactly() -> None:
    h = Harness(retry=REFRESH_RETRY, rng=FixedJitter())
    try:
        h.runner.fail("mv:r", *[MvsError(ErrorCode.STORAGE_UNAVAILABLE, "disk away")] * 3)
        m = h.add(mv("r", "EVERY", 3_600_000))
        h.tick()
        for delay in (5.25, 10.25, 20.25):  # 5 s doubling, + a quarter of the 1 s jitter
            assert m.state is TaskState.WARNING and m.error is not None and m.error["code"] == 2001
            assert h.due.due_at("mv:r") == pytest.approx(h.clock.monotonic() + delay)
            h.clock.advance(delay - 0.01)
            assert h.tick() == 0
            h.clock.advance(0.01)
            assert h.tick() == 1
        assert m.state is TaskState.NORMAL and m.error is None and m.attempt == 0
        assert h.states("mv:r") == ["ERROR", "ERROR", "ERROR", "COMPLETED"]
        assert h.runs("mv:r")[0]["error"]["retryable"] is True
    finally:
        h.executor.shutdown(timeout_s=WAIT)


def test_a_retry_reads_no_base_version_on_the_loop_thread_its_run_does() -> None:
    """The storage that failed the run may still be away: a look at the bases from the loop would
    hold every task of the worker (and its heartbeats) for the storage client's retries."""
    h = Harness(retry=REFRESH_RETRY, rng=FixedJitter())
    try:
        m = h.add(mv("r", "EVERY", 10_000))
        h.tick()
        h.runner.versions["t"] = 2
        h.runner.fail("mv:r", MvsError(ErrorCode.STORAGE_UNAVAILABLE, "object store away"))
        h.clock.advance(10.0)
        h.tick()
        assert m.state is TaskState.WARNING and h.runner.version_reads == 1
        h.clock.advance(5.25)
        assert h.tick() == 1
        assert h.runner.version_reads == 1, "the retry went straight to a run"
        assert m.state is TaskState.NORMAL and h.states("mv:r")[-2:] == ["ERROR", "COMPLETED"]
    finally:
        h.executor.shutdown(timeout_s=WAIT)


def test_permanent_failure_fails_the_task_and_schedules_nothing(h: Harness) -> None:
    h.runner.fail("mv:p", MvsError(ErrorCode.INVALID_CONFIG, "column nope does not exist"))
    m = h.add(mv("p", "EVERY", 10_000))
    h.tick()
    assert m.state is TaskState.FAILED and m.error is not None and m.error["code"] == 1001
    assert "mv:p" not in h.due and m.status()["next_run_at"] is None
    h.clock.advance(3600.0)
    h.tick()
    h.send("mv:p", command("REFRESH_NOW", "mv:p", epoch=1))  # a failed task can only be dropped
    h.settle()
    assert h.refreshes("mv:p") == 1 and h.states("mv:p") == ["ERROR"]


def test_retries_exhausted_fail_the_task() -> None:
    policy = RetryPolicy("three", base_s=1.0, cap_s=1.0, jitter_s=0.0, max_attempts=3)
    h = Harness(retry=policy)
    try:
        h.runner.fail("mv:x", *[RuntimeError("executor lost")] * 5)
        m = h.add(mv("x", "EVERY", 60_000))
        h.tick()
        for _ in range(2):
            assert m.state is TaskState.WARNING
            h.clock.advance(1.0)
            h.tick()
        assert m.state is TaskState.FAILED and "mv:x" not in h.due
        assert m.error is not None and m.error["code"] == 4001 and "RuntimeError" in m.error["message"]
        h.clock.advance(600.0)
        h.tick()
        assert h.refreshes("mv:x") == 3
    finally:
        h.executor.shutdown(timeout_s=WAIT)


def test_timed_out_run_is_cancelled_recorded_and_retried() -> None:
    h = Harness(timeout_s=30.0, rng=FixedJitter())
    try:
        m = h.add(mv("slow", "EVERY", 3_600_000))
        gate = h.runner.gate("mv:slow", stubborn=True)  # a body that ignores its cancellation
        h.tick(settle=False)
        assert gate.started.wait(WAIT)
        h.clock.advance(30.0)
        assert h.executor.check_timeouts() == ["mv:slow"]
        assert h.runner.cancelled == [h.runner.calls[0].job_group]  # the Spark job group is cancelled
        h.clock.advance(2.0)  # a busy loop gets to the outcome late: the record keeps the run's times
        h.mail.run_pending()
        failed = h.runs("mv:slow")[-1]
        assert failed["state"] == "ERROR" and "exceeded its timeout of 30s" in failed["message"]
        assert failed["ended_at"] - failed["started_at"] == 30_000
        assert failed["error"]["at"] == failed["ended_at"]  # the task's error is as old as the run's end
        assert m.state is TaskState.WARNING and h.due.due_at("mv:slow") == pytest.approx(1037.25)
        assert h.executor.metrics().timeout == 1 and h.executor.metrics().running == 0  # slot free
        gate.release.set()  # the body returns late: its result is dropped
        h.settle()
        assert h.states("mv:slow") == ["ERROR"]
    finally:
        h.executor.shutdown(timeout_s=WAIT)
