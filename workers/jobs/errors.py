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


def is_write_conflict(exc: BaseException) -> bool:
    """True for Delta's optimistic-concurrency conflicts (``Concurrent*Exception``): another writer
    committed to the same table first. Recognised whether pyspark converted the Java exception to
    ``delta.exceptions`` or left it a Py4JJavaError (then by the Java class names in its cause chain)."""
    from delta.exceptions import (
        ConcurrentAppendException,
        ConcurrentDeleteDeleteException,
        ConcurrentDeleteReadException,
        ConcurrentTransactionException,
        ConcurrentWriteException,
    )

    conflicts = (
        ConcurrentAppendException,
        ConcurrentDeleteDeleteException,
        ConcurrentDeleteReadException,
        ConcurrentTransactionException,
        ConcurrentWriteException,
    )
    if isinstance(exc, conflicts):
        return True
    java = getattr(exc, "java_exception", None)
    for _ in range(8):  # the conflict may be wrapped (e.g. in a SparkException)
        if java is None:
            return False
        if ".Concurrent" in java.getClass().getName():
            return True
        java = java.getCause()
    return False
