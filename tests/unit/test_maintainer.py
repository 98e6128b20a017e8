"""The maintainer FSM: triggers, skips, retries, epochs, priorities, rejections, timeouts.

Real scheduling parts (ManualClock, DueQueue, BoundedExecutor without its watchdog, a
BatchSystem handled on the test thread) around a fake Runner: this is pure scheduling logic.
No sleeping: time moves only by ``clock.advance``; runs that must be caught mid-way block on
a Gate; every real-time wait has a deadline (WAIT) so a bug fails the test instead of hanging.
"""

from __future__ import annotations

import random
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from workers.catalog.errors import ErrorCode, MvsError
from workers.catalog.lifecycle import TaskState
from workers.coordinator.handlers import Context, maintainer_command, new_task
from workers.jobs.errors import RunCancelled
from workers.sched.clock import ManualClock
from workers.sched.due import DueQueue
from workers.sched.executor import BoundedExecutor
from workers.sched.mailbox import BatchSystem
from workers.sched.metrics import SchedMetrics
from workers.sched.retry import REFRESH_RETRY, RetryPolicy
from workers.sched.triggers import MIN_RUN_SPACING_S, ON_CHANGE_POLL_S
from workers.worker.maintainer import Command, Due, Maintainer, MaintainerEnv, Stop, Update
from workers.worker.runner import RunResult

WAIT = 5.0
Record = dict[str, Any]


# -- the fake runner ------------------------------------------------------------------------------
class Gate:
    """Makes one run block until released; a cancel releases it (unless ``stubborn``)."""

    def __init__(self, *, stubborn: bool = False) -> None:
        self.started = threading.Event()
        self.release = threading.Event()
        self.stubborn = stubborn
        self.cancelled = False

    def cancel(self) -> None:
        self.cancelled = True
        if not self.stubborn:
            self.release.set()

    def pass_through(self) -> None:
        self.started.set()
        assert self.release.wait(WAIT), "gate never released"
        if self.cancelled and not self.stubborn:
            raise RunCancelled("cancelled")


@dataclass(frozen=True)
class Call:
    kind: str
    task_id: str
    epoch: int
    job_group: str
    started: float


class FakeRunner:
    """Base tables are a dict of versions; a refresh reflects them. Failures and gates are scripted."""

    def __init__(self, clock: ManualClock) -> None:
        self.clock = clock
        self.versions: dict[str, int] = {"t": 1}
        self.calls: list[Call] = []
        self.version_reads = 0
        self.cancelled: list[str] = []
        self._lock = threading.Lock()
        self._errors: dict[str, list[BaseException]] = {}
        self._gates: dict[str, Gate] = {}
        self._active: dict[str, Gate] = {}

    def fail(self, task_id: str, *errors: BaseException) -> None:
        self._errors.setdefault(task_id, []).extend(errors)

    def gate(self, task_id: str, *, stubborn: bool = False) -> Gate:
        gate = self._gates[task_id] = Gate(stubborn=stubborn)
        return gate

    def base_versions(self, tables: list[str]) -> dict[str, int]:
        with self._lock:
            self.version_reads += 1
            return {t: self.versions[t] for t in tables}

    def _run(self, kind: str, task: Record, job_group: str) -> dict[str, int]:
        """Pins the base versions first (as the real refresh does), then blocks/fails as scripted."""
        task_id = task["task_id"]
        with self._lock:
            self.calls.append(Call(kind, task_id, task["epoch"], job_group, self.clock.monotonic()))
            pinned = {t: self.versions[t] for t in (task["mv"] or {}).get("base_tables", [])}
            gate = self._gates.pop(task_id, None)
            errors = self._errors.get(task_id)
            error = errors.pop(0) if errors else None
            if gate is not None:
                self._active[job_group] = gate
        if gate is not None:
            gate.pass_through()
        if error is not None:
            raise error
        return pinned

    def refresh(self, task: Record, *, run_id: str, job_group: str) -> RunResult:
        pinned = self._run("refresh", task, job_group)
        return RunResult("COMPLETED", 3, {}, pinned, "wrote 3 rows")

    def purge(self, task: Record, *, safepoint: int | None, run_id: str, job_group: str) -> RunResult:
        self._run("purge", task, job_group)
        return RunResult("COMPLETED", 0, {}, {}, "purged")

    def cancel(self, job_group: str) -> None:
        with self._lock:
            self.cancelled.append(job_group)
            gate = self._active.get(job_group)
        if gate is not None:
            gate.cancel()

    def drop(self, task: Record) -> None:
        pass


# -- the harness ----------------------------------------------------------------------------------
class Harness:
    """What the manager gives its maintainers, with the manager's tick: due keys → Due messages."""

    def __init__(
        self,
        *,
        slots: int = 2,
        queue: int = 16,
        retry: RetryPolicy = REFRESH_RETRY,
        rng: random.Random | None = None,
        timeout_s: float = 600.0,
    ) -> None:
        self.clock = ManualClock(start=1000.0, wall_start_ms=1_700_000_000_000)
        self.executor = BoundedExecutor(slots, queue, clock=self.clock, watchdog=False)
        self.due: DueQueue[str] = DueQueue()
        self.mail = BatchSystem(pollers=1, name="test")  # never started: handled on this thread
        self.runner = FakeRunner(self.clock)
        self.records: list[Record] = []
        self.dirty: set[str] = set()
        self.metrics = SchedMetrics(CollectorRegistry())
        self.env = MaintainerEnv(
            worker_id="w1",
            clock=self.clock,
            executor=self.executor,
            due=self.due,
            runner=self.runner,
            send_to_self=self.mail.send,
            publish=lambda topic, key, record: self.records.append(record),
            status_changed=self.dirty.add,
            run_timeout_s=timeout_s,
            retry=retry,
            metrics=self.metrics,
            rng=rng if rng is not None else random.Random(0),
        )

    def add(self, task: Record) -> Maintainer:
        maintainer = Maintainer(task, self.env)
        self.mail.register(maintainer.task_id, maintainer)
        return maintainer

    def send(self, task_id: str, message: object) -> None:
        assert self.mail.send(task_id, message)
        self.mail.run_pending()

    def tick(self, *, settle: bool = True) -> int:
        due = self.due.pop_due(self.clock.monotonic())
        for task_id in due:
            self.mail.send(task_id, Due())
        self.mail.run_pending()
        if settle:
            self.settle()
        return len(due)

    def settle(self) -> None:
        """Until every run ended and every outcome was handled (handling may start more runs)."""
        while True:
            assert self.executor.wait_idle(timeout_s=WAIT), "runs never finished"
            if self.mail.run_pending() == 0:
                return

    def runs(self, task_id: str) -> list[Record]:
        """The last record of each run of ``task_id``, in start order (as ``mvs history`` shows)."""
        latest: dict[str, Record] = {}
        for record in self.records:
            if record["task_id"] == task_id:
                latest[record["run_id"]] = record
        return list(latest.values())

    def states(self, task_id: str) -> list[str]:
        return [r["state"] for r in self.runs(task_id)]

    def refreshes(self, task_id: str) -> int:
        return len([c for c in self.runner.calls if c.task_id == task_id])


@pytest.fixture
def h() -> Iterator[Harness]:
    harness = Harness()
    yield harness
    harness.executor.shutdown(timeout_s=WAIT)


CTX = Context(now_ms=0, coordinator_epoch=1, table_exists=lambda table: True)


def mv(
    name: str, kind: str = "EVERY", interval_ms: int | None = 60_000, *, epoch: int = 1, base: str = "t"
) -> Record:
    spec = {
        "query": f"SELECT * FROM {base}",
        "refresh_mode": "COMPLETE",
        "trigger": {"kind": kind, "interval_ms": interval_ms},
        "base_tables": [base],
    }
    return {**new_task(f"mv:{name}", "MV", name, CTX, mv=spec), "epoch": epoch}


def mv_log(base: str, purge_interval_ms: int) -> Record:
    spec = {"base_table": base, "purge_interval_ms": purge_interval_ms}
    return new_task(f"mvlog:{base}", "MV_LOG", base, CTX, mv_log=spec)


def command(kind: str, task_id: str, epoch: int) -> Command:
    return Command(maintainer_command(kind, {"task_id": task_id, "epoch": epoch}, CTX))


class FixedJitter(random.Random):
    """Jitter is always a quarter of its range, so the backoff sequence is exact."""

    def uniform(self, a: float, b: float) -> float:
        return a + 0.25 * (b - a)


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
        h.mail.run_pending()
        failed = h.runs("mv:slow")[-1]
        assert failed["state"] == "ERROR" and "exceeded its timeout of 30s" in failed["message"]
        assert m.state is TaskState.WARNING and h.due.due_at("mv:slow") == pytest.approx(1035.25)
        assert h.executor.metrics().timeout == 1 and h.executor.metrics().running == 0  # slot free
        gate.release.set()  # the body returns late: its result is dropped
        h.settle()
        assert h.states("mv:slow") == ["ERROR"]
    finally:
        h.executor.shutdown(timeout_s=WAIT)


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
    h = Harness(slots=1, queue=1)  # room for the running run only
    try:
        h.add(mv("blocker", "EVERY", 3_600_000))
        gate = h.runner.gate("mv:blocker")
        h.tick(settle=False)
        assert gate.started.wait(WAIT)
        m = h.add(mv("late", "EVERY", 3_600_000))
        h.tick(settle=False)
        rejected = h.runs("mv:late")[-1]
        assert rejected["state"] == "ERROR" and "queue is full" in rejected["message"]
        assert m.state is TaskState.NORMAL and m.attempt == 0  # capacity is not the task's failure
        assert h.executor.metrics().rejected == 1
        assert h.due.due_at("mv:late") == pytest.approx(h.clock.monotonic() + 1.0)
        gate.release.set()
        h.settle()
        h.clock.advance(1.0)
        h.tick()
        assert h.states("mv:late") == ["ERROR", "COMPLETED"]
    finally:
        h.executor.shutdown(timeout_s=WAIT)
