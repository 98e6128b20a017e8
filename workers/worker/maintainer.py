"""One maintainer per owned task: an FSM driven by the messages in its mailbox (seed 004).

Only the maintainer changes its task's schedule, retry count and run state (seed 000 risk 3):
the manager and the executor reach it by sending messages. It never publishes; it appends
the records to send to its manager's outbox, and the manager's loop publishes them.

A run's life in the history (seed 001): PENDING when handed to the executor, RUNNING when its
body starts, then COMPLETED / SKIPPED / ERROR / CANCELED. A due refresh whose base tables are
still at the versions the MV reflects runs no job: it is recorded SKIPPED ("skipped: no change"),
except the polls of an ON CHANGE task, which look again silently.
"""

from __future__ import annotations

import logging
import random
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from workers.catalog.errors import ErrorCode, MvsError
from workers.catalog.lifecycle import RUNNABLE, TaskState
from workers.catalog.specs import ON_CHANGE
from workers.jobs import with_plan
from workers.records import Record, run_summary
from workers.retry import REFRESH_RETRY, RetryPolicy
from workers.sched.clock import Clock
from workers.sched.due import DueQueue, validate_next_due
from workers.sched.executor import BoundedExecutor, CancelToken, RunOutcome, SubmitStatus
from workers.sched.gauges import TaskGauges
from workers.sched.triggers import MIN_RUN_SPACING_S, data_lag_s
from workers.worker.decision import Decision, unchanged
from workers.worker.messages import Command, Due, RunContext, RunFinished, RunStarted, Stop, Update
from workers.worker.run_records import NOTHING_MORE, RunEnd, run_failure, run_record, was_cancelled
from workers.worker.runner import Runner, RunResult
from workers.worker.schedule import (
    MANUAL,
    SCHEDULE,
    due_again,
    more_urgent,
    next_due,
    run_priority,
    trigger_kind,
)
from workers.worker.upstreams import WAIT_POLL_S, waiting_reason

if TYPE_CHECKING:  # the metrics module pulls in prometheus_client; the FSM only calls it
    from workers.sched.metrics import SchedMetrics

log = logging.getLogger(__name__)
REJECTED_RETRY_S = 1.0
# Reasons of validate_next_due that mean a bug or a bad record (not just "due now"): worth a warning.
_INVALID_DUE = frozenset({"missing", "nan", "zero", "too_far"})
# The messages are defined with the mailbox; the manager imports them from here too.
__all__ = ["Command", "Due", "Maintainer", "MaintainerEnv", "RunFinished", "RunStarted", "Stop", "Update"]


@dataclass
class MaintainerEnv:
    """What a maintainer may use; the manager owns all of it."""

    worker_id: str
    clock: Clock
    executor: BoundedExecutor
    due: DueQueue[str]
    runner: Runner
    send_to_self: Callable[[str, Any], bool]  # mailbox of a maintainer, by task id
    publish: Callable[[str, str, Record], None]  # (logical topic, key, record) into the outbox
    status_changed: Callable[[str], None]
    # The task's state changed (WARNING at a first failed run, NORMAL again, FAILED): heartbeat at once,
    # not at the next period, so the catalog says so as soon as the run's record does.
    report_now: Callable[[], None] = lambda: None
    run_timeout_s: float = 600.0
    retry: RetryPolicy = REFRESH_RETRY
    metrics: SchedMetrics | None = None
    rng: random.Random | None = None  # retry jitter; tests fix it


@dataclass
class Maintainer:
    task: Record
    env: MaintainerEnv
    watermark: dict[str, int] = field(default_factory=dict)
    watermark_epoch: int | None = None  # the epoch whose run produced ``watermark`` (None: restored)
    last_run: Record | None = None
    error: Record | None = None
    attempt: int = 0  # consecutive failed runs
    running: RunContext | None = None
    pending_trigger: str | None = None  # a trigger that arrived while running: one more run after it
    safepoint: int | None = None
    stopped: bool = False
    last_started: float | None = None  # scheduling clock: last run start, or last no-change decision
    data_time: float | None = None  # scheduling clock: the MV's content is current as of this time
    last_duration: float | None = None  # of the last successful run (TARGET_LAG's margin)

    def __post_init__(self) -> None:
        self.task = with_plan(self.task)  # the query's analysis, once per task: runs never parse it
        # The watermark is the record's ``checkpoint`` field (TaskRecord, MaintainerStatus).
        self.watermark = dict(self.task.get("checkpoint") or {})
        self.safepoint = self.task.get("safepoint")
        self.error = self.task.get("error")
        self.last_run = self.task.get("last_run")
        if self.runnable:
            self._schedule_at(self.env.clock.monotonic())  # a (re)started task runs at once

    @property
    def task_id(self) -> str:
        return str(self.task["task_id"])

    @property
    def state(self) -> TaskState:
        return TaskState(self.task["state"])

    @property
    def runnable(self) -> bool:
        return self.state in RUNNABLE and not self.stopped

    # -- FSM ---------------------------------------------------------------------------------------
    def handle(self, messages: list[Any]) -> None:
        for message in messages:
            if isinstance(message, Due):
                self._on_due(SCHEDULE)
            elif isinstance(message, Command):
                self._on_command(message.record)
            elif isinstance(message, Update):
                self._on_update(message.task)
            elif isinstance(message, RunStarted):
                self._on_run_started(message.run, message.started)
            elif isinstance(message, RunFinished):
                self._on_run_finished(message.run, message.outcome)
            elif isinstance(message, Stop):
                self._on_stop()

    def _on_due(self, trigger: str) -> None:
        if not self.runnable:
            return
        if self.running is not None:
            if self.env.executor.promote(self.task_id, run_priority(self.task, trigger)):
                # Not started yet: the queued run reads the base tables when it starts, so it
                # serves this trigger too, now at the more urgent priority.
                if more_urgent(trigger, self.running.trigger):
                    self.running = replace(self.running, trigger=trigger)
                return
            # Started: however many triggers arrive during a run, exactly one more run follows it.
            if more_urgent(trigger, self.pending_trigger):
                self.pending_trigger = trigger
            return
        self._start_run(trigger)

    def _on_command(self, command: Record) -> None:
        if command["epoch"] < self.task["epoch"]:
            log.info(
                "%s: ignoring stale %s (epoch %s < %s)",
                self.task_id,
                command["kind"],
                command["epoch"],
                self.task["epoch"],
            )
            return
        kind = command["kind"]
        if kind == "REFRESH_NOW":
            self._on_due(MANUAL)
        elif kind == "CANCEL_RUN":
            self.pending_trigger = None
            if self.running is not None:
                self.env.executor.cancel(self.task_id)
        elif kind == "SAFEPOINT":
            self.safepoint = command["safepoint"]

    def _on_update(self, task: Record) -> None:
        if task["epoch"] <= self.task["epoch"]:
            return  # a replayed or stale command: the maintainer already has this epoch or newer
        self.task = with_plan(task)
        self.attempt = 0
        self.error = task.get("error")
        self.safepoint = task.get("safepoint", self.safepoint)
        self.pending_trigger = None
        if self.running is not None:
            self.env.executor.cancel(self.task_id)  # the old epoch's run is superseded
        if self.runnable:
            self._schedule_at(self.env.clock.monotonic())  # the new epoch runs at once (after the old run)
        else:
            self.env.due.remove(self.task_id)
        self.env.status_changed(self.task_id)

    def _on_stop(self) -> None:
        self.stopped = True
        self.pending_trigger = None
        self.env.due.remove(self.task_id)
        if self.running is not None:
            self.env.executor.cancel(self.task_id)

    # -- runs --------------------------------------------------------------------------------------
    def _start_run(self, trigger: str) -> None:
        now = self.env.clock.monotonic()
        run_id, wall_ms = new_run_id(), self.env.clock.wall_ms()
        run = RunContext(run_id, self.task["epoch"], trigger, wall_ms, dict(self.watermark))
        # Not while retrying a failed run: the look runs on the loop thread, the storage may be away.
        waiting = None if self.attempt else waiting_reason(self.task, self._table_exists)
        if waiting is not None:
            # Said once per reason (the run record, hence ``mvs status``), then looked at again quietly.
            if (self.last_run or {}).get("message") != waiting:
                self._record_run(run, "SKIPPED", end=RunEnd(rows=0, after=self.watermark, message=waiting))
            self._schedule_at(now + WAIT_POLL_S, notify=False)
            return
        skip = self._skip_unchanged() if self.task["kind"] == "MV" else None
        if skip is not None:
            # The MV reflects the base tables as they are now: fresh as of now, nothing to run.
            self.last_started = self.data_time = now
            silent = trigger == SCHEDULE and trigger_kind(self.task) == ON_CHANGE
            if not silent:  # an ON CHANGE poll just looks again; any other due refresh says so
                self._record_run(
                    run, "SKIPPED", end=RunEnd(rows=0, after=self.watermark, message=skip.reason)
                )
                if self.env.metrics is not None:
                    self.env.metrics.record_skip("no_change")
            self._schedule_next(notify=not silent)
            return
        task, safepoint = dict(self.task), self.safepoint
        runner, clock, send = self.env.runner, self.env.clock, self.env.send_to_self
        task_id = self.task_id

        def body(_token: CancelToken) -> RunResult:
            send(task_id, RunStarted(run, clock.monotonic()))
            if task["kind"] == "MV":
                return runner.refresh(task, run_id=run.run_id, job_group=run.job_group)
            return runner.purge(task, safepoint=safepoint, run_id=run.run_id, job_group=run.job_group)

        # Still queued when the task is due again: the executor counts that due run turned away
        # (the worker cannot carry its load); this run keeps its place and serves it.
        start_by = due_again(self.task, now=now, data_time=self.data_time, last_duration=self.last_duration)
        status = self.env.executor.submit(
            task_id,
            body,
            priority=run_priority(self.task, trigger),
            timeout_s=self.env.run_timeout_s,
            on_done=lambda outcome: None if send(task_id, RunFinished(run, outcome)) else None,
            on_cancel=lambda: runner.cancel(run.job_group),
            start_by=start_by,
        )
        # COALESCED (the previous outcome is still being delivered) runs right after it, as ACCEPTED.
        if status is SubmitStatus.REJECTED:
            # The worker's queue is full (it holds a run of every task this worker owns, so only
            # something beside them fills it) or closed: not the task's fault, no retry budget spent.
            self._record_run(
                run, "ERROR", end=RunEnd(message="rejected: the worker's run queue is full; retrying")
            )
            self._schedule_at(now + REJECTED_RETRY_S)
            return
        self.running = run
        self.env.due.remove(self.task_id)
        self._record_run(run, "PENDING")

    def _table_exists(self, name: str) -> bool:
        """Whether table ``name`` has a Delta log (a storage error counts as yes: the run reports it).
        One quick attempt: this look runs on the loop thread."""
        try:
            self.env.runner.base_versions([name], quick=True)
        except MvsError as exc:
            return exc.code is not ErrorCode.NOT_FOUND
        return True

    def _skip_unchanged(self) -> Decision | None:
        """The decision's SKIP (``workers.worker.decision.unchanged``) when the base tables are still
        at the versions this epoch's last run left the MV at: no Spark job, no run submitted."""
        if self.watermark_epoch != self.task["epoch"] or not self.watermark:
            return None  # restored or superseded: the run reads what the MV table reflects
        if self.attempt:
            # Retrying a failed run: the storage may be away. The run decides on its own thread
            # instead, and says SKIPPED there if nothing changed.
            return None
        try:
            # One quick attempt: this look runs on the loop thread, which a store that is away would
            # hold through the client's retries (heartbeats and commands with it).
            versions = self.env.runner.base_versions(self.task["mv"]["base_tables"], quick=True)
        except MvsError:
            return None  # let the run report the missing table (or the storage that is away)
        return unchanged(versions, self.watermark)

    def _current(self, run: RunContext) -> RunContext | None:
        """The maintainer's context of ``run`` (its trigger may have been raised), or None if stale."""
        if self.running is None or self.running.run_id != run.run_id:
            log.info("%s: ignoring news of run %s, not the current run", self.task_id, run.run_id)
            return None
        return self.running

    def _on_run_started(self, run: RunContext, started: float) -> None:
        current = self._current(run)
        if current is not None:
            self._record_run(current, "RUNNING", started_ms=self._wall_ms(started))

    def _on_run_finished(self, message_run: RunContext, outcome: RunOutcome) -> None:
        run = self._current(message_run)
        if run is None:
            return
        self.running = None
        # The run's own times, not when this loop got to its outcome: a loaded worker may take
        # seconds to, and a timeout is delivered at its deadline. The end from the start and the
        # duration (one clock reading): never before the start.
        started_ms = self._wall_ms(outcome.started)
        ended_ms = started_ms + round(outcome.duration * 1000)
        result = outcome.result if isinstance(outcome.result, RunResult) else None
        failure = run_failure(outcome, self.env.run_timeout_s)
        if failure is not None:
            self._failed(run, failure, started_ms, ended_ms)
        elif was_cancelled(outcome):
            self._record_run(
                run, "CANCELED", started_ms=started_ms, ended_ms=ended_ms, end=RunEnd(message="cancelled")
            )
        elif result is not None:
            if run.epoch == self.task["epoch"]:
                self.watermark = dict(result.watermark_after)
                self.watermark_epoch = run.epoch
                # The run pinned the base versions right after its body started, so the MV is
                # current as of the start (not the end: that would hide the run's own duration).
                self.data_time = outcome.started
                self.last_duration = outcome.duration
            self.attempt = 0
            self.error = None
            if self.state is TaskState.WARNING:
                self._set_state(TaskState.NORMAL)
            self._record_run(
                run, result.state, started_ms=started_ms, ended_ms=ended_ms, end=RunEnd.of(result)
            )
            if result.state == "SKIPPED" and self.env.metrics is not None:
                self.env.metrics.record_skip("already_applied")
        self.last_started = outcome.started
        if self.stopped:
            return
        if self.pending_trigger is not None and self.runnable:
            trigger, self.pending_trigger = self.pending_trigger, None
            self._start_run(trigger)
        elif self.runnable and self.task_id not in self.env.due:
            self._schedule_next()

    def _failed(self, run: RunContext, error: MvsError, started_ms: int, ended_ms: int) -> None:
        self.error = error.record(ended_ms)  # when the run failed, as its record says
        self.attempt += 1
        retry = self.error["retryable"] and not self.env.retry.exhausted(self.attempt)
        self._set_state(TaskState.WARNING if retry else TaskState.FAILED)
        self._record_run(run, "ERROR", started_ms=started_ms, ended_ms=ended_ms, end=RunEnd(error=self.error))
        if retry:
            delay = self.env.retry.delay(self.attempt, rng=self.env.rng)
            self._schedule_at(self.env.clock.monotonic() + delay)
        else:
            self.pending_trigger = None
            self.env.due.remove(self.task_id)

    def _set_state(self, state: TaskState) -> None:
        if state is not self.state:
            self.task = {**self.task, "state": state.value}
            self.env.report_now()

    def _record_run(
        self,
        run: RunContext,
        state: str,
        *,
        started_ms: int | None = None,
        ended_ms: int | None = None,
        end: RunEnd = NOTHING_MORE,
    ) -> None:
        if ended_ms is None and state not in ("PENDING", "RUNNING"):
            ended_ms = self.env.clock.wall_ms()  # not from a run's outcome: ended as it is written
        record = run_record(
            run,
            state,
            task_id=self.task_id,
            worker_id=self.env.worker_id,
            started_ms=started_ms,
            ended_ms=ended_ms,
            end=end,
        )
        self.last_run = run_summary(record)
        self.env.publish("runs", self.task_id, record)
        self.env.status_changed(self.task_id)

    def _wall_ms(self, monotonic: float) -> int:
        """A scheduling-clock time as epoch milliseconds (records carry wall time)."""
        clock = self.env.clock
        return clock.wall_ms() - round((clock.monotonic() - monotonic) * 1000)

    # -- schedule ----------------------------------------------------------------------------------
    def _schedule_next(self, *, notify: bool = True) -> None:
        """Schedule the next run after a run or a no-change decision, by the task's trigger."""
        now = self.env.clock.monotonic()
        try:
            due = next_due(
                self.task,
                now=now,
                last_started=self.last_started,
                data_time=self.data_time,
                last_duration=self.last_duration,
            )
        except ValueError as exc:  # a spec no DDL check let through (e.g. EVERY 0 from a raw producer)
            self._invalid_spec(str(exc))
            return
        if due is None:
            self.env.due.remove(self.task_id)  # ON DEMAND: only a REFRESH command runs it
            if notify:
                self.env.status_changed(self.task_id)
            return
        # Seed 000 risk 2: whatever the formula proposes, never start again sooner than
        # MIN_RUN_SPACING_S after the last start, so no next time can make a tight re-trigger loop.
        spacing = None if self.last_started is None else self.last_started + MIN_RUN_SPACING_S
        self._schedule_at(due, not_before=spacing, notify=notify)

    def _invalid_spec(self, why: str) -> None:
        log.error("%s: cannot schedule: %s", self.task_id, why)
        self.error = MvsError(ErrorCode.INVALID_CONFIG, f"cannot schedule: {why}").record(
            self.env.clock.wall_ms()
        )
        self._set_state(TaskState.FAILED)
        self.pending_trigger = None
        self.env.due.remove(self.task_id)
        self.env.status_changed(self.task_id)

    def _schedule_at(
        self, due: float | None, *, not_before: float | None = None, notify: bool = True
    ) -> None:
        floor = self.env.clock.monotonic()
        if not_before is not None:
            floor = max(floor, not_before)
        safe, reason = validate_next_due(due, floor, min_delay=0.0)
        if reason in _INVALID_DUE:
            log.warning("%s: next run time %s replaced (%s) by %s", self.task_id, due, reason, safe)
        self.env.due.schedule(self.task_id, safe)
        if notify:
            self.env.status_changed(self.task_id)

    # -- reporting ---------------------------------------------------------------------------------
    def status(self) -> Record:
        due = self.env.due.due_at(self.task_id)
        next_run_at = None
        if due is not None:
            next_run_at = self.env.clock.wall_ms() + int(max(0.0, due - self.env.clock.monotonic()) * 1000)
        return {
            "task_id": self.task_id,
            "epoch": self.task["epoch"],
            "state": self.task["state"],
            "checkpoint": dict(self.watermark),  # MaintainerStatus's name for the watermark
            "last_run": self.last_run,
            "next_run_at": next_run_at,
            "error": self.error,
        }

    def gauges(self) -> TaskGauges:
        """Data lag (MVs) and time to the next run, read at scrape time from another thread:
        single attribute reads and one dict lookup, safe without the FSM's serialisation."""
        now = self.env.clock.monotonic()
        due = self.env.due.due_at(self.task_id)
        lag = data_lag_s(now, self.data_time) if self.task["kind"] == "MV" else None
        return TaskGauges(self.task_id, lag, None if due is None else max(0.0, due - now))


def new_run_id() -> str:
    """64 random bits in hex. Not ``uuid4``: ``os.urandom`` lets go of the GIL, and on the loop
    thread every run then waited for the pool threads it had just woken (measured: a fifth of a
    millisecond per run on a loaded machine). The module's generator is seeded from the OS and
    reseeded in a forked child, so ids stay unique across workers."""
    return f"{random.getrandbits(64):016x}"
