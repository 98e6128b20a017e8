"""Errors raised by Spark jobs, carrying the architecture's error codes (seed 002).

Role code maps them to ``TaskError`` without knowing anything about Spark.
"""

from __future__ import annotations


class JobError(Exception):
    """A job failed for a reason the task owner should see (code + retryable)."""

    code: int = 4001
    retryable: bool = True


class TableNotFound(JobError):
    """A base table, MV log or MV table does not exist in the warehouse."""

    code = 1003
    retryable = True  # the table may simply not have been created yet


class ChangesNotRetained(JobError):
    """The MV log no longer holds the changes asked for (purged, or captured too late).

    The caller falls back to a complete refresh.
    """

    code = 5001
    retryable = False


class RunCancelled(Exception):
    """The run's job group was cancelled (``cancel_run``); not an error, the run state is CANCELED."""
