"""LoopRole.run: a step that raises is logged, counted, remembered and backed off by LOOP_ERROR_RETRY;
only a fenced role, or a misconfigured one (persisting), exits — with a non-zero code."""

from __future__ import annotations

import threading

from prometheus_client import CollectorRegistry

from workers.kafka.errors import BusError
from workers.retry import LOOP_ERROR_RETRY
from workers.role import EXIT_FENCED, EXIT_MISCONFIGURED, EXIT_OK, MISCONFIG_PERSIST_S, LoopRole
from workers.sched.metrics import SchedMetrics


class ScriptedRole(LoopRole):
    """Each turn takes the next entry of ``script``: an exception to raise, or None (a good step);
    when the script is used up the stop event is set."""

    role_name = "test"

    def __init__(
        self, script: list[Exception | None], *, start_errors: list[Exception] | None = None
    ) -> None:
        self.script = list(script)
        self.start_errors = list(start_errors or [])
        self.stop = threading.Event()
        self.metrics = SchedMetrics(CollectorRegistry())
        self.steps = 0
        self.starts = 0
        self.closed = 0

    def loop_metrics(self) -> SchedMetrics:
        return self.metrics

    def start(self) -> None:
        self.starts += 1
        if self.start_errors:
            raise self.start_errors.pop(0)

    def step(self) -> None:
        self.steps += 1
        if not self.script:
            self.stop.set()
            return
        outcome = self.script.pop(0)
        if outcome is not None:
            raise outcome

    def close(self) -> None:
        self.closed += 1

    def errors_counted(self) -> float:
        value = self.metrics.registry.get_sample_value("mvs_loop_errors_total", {"role": "test"})
        return value or 0.0


def test_policy_is_short_doubling_capped_and_unlimited() -> None:
    assert [LOOP_ERROR_RETRY.delay(n) for n in range(1, 9)] == [0.1, 0.2, 0.4, 0.8, 1.6, 3.2, 5.0, 5.0]
    assert LOOP_ERROR_RETRY.max_attempts is None and not LOOP_ERROR_RETRY.exhausted(10_000)


def test_a_step_that_raises_is_survived_backed_off_and_recorded() -> None:
    boom = [RuntimeError(f"bug {i}") for i in range(4)]
    role = ScriptedRole([*boom, None, KeyError("later")])
    waits: list[float] = []
    assert role.run(role.stop, sleep=waits.append) == EXIT_OK
    # four failures in a row: the policy's sequence; a good step resets it (the last failure is #1 again)
    assert waits == [0.1, 0.2, 0.4, 0.8, 0.1]
    assert role.steps == 7 and role.closed == 1
    assert role.errors_counted() == 5
    assert role.last_error is not None
    assert role.last_error.message == "KeyError: 'later'" and role.last_error.consecutive == 1
    assert "Traceback" in role.last_error.traceback and "KeyError" in role.last_error.traceback


def test_a_failing_start_is_retried_before_any_step() -> None:
    role = ScriptedRole([None], start_errors=[BusError("broker away", retriable=True)] * 2)
    waits: list[float] = []
    assert role.run(role.stop, sleep=waits.append) == EXIT_OK
    assert role.starts == 3 and waits == [0.1, 0.2] and role.steps == 2


def test_the_default_wait_is_the_stop_event_so_a_stop_ends_the_backoff_at_once() -> None:
    role = ScriptedRole([RuntimeError("bug")] * 100)
    waited: list[float] = []

    def stop_during_wait(seconds: float) -> None:
        waited.append(seconds)
        role.stop.set()  # SIGTERM while backing off

    assert role.run(role.stop, sleep=stop_during_wait) == EXIT_OK
    assert waited == [0.1] and role.steps == 1 and role.closed == 1


def test_fenced_exits_at_once_with_its_code() -> None:
    role = ScriptedRole([RuntimeError("bug"), BusError("fenced", fatal=True, fenced=True), None])
    waits: list[float] = []
    assert role.run(role.stop, sleep=waits.append) == EXIT_FENCED
    assert waits == [0.1] and role.steps == 2 and role.closed == 1


def test_misconfiguration_exits_only_when_it_persists() -> None:
    denied = BusError("TOPIC_AUTHORIZATION_FAILED", misconfigured=True)
    now = [0.0]

    def clock() -> float:
        return now[0]

    def advance(seconds: float) -> None:
        now[0] += seconds * 100  # each backoff stands for a longer stretch of time

    # 70 s of denials, a good step, 30 s more: the clock of "persisting" started over at the good step
    transient = ScriptedRole([denied] * 3 + [None] + [denied] * 3)
    assert transient.run(transient.stop, sleep=advance, monotonic=clock) == EXIT_OK
    now[0] = 0.0
    persistent = ScriptedRole([denied] * 100)
    assert persistent.run(persistent.stop, sleep=advance, monotonic=clock) == EXIT_MISCONFIGURED
    assert now[0] >= MISCONFIG_PERSIST_S and persistent.closed == 1
    assert persistent.last_error is not None and "AUTHORIZATION" in persistent.last_error.message
