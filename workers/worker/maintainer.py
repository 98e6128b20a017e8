"""One maintainer per owned task: an FSM driven by the messages in its mailbox (seed 004).

Only the maintainer changes its task's schedule, retry count and run state (seed 000 risk 3):
the manager and the executor reach it by sending messages. It never publishes; it appends
the records to send to its manager's outbox, and the manager's loop publishes them.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from workers.catalog.errors import ErrorCode, MvsError
from workers.catalog.lifecycle import RUNNABLE, TaskState
from workers.jobs.errors import RunCancelled
from workers.sched.clock import Clock
from workers.sched.due import DueQueue, validate_next_due
from workers.sched.executor import BoundedExecutor, Priority, RunOutcome, SubmitStatus
from workers.sched.retry import REFRESH_RETRY, RetryPolicy
from workers.sched.triggers import next_refresh_due
from workers.worker.runner import Runner, RunResult

log = logging.getLogger(__name__)
Record = dict[str, Any]
ON_CHANGE_POLL_S = 1.0
REJECTED_RETRY_S = 1.0


# -- messages ------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Due:
    pass


@dataclass(frozen=True)
class Command:
    record: Record  # a MaintainerCommand


@dataclass(frozen=True)
class Update:
    task: Record  # a newer TaskRecord from ADD_MAINTAINER


@dataclass(frozen=True)
class RunFinished:
    run: RunContext
    outcome: RunOutcome


@dataclass(frozen=True)
class Stop:
    pass


@dataclass(frozen=True)
class RunContext:
    run_id: str
    epoch: int
    trigger: str
    started_ms: int
    watermark_before: dict[str, int]

    @property
    def job_group(self) -> str:
        return f"mvs-{self.run_id}"


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
    run_timeout_s: float = 600.0
    retry: RetryPolicy = REFRESH_RETRY


@dataclass
class Maintainer:
    task: Record
    env: MaintainerEnv
    watermark: dict[str, int] = field(default_factory=dict)
    watermark_epoch: int | None = None
    last_run: Record | None = None
    error: Record | None = None
    attempt: int = 0
    running: RunContext | None = None
    rerun_requested: bool = False
    safepoint: int | None = None
    stopped: bool = False

    def __post_init__(self) -> None:
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
                self._on_due(trigger="SCHEDULE")
            elif isinstance(message, Command):
                self._on_command(message.record)
            elif isinstance(message, Update):
                self._on_update(message.task)
            elif isinstance(message, RunFinished):
                self._on_run_finished(message.run, message.outcome)
            elif isinstance(message, Stop):
                self._on_stop()

    def _on_due(self, trigger: str) -> None:
        if not self.runnable:
            return
        if self.running is not None:
            self.rerun_requested = True
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
            self._on_due(trigger="MANUAL")
        elif kind == "CANCEL_RUN":
            if self.running is not None:
                self.env.executor.cancel(self.task_id)
        elif kind == "SAFEPOINT":
            self.safepoint = command["safepoint"]

    def _on_update(self, task: Record) -> None:
        if task["epoch"] <= self.task["epoch"]:
            return  # a replayed or stale command: the maintainer already has this epoch or newer
        self.task = task
        self.attempt = 0
        self.error = task.get("error")
        self.safepoint = task.get("safepoint", self.safepoint)
        if self.running is not None:
            self.env.executor.cancel(self.task_id)  # the old epoch's run is superseded
        if self.runnable:
            self._schedule_at(self.env.clock.monotonic())
        else:
            self.env.due.remove(self.task_id)
        self.env.status_changed(self.task_id)

    def _on_stop(self) -> None:
        self.stopped = True
        self.env.due.remove(self.task_id)
        if self.running is not None:
            self.env.executor.cancel(self.task_id)

    # -- runs --------------------------------------------------------------------------------------
    def _start_run(self, trigger: str) -> None:
        now_ms = self.env.clock.wall_ms()
        run = RunContext(uuid.uuid4().hex[:16], self.task["epoch"], trigger, now_ms, dict(self.watermark))
        if self.task["kind"] == "MV" and self._unchanged():
            if not (trigger == "SCHEDULE" and self._trigger_kind() == "ON_CHANGE"):
                # A due refresh with nothing new: history says so; an ON CHANGE poll just looks again.
                self._record_run(run, "SKIPPED", rows=0, after=self.watermark, message="skipped: no change")
            self._schedule_next(started=self.env.clock.monotonic())
            return
        task, safepoint = dict(self.task), self.safepoint
        runner = self.env.runner

        def body(_token: object) -> RunResult:
            if task["kind"] == "MV":
                return runner.refresh(task, run_id=run.run_id, job_group=run.job_group)
            return runner.purge(task, safepoint=safepoint, run_id=run.run_id, job_group=run.job_group)

        priority = self._priority(trigger)
        status = self.env.executor.submit(
            self.task_id,
            body,
            priority=priority,
            timeout_s=self.env.run_timeout_s,
            on_done=lambda outcome: (
                None if self.env.send_to_self(self.task_id, RunFinished(run, outcome)) else None
            ),
            on_cancel=lambda: runner.cancel(run.job_group),
        )
        # COALESCED (the previous outcome is still being delivered) runs right after it, as ACCEPTED.
        if status is SubmitStatus.REJECTED:
            self._record_run(run, "ERROR", message="rejected: the worker's run queue is full")
            self._schedule_at(self.env.clock.monotonic() + REJECTED_RETRY_S)
            return
        self.running = run
        self.env.due.remove(self.task_id)
        self._record_run(run, "RUNNING")

    def _trigger_kind(self) -> str:
        return str(self.task["mv"]["trigger"]["kind"]) if self.task["kind"] == "MV" else "EVERY"

    def _priority(self, trigger: str) -> Priority:
        """Asked-for runs first, then freshness-driven triggers, then periodic refreshes, purges last."""
        if trigger == "MANUAL":
            return Priority.URGENT
        if self.task["kind"] == "MV_LOG":
            return Priority.PURGE
        return Priority.CHANGE if self._trigger_kind() in ("ON_CHANGE", "TARGET_LAG") else Priority.PERIODIC

    def _unchanged(self) -> bool:
        """True when the base tables are still at the versions the MV already reflects (no Spark job)."""
        if self.watermark_epoch != self.task["epoch"] or not self.watermark:
            return False
        try:
            return self.env.runner.base_versions(self.task["mv"]["base_tables"]) == self.watermark
        except MvsError:
            return False  # let the run report the missing table

    def _on_run_finished(self, run: RunContext, outcome: RunOutcome) -> None:
        self.running = None
        result = outcome.result if isinstance(outcome.result, RunResult) else None
        if outcome.timed_out:
            self._failed(
                run,
                MvsError(
                    ErrorCode.STORAGE_UNAVAILABLE,
                    f"run exceeded its timeout of {self.env.run_timeout_s:.0f}s and was cancelled",
                ),
            )
        elif outcome.canceled or isinstance(outcome.error, RunCancelled):
            self._record_run(run, "CANCELED", message="cancelled")
        elif outcome.error is not None:
            error = (
                outcome.error
                if isinstance(outcome.error, MvsError)
                else MvsError(ErrorCode.MAINTAINER_CRASH, f"{type(outcome.error).__name__}: {outcome.error}")
            )
            self._failed(run, error)
        elif result is not None:
            if run.epoch == self.task["epoch"]:
                self.watermark = dict(result.watermark_after)
                self.watermark_epoch = run.epoch
            self.attempt = 0
            self.error = None
            if self.state is TaskState.WARNING:
                self.task = {**self.task, "state": TaskState.NORMAL.value}
            self._record_run(
                run,
                result.state,
                rows=result.rows_written,
                after=result.watermark_after,
                message=result.message,
            )
        if self.stopped:
            return
        if self.rerun_requested and self.runnable:
            self.rerun_requested = False
            self._start_run("RERUN")
        elif self.runnable and self.task_id not in self.env.due:
            self._schedule_next(started=self.env.clock.monotonic())

    def _failed(self, run: RunContext, error: MvsError) -> None:
        now_ms = self.env.clock.wall_ms()
        self.error = error.record(now_ms)
        self.attempt += 1
        retry = self.error["retryable"] and not self.env.retry.exhausted(self.attempt)
        new_state = TaskState.WARNING if retry else TaskState.FAILED
        self.task = {**self.task, "state": new_state.value}
        self._record_run(run, "ERROR", error=self.error)
        if retry:
            self._schedule_at(self.env.clock.monotonic() + self.env.retry.delay(self.attempt))
        else:
            self.env.due.remove(self.task_id)

    def _record_run(
        self,
        run: RunContext,
        state: str,
        *,
        rows: int | None = None,
        after: dict[str, int] | None = None,
        message: str | None = None,
        error: Record | None = None,
    ) -> None:
        ended = None if state == "RUNNING" else self.env.clock.wall_ms()
        summary = {
            "run_id": run.run_id,
            "trigger": run.trigger,
            "state": state,
            "started_at": run.started_ms,
            "ended_at": ended,
            "rows_written": rows,
            "message": message or (error or {}).get("message"),
        }
        self.last_run = summary
        record = {
            **summary,
            "task_id": self.task_id,
            "epoch": run.epoch,
            "worker_id": self.env.worker_id,
            "watermark_before": run.watermark_before,
            "watermark_after": dict(after or run.watermark_before),
            "error": error,
        }
        self.env.publish("runs", self.task_id, record)
        self.env.status_changed(self.task_id)

    # -- schedule ----------------------------------------------------------------------------------
    def _schedule_next(self, started: float) -> None:
        if self.task["kind"] == "MV_LOG":
            interval_s = self.task["mv_log"]["purge_interval_ms"] / 1000
            self._schedule_at(started + interval_s)
            return
        trigger = self.task["mv"]["trigger"]
        kind = trigger["kind"]
        if kind == "ON_CHANGE":
            self._schedule_at(self.env.clock.monotonic() + ON_CHANGE_POLL_S)
            return
        interval = trigger["interval_ms"] / 1000 if trigger.get("interval_ms") else None
        due = next_refresh_due(
            kind,
            interval,
            now=self.env.clock.monotonic(),
            last_started=started,
            last_success_data_time=started,
        )
        if due is None:
            self.env.due.remove(self.task_id)  # ON DEMAND: only a REFRESH command runs it
        else:
            self._schedule_at(due)

    def _schedule_at(self, due: float) -> None:
        now = self.env.clock.monotonic()
        safe, warning = validate_next_due(due, now, min_delay=0.0)
        if warning:
            log.warning("%s: next run time %s replaced: %s", self.task_id, due, warning)
        self.env.due.schedule(self.task_id, safe)
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
            "checkpoint": dict(self.watermark),
            "last_run": self.last_run,
            "next_run_at": next_run_at,
            "error": self.error,
        }
