"""When a task runs and how urgently, from its record alone: its trigger kind, the executor
priority of a run, the next due time after a run, and which of two run triggers wins when runs
coalesce. Pure: the maintainer keeps the state (last start, data time) and asks."""

from __future__ import annotations

from workers.catalog.specs import EVERY, ON_CHANGE, TARGET_LAG, effective_trigger
from workers.records import Record
from workers.sched.executor import Priority
from workers.sched.triggers import next_refresh_due

SCHEDULE, MANUAL = "SCHEDULE", "MANUAL"  # RunRecord.trigger: the clock, or a REFRESH_NOW command
_URGENCY = {MANUAL: 0, SCHEDULE: 1}


def more_urgent(trigger: str, than: str | None) -> bool:
    """Whether a run for ``trigger`` outranks one for ``than`` (the trigger a coalesced run keeps)."""
    return than is None or _URGENCY[trigger] < _URGENCY[than]


def trigger_kind(task: Record) -> str:
    """The MV's trigger kind (TARGET LAG DOWNSTREAM: the one its readers drive); an MV log is purged
    EVERY its interval."""
    return str(effective_trigger(task["mv"])["kind"]) if task["kind"] == "MV" else EVERY


def run_priority(task: Record, trigger: str) -> Priority:
    """Asked-for runs first, then freshness-driven triggers, then periodic refreshes, purges last."""
    if trigger == MANUAL:
        return Priority.URGENT
    if task["kind"] == "MV_LOG":
        return Priority.PURGE
    return Priority.CHANGE if trigger_kind(task) in (ON_CHANGE, TARGET_LAG) else Priority.PERIODIC


def next_due(
    task: Record,
    *,
    now: float,
    last_started: float | None,
    data_time: float | None,
    last_duration: float | None,
) -> float | None:
    """The next run's time by the task's trigger (None: ON DEMAND); ValueError for a spec no DDL
    check let through (e.g. EVERY 0 from a raw producer)."""
    if task["kind"] == "MV_LOG":
        interval = _seconds(task["mv_log"]["purge_interval_ms"])
        return next_refresh_due(
            EVERY, interval, now=now, last_started=last_started, last_success_data_time=None
        )
    trigger = effective_trigger(task["mv"])
    return next_refresh_due(
        trigger["kind"],
        _seconds(trigger.get("interval_ms")),
        now=now,
        last_started=last_started,
        last_success_data_time=data_time,
        expected_duration_s=last_duration,
    )


def due_again(
    task: Record, *, now: float, data_time: float | None, last_duration: float | None
) -> float | None:
    """When the task would be due again had a run started ``now`` (None: only a command runs it,
    or a spec no DDL check let through): a run still queued then cannot serve its time."""
    try:
        return next_due(task, now=now, last_started=now, data_time=data_time, last_duration=last_duration)
    except ValueError:
        return None


def _seconds(interval_ms: int | None) -> float | None:
    return None if interval_ms is None else interval_ms / 1000
