"""Errors raised by Spark jobs, carrying the architecture's error codes (seed 002).

Role code maps them to ``TaskError`` without knowing anything about Spark.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any


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
    """True for Delta's optimistic-concurrency conflicts (every ``DeltaConcurrentModificationException``:
    ``Concurrent*Exception``, ``MetadataChangedException``, ``ProtocolChangedException``): another
    writer committed to the same table first. Recognised whether pyspark converted the Java exception
    to ``delta.exceptions`` or left it a Py4JJavaError (then by the Java class names in its cause chain)."""
    from delta.exceptions import DeltaConcurrentModificationException

    if isinstance(exc, DeltaConcurrentModificationException):
        return True
    java = getattr(exc, "java_exception", None)
    for _ in range(8):  # the conflict may be wrapped (e.g. in a SparkException)
        if java is None:
            return False
        name = java.getClass().getName()
        if any(kind in name for kind in _CONFLICT_CLASSES):
            return True
        java = java.getCause()
    return False


_CONFLICT_CLASSES = (".Concurrent", ".MetadataChangedException", ".ProtocolChangedException")


# -- what a Spark/Delta failure means --------------------------------------------------------------

ROOT_CAUSE_MAX = 300  # characters of root cause a run record carries
_ERROR_CLASS = re.compile(r"^\[([A-Z][A-Z0-9_.]+)\]")
_CHAIN_MAX = 12


@dataclass(frozen=True)
class FailureRule:
    """A failure whose text matches ``pattern`` has ``code``; ``retryable`` decides whether the
    maintainer tries again; ``hint`` tells the user what to do about it."""

    name: str
    pattern: re.Pattern[str]
    code: int
    retryable: bool
    hint: str


def _rule(name: str, pattern: str, code: int, retryable: bool, hint: str) -> FailureRule:
    return FailureRule(name, re.compile(pattern, re.IGNORECASE), code, retryable, hint)


_RECREATE = "re-create it, then ALTER MATERIALIZED VIEW <name> RESUME (or REFRESH) the views that read it"
# First match wins, so the specific rules come before the broad ones (a missing table is also an
# AnalysisException; a permission problem is also an IOException, even a FileNotFoundException).
FAILURE_RULES: tuple[FailureRule, ...] = (
    _rule(
        "change feed unreadable",
        r"DELTA_CHANGE_DATA_FEED_INCOMPATIBLE|incompatible (schema|data schema) change|"
        r"incompatible data schema",
        5001,
        False,
        "the base table's schema changed in a way its change data feed cannot cross: "
        "DROP MATERIALIZED VIEW LOG ON <base>, CREATE it again, then REFRESH the views that read it",
    ),
    _rule(
        "permission denied",
        r"AccessDeniedException|Permission denied|PermissionError|\bEACCES\b",
        2001,
        False,
        "the worker may not read or write this path: grant its user access to the warehouse, "
        "then ALTER MATERIALIZED VIEW <name> RESUME",
    ),
    _rule(
        "table gone",
        r"DELTA_TABLE_NOT_FOUND|DELTA_MISSING_DELTA_TABLE|PATH_NOT_FOUND|is not a Delta table|"
        r"FileNotFoundException[^|]*/_delta_log",
        1003,
        False,
        f"the table is gone: {_RECREATE}",
    ),
    _rule(
        "write conflict",
        r"ConcurrentModification|\.Concurrent[A-Za-z]*Exception|DELTA_CONCURRENT",
        2001,
        True,
        "another writer committed first; retried",
    ),
    _rule(
        "changed during the run",
        r"DELTA_SCHEMA_CHANGE_SINCE_ANALYSIS|FAILED_READ_FILE|FileNotFoundException",
        2001,
        True,
        "the table changed while the run read it; retried",
    ),
    _rule(
        "query invalid",
        r"AnalysisException|ParseException",
        1001,
        False,
        "fix the query and re-create the view",
    ),
    _rule(
        "Spark lost",
        # py4j's socket to a JVM that exited (killed, out of memory): the worker starts a new session.
        r"Py4JNetworkError|ConnectionRefusedError|Answer from Java side is empty|"
        r"stopped SparkContext|SparkContext (was|has been) shut ?down",
        2001,
        True,
        "the worker starts a new Spark session; retried",
    ),
    _rule(
        "storage unavailable",
        # "Generic S3 error" & co: delta-rs (the no-JVM reads) on an object store it cannot reach.
        r"IOException|Timeout|timed out|Connection (reset|refused)|SparkException|"
        r"OSError|Generic [A-Za-z0-9]+ error",
        2001,
        True,
        "retried",
    ),
)
_UNKNOWN = FailureRule("unknown", re.compile(""), 2001, True, "retried")


@dataclass(frozen=True)
class JobFailure:
    """A classified failure: what the run record and ``mvs status`` show."""

    code: int
    retryable: bool
    message: str  # "<what>: <root cause> (<hint>)", one line
    rule: str


def _one_line(text: str | None) -> str:
    lines = [line.strip() for line in (text or "").splitlines() if line.strip()]
    return lines[0] if lines else ""


def _java_of(exc: BaseException) -> Any:
    """The Java throwable behind a py4j error (``java_exception``) or a converted pyspark error."""
    return getattr(exc, "java_exception", None) or getattr(exc, "_origin", None)


def cause_chain(exc: BaseException) -> list[tuple[str, str]]:
    """(class name, first line of message) from the outermost failure to the innermost cause: the
    Python exception, then the Java exception's ``getCause()`` chain (pyspark shows only the outer
    Java call, e.g. ``An error occurred while calling o241.save.``; the cause is in the chain)."""
    chain = [(type(exc).__name__, _one_line(str(exc)))]
    java = _java_of(exc)
    try:
        while java is not None and len(chain) < _CHAIN_MAX:
            name = str(java.getClass().getName()).rsplit(".", 1)[-1]
            chain.append((name, _one_line(java.getMessage())))
            java = java.getCause()
    except Exception:  # the JVM is gone: what was read so far is what there is
        pass
    cause = exc.__cause__
    while cause is not None and len(chain) < _CHAIN_MAX and _java_of(exc) is None:
        chain.append((type(cause).__name__, _one_line(str(cause))))
        cause = cause.__cause__
    return chain


def root_cause(chain: list[tuple[str, str]]) -> str:
    """``Class: message`` of the innermost cause that says something, prefixed by the first error
    class (``[DELTA_…]``) on the way if the root does not carry one; trimmed to one short line."""
    meaningful = [(name, message) for name, message in chain if message]
    name, message = meaningful[-1] if meaningful else chain[-1]
    text = f"{name}: {message}" if message else name
    if not _ERROR_CLASS.match(message):
        tags = [m.group(0) for _, msg in chain if (m := _ERROR_CLASS.match(msg))]
        if tags:
            text = f"{tags[0]} {text}"
    return text if len(text) <= ROOT_CAUSE_MAX else text[: ROOT_CAUSE_MAX - 1] + "…"


def classify_failure(exc: BaseException) -> JobFailure:
    """The code, retryability and message of a Spark/Delta (or local file system) failure, by the
    first of ``FAILURE_RULES`` whose pattern matches a class name or message in its cause chain."""
    chain = cause_chain(exc)
    haystack = " | ".join(f"{name}: {message}" for name, message in chain)
    rule = next((r for r in FAILURE_RULES if r.pattern.search(haystack)), _UNKNOWN)
    message = f"{rule.name}: {root_cause(chain)} ({rule.hint})"
    return JobFailure(rule.code, rule.retryable, message, rule.name)
