"""Old home of the executor's value types (now ``executor_types``) and ``TaskGauges`` (``gauges``).

A re-export until the last importer outside ``workers.sched`` switches; then delete this file.
"""

from workers.sched.executor_types import CancelToken, ExecutorMetrics, Priority, RunOutcome, SubmitStatus
from workers.sched.gauges import TaskGauges

__all__ = ["CancelToken", "ExecutorMetrics", "Priority", "RunOutcome", "SubmitStatus", "TaskGauges"]
