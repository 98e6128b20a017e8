"""The maintainer FSM, around its runs: triggers, commands and epochs meeting a run, next-time
validation, priorities and a full executor. Same harness and rules as test_maintainer.py.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.unit.maintainer_harness import (
    WAIT,
    Harness,
    Record,
    command,
    mv,
    mv_log,
)
from workers.catalog.lifecycle import TaskState
from workers.sched.executor_types import SubmitStatus
from workers.sched.triggers import MIN_RUN_SPACING_S
from workers.worker.maintainer import Due, Stop, Update


@pytest.fixture
def h() -> Iterator[Harness]:
    harness = Harness()
    yield harness
    harness.executor.shutdown(timeout_s=WAIT)


# -- runs meeting triggers, commands and epochs -------------------------------------------------------
def test_triggers_while_running_give_exactly_one_more_run(h: Harness) -> None:
    h.add(mv("b", "EVERY", 3_600_000))
    gate = h.runner.gate("mv:b")
    h.tick(settle=False)
    assert gate.started.wait(WAIT)
    for _ in range(3):
        h.send("mv:b", command("REFRESH_NOW", "mv:b", epoch=1))
    h.runner.versions["t"] = 2
    gate.release.set()
    h.settle()
    assert h.refreshes("mv:b") == 2
    assert [r["trigger"] for r in h.runs("mv:b")] == ["SCHEDULE", "MANUAL"]
    assert h.runs("mv:b")[-1]["watermark_after"] == {"t": 2}
    assert h.due.due_at("mv:b") is not None  # back on its schedule


def test_trigger_while_queued_is_served_by_the_queued_run() -> None:
    h = Harness(slots=1)
    try:
        h.add(mv("blocker", "EVERY", 3_600_000))
        gate = h.runner.gate("mv:blocker")
        h.tick(settle=False)
        assert gate.started.wait(WAIT)
        h.add(mv("q", "EVERY", 3_600_000))
        h.tick(settle=False)  # queued behind the blocker
        h.send("mv:q", command("REFRESH_NOW", "mv:q", epoch=1))
        gate.release.set()
        h.settle()
        assert h.refreshes("mv:q") == 1  # it had not started: the queued run serves the request
        assert [r["trigger"] for r in h.runs("mv:q")] == ["MANUAL"]
    finally:
        h.executor.shutdown(timeout_s=WAIT)


def test_stale_commands_are_ignored(h: Harness) -> None:
    h.add(mv("e", "ON_DEMAND", None, epoch=3))
    h.tick()
    h.runner.versions["t"] = 2
    h.send("mv:e", command("REFRESH_NOW", "mv:e", epoch=2))
    h.settle()
    assert h.refreshes("mv:e") == 1
    gate = h.runner.gate("mv:e")
    h.send("mv:e", command("REFRESH_NOW", "mv:e", epoch=3))
    assert gate.started.wait(WAIT)
    h.send("mv:e", command("CANCEL_RUN", "mv:e", epoch=2))
    assert h.runner.cancelled == []
    gate.release.set()
    h.settle()
    assert h.states("mv:e") == ["COMPLETED", "COMPLETED"]


def test_cancel_run_command_cancels_the_running_job(h: Harness) -> None:
    h.add(mv("k", "EVERY", 60_000))
    gate = h.runner.gate("mv:k")
    h.tick(settle=False)
    assert gate.started.wait(WAIT)
    h.send("mv:k", command("CANCEL_RUN", "mv:k", epoch=1))
    h.settle()
    assert h.runner.cancelled == [h.runner.calls[0].job_group]
    assert h.states("mv:k") == ["CANCELED"]
    assert h.due.due_at("mv:k") == pytest.approx(1000.0 + 60)  # the schedule goes on


def test_update_with_a_newer_epoch_supersedes_the_running_run(h: Harness) -> None:
    m = h.add(mv("u", "EVERY", 60_000, epoch=1))
    gate = h.runner.gate("mv:u", stubborn=True)  # keeps going a while after its cancel
    h.tick(settle=False)
    assert gate.started.wait(WAIT)
    h.send("mv:u", Update(mv("u", "EVERY", 30_000, epoch=2)))
    old_group = h.runner.calls[0].job_group
    assert h.runner.cancelled == [old_group]
    h.clock.advance(MIN_RUN_SPACING_S)
    h.tick(settle=False)  # the new epoch is due while the old run is still winding down
    gate.release.set()
    h.settle()
    runs = h.runs("mv:u")
    assert [(r["epoch"], r["state"]) for r in runs] == [(1, "CANCELED"), (2, "COMPLETED")]
    assert h.refreshes("mv:u") == 2 and m.watermark_epoch == 2
    assert h.due.due_at("mv:u") == pytest.approx(h.runner.calls[1].started + 30)
    h.send("mv:u", Update(mv("u", "EVERY", 5_000, epoch=1)))  # stale: ignored
    assert m.task["mv"]["trigger"]["interval_ms"] == 30_000


def test_stop_cancels_the_run_and_ends_the_schedule(h: Harness) -> None:
    h.add(mv("z", "EVERY", 1_000))
    gate = h.runner.gate("mv:z")
    h.tick(settle=False)
    assert gate.started.wait(WAIT)
    h.send("mv:z", Stop())
    h.settle()
    assert h.states("mv:z") == ["CANCELED"] and "mv:z" not in h.due
    h.send("mv:z", Due())
    h.clock.advance(60.0)
    h.tick()
    assert h.refreshes("mv:z") == 1


# -- next-time validation (seed 000 risk 2) -------------------------------------------------------------
def test_tiny_interval_never_loops_faster_than_the_minimum_spacing(h: Harness) -> None:
    h.add(mv("f", "EVERY", 1))  # 1 ms
    for version in range(100):
        h.runner.versions["t"] = version  # always changed: every due time really runs
        h.tick()
        h.clock.advance(0.1)
    starts = [c.started for c in h.runner.calls]
    assert 9 <= len(starts) <= 11  # 10 s of ticks: one run a second, not one per tick
    assert all(b - a >= MIN_RUN_SPACING_S - 1e-9 for a, b in zip(starts, starts[1:], strict=False))


@pytest.mark.parametrize("task", [mv("zero", "EVERY", 0), mv("neg", "TARGET_LAG", -5), mv_log("t", 0)])
def test_invalid_interval_fails_the_task_instead_of_re_triggering(h: Harness, task: Record) -> None:
    m = h.add(task)
    for _ in range(20):
        h.tick()
        h.clock.advance(0.5)
    assert len(h.runner.calls) == 1
    assert m.state is TaskState.FAILED and m.error is not None and m.error["code"] == 1001
    assert "cannot schedule" in m.error["message"] and m.task_id not in h.due


def test_far_future_next_time_is_pulled_in(h: Harness) -> None:
    h.add(mv("far", "EVERY", 10**15))  # ~31,700 years
    h.tick()
    due = h.due.due_at("mv:far")
    assert due is not None and due <= h.clock.monotonic() + MIN_RUN_SPACING_S + 366 * 86400


# -- priorities and capacity ---------------------------------------------------------------------------
def test_priorities_through_a_one_slot_executor() -> None:
    h = Harness(slots=1, queue=16)
    try:
        h.runner.versions["u"] = 1
        h.add(mv("blocker", "EVERY", 3_600_000))
        gate = h.runner.gate("mv:blocker")
        h.tick(settle=False)
        assert gate.started.wait(WAIT)
        for task in (
            mv_log("t", 3_600_000),
            mv("every", "EVERY", 3_600_000),
            mv("lag", "TARGET_LAG", 3_600_000),
            mv("change", "ON_CHANGE", None),
            mv("manual", "ON_DEMAND", None, base="u"),
        ):
            h.add(task)
        h.tick(settle=False)  # all queued behind the blocker, in this (due) order
        h.send("mv:manual", command("REFRESH_NOW", "mv:manual", epoch=1))
        gate.release.set()
        h.settle()
        order = [c.task_id for c in h.runner.calls[1:]]
        assert order == ["mv:manual", "mv:lag", "mv:change", "mv:every", "mvlog:t"]
    finally:
        h.executor.shutdown(timeout_s=WAIT)


def test_rejected_submission_is_recorded_and_retried() -> None:
    h = Harness(slots=1, queue=1)
    try:
        h.add(mv("blocker", "EVERY", 3_600_000))
        gate = h.runner.gate("mv:blocker")
        h.tick(settle=False)
        assert gate.started.wait(WAIT)
        m = h.add(mv("late", "EVERY", 3_600_000))  # the host makes room for 2 runs: one per task
        outsider = h.runner.gate("outsider")
        assert (
            h.executor.submit("outsider", lambda _t: outsider.pass_through(), priority=0)
            is SubmitStatus.ACCEPTED
        )
        h.tick(settle=False)  # no room left for "late"
        rejected = h.runs("mv:late")[-1]
        assert rejected["state"] == "ERROR" and "queue is full" in rejected["message"]
        assert m.state is TaskState.NORMAL and m.attempt == 0  # capacity is not the task's failure
        assert h.executor.metrics().rejected == 1
        assert h.due.due_at("mv:late") == pytest.approx(h.clock.monotonic() + 1.0)
        gate.release.set()
        outsider.release.set()
        h.settle()
        h.clock.advance(1.0)
        h.tick()
        assert h.states("mv:late") == ["ERROR", "COMPLETED"]
    finally:
        h.executor.shutdown(timeout_s=WAIT)
