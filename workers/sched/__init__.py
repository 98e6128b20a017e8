"""Scheduling: clock, due queue, trigger formulas, bounded priority executor, batch system, and the
retry policies of ``workers.retry`` handed on.

The only package that imports prometheus_client (``metrics``, imported on its own so that using the
scheduler does not pull in the metrics server).
"""

# Which error codes a retry can fix is decided once, with the codes.
from workers.catalog.errors import is_retryable
from workers.retry import (
    CLIENT_RETRY,
    LOOP_ERROR_RETRY,
    REFRESH_RETRY,
    RetryInterrupted,
    RetryPolicy,
    retrying,
)
from workers.sched.clock import Clock, ManualClock, SystemClock
from workers.sched.due import DueQueue, Wakeup, validate_next_due
from workers.sched.executor import BoundedExecutor
from workers.sched.executor_types import CancelToken, ExecutorMetrics, Priority, RunOutcome, SubmitStatus
from workers.sched.gauges import TaskGauges
from workers.sched.mailbox import BatchSystem, Fsm
from workers.sched.triggers import ON_CHANGE_POLL_S, next_refresh_due

__all__ = [
    "CLIENT_RETRY",
    "LOOP_ERROR_RETRY",
    "ON_CHANGE_POLL_S",
    "REFRESH_RETRY",
    "BatchSystem",
    "BoundedExecutor",
    "CancelToken",
    "Clock",
    "DueQueue",
    "ExecutorMetrics",
    "Fsm",
    "ManualClock",
    "Priority",
    "RetryInterrupted",
    "RetryPolicy",
    "RunOutcome",
    "SubmitStatus",
    "SystemClock",
    "TaskGauges",
    "Wakeup",
    "is_retryable",
    "next_refresh_due",
    "retrying",
    "validate_next_due",
]
