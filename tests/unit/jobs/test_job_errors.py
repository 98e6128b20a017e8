"""Recognising Delta write conflicts, whatever shape pyspark hands them over in."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from workers.jobs.errors import (
    FAILURE_RULES,
    ROOT_CAUSE_MAX,
    cause_chain,
    classify_failure,
    is_write_conflict,
    root_cause,
)


@dataclass
class JavaClass:
    name: str

    def getName(self) -> str:  # noqa: N802 - the py4j method name
        return self.name


@dataclass
class JavaThrowable:
    """The two py4j calls is_write_conflict makes on a Java exception."""

    class_name: str
    cause: JavaThrowable | None = None

    def getClass(self) -> JavaClass:  # noqa: N802
        return JavaClass(self.class_name)

    def getCause(self) -> JavaThrowable | None:  # noqa: N802
        return self.cause


class Py4JLike(Exception):
    def __init__(self, java: JavaThrowable) -> None:
        super().__init__("An error occurred while calling o124.save.")
        self.java_exception = java


def test_a_wrapped_delta_conflict_is_a_write_conflict() -> None:
    conflict = JavaThrowable("io.delta.exceptions.ConcurrentAppendException")
    assert is_write_conflict(Py4JLike(conflict))
    assert is_write_conflict(Py4JLike(JavaThrowable("org.apache.spark.SparkException", conflict)))


def test_a_concurrent_metadata_or_protocol_change_is_a_write_conflict() -> None:
    # Enabling the change feed for an MV log (SET TBLPROPERTIES) under another writer's commit.
    for name in ("MetadataChangedException", "ProtocolChangedException"):
        assert is_write_conflict(Py4JLike(JavaThrowable(f"io.delta.exceptions.{name}")))


def test_other_failures_are_not() -> None:
    assert not is_write_conflict(Py4JLike(JavaThrowable("java.io.FileNotFoundException")))
    assert not is_write_conflict(ValueError("no java side"))


# -- classify_failure: root cause and permanent vs temporary ---------------------------------------


@dataclass
class MessagedThrowable(JavaThrowable):
    message: str | None = None

    def getMessage(self) -> str | None:  # noqa: N802
        return self.message


def java(*frames: tuple[str, str | None]) -> MessagedThrowable:
    """A Java cause chain, outermost first."""
    cause: MessagedThrowable | None = None
    for name, message in reversed(frames):
        cause = MessagedThrowable(name, cause, message)
    assert cause is not None
    return cause


def test_the_root_cause_replaces_py4js_outer_call_and_keeps_the_delta_error_class() -> None:
    exc = Py4JLike(
        java(
            ("org.apache.spark.sql.delta.DeltaIOException", "[DELTA_CANNOT_CREATE_LOG_PATH] Cannot create x"),
            (
                "org.apache.hadoop.fs.ParentNotDirectoryException",
                "Parent path is not a directory: file:/p\nmore",
            ),
        )
    )
    chain = cause_chain(exc)
    assert chain[0] == ("Py4JLike", "An error occurred while calling o124.save.")
    assert root_cause(chain) == (
        "[DELTA_CANNOT_CREATE_LOG_PATH] ParentNotDirectoryException: Parent path is not a directory: file:/p"
    )
    failure = classify_failure(exc)
    assert "o124" not in failure.message and "ParentNotDirectoryException" in failure.message
    assert "\n" not in failure.message


def test_a_long_cause_is_trimmed_to_one_short_line() -> None:
    exc = Py4JLike(java(("java.io.IOException", "x" * 5000)))
    assert len(root_cause(cause_chain(exc))) == ROOT_CAUSE_MAX


def test_an_empty_innermost_message_falls_back_to_the_last_one_that_says_something() -> None:
    exc = Py4JLike(
        java(("org.apache.spark.SparkException", "Job aborted: disk full"), ("java.lang.Error", None))
    )
    assert root_cause(cause_chain(exc)) == "SparkException: Job aborted: disk full"


# Messages as Spark 4.0.1 / Delta 4.0.1 raise them (reproduced in tests/integration/jobs/test_run_errors.py).
PERMANENT = {
    "cdf rename": (
        "org.apache.spark.sql.delta.DeltaUnsupportedOperationException",
        "[DELTA_CHANGE_DATA_FEED_INCOMPATIBLE_SCHEMA_CHANGE] Retrieving table changes between version 0 "
        "and 4 failed because of an incompatible schema change.",
        5001,
    ),
    "cdf overwrite": (
        "org.apache.spark.sql.delta.DeltaUnsupportedOperationException",
        "[DELTA_CHANGE_DATA_FEED_INCOMPATIBLE_DATA_SCHEMA] Retrieving table changes between version 0 "
        "and 1 failed because of an incompatible data schema.",
        5001,
    ),
    "path gone": (
        "org.apache.spark.sql.AnalysisException",
        "[PATH_NOT_FOUND] Path does not exist: /w/sales. SQLSTATE: 42K03",
        1003,
    ),
    "empty dir": (
        "org.apache.spark.sql.delta.DeltaAnalysisException",
        "[DELTA_TABLE_NOT_FOUND] Delta table `/w/sales` doesn't exist.",
        1003,
    ),
    "not delta": ("org.apache.spark.sql.AnalysisException", "`/w/sales` is not a Delta table.", 1003),
    "log gone": (
        "java.io.FileNotFoundException",
        "File file:/w/sales/_delta_log/00000.json does not exist",
        1003,
    ),
    "denied": ("java.nio.file.AccessDeniedException", "/w/sales/_delta_log", 2001),
    "denied fnf": ("java.io.FileNotFoundException", "/w/sales/_delta_log/0.json (Permission denied)", 2001),
    "analysis": ("org.apache.spark.sql.AnalysisException", "[UNRESOLVED_COLUMN] nope", 1001),
}
TEMPORARY = {
    "conflict": ("io.delta.exceptions.ConcurrentAppendException", "Files were added"),
    "data file": (
        "java.io.FileNotFoundException",
        "File file:/w/sales/part-00003.snappy.parquet does not exist",
    ),
    "since analysis": (
        "org.apache.spark.sql.delta.DeltaAnalysisException",
        "[DELTA_SCHEMA_CHANGE_SINCE_ANALYSIS] The schema of your Delta table has changed",
    ),
    "timeout": ("java.net.SocketTimeoutException", "Read timed out"),
    "io": ("java.io.IOException", "Connection reset by peer"),
    "unknown": ("java.lang.IllegalStateException", "something odd"),
}


@pytest.mark.parametrize("case", sorted(PERMANENT))
def test_permanent_failures_are_not_retried(case: str) -> None:
    name, message, code = PERMANENT[case]
    wrapped = Py4JLike(java(("org.apache.spark.SparkException", "Job aborted."), (name, message)))
    failure = classify_failure(wrapped)
    assert (failure.code, failure.retryable) == (code, False), failure
    assert message.split(".")[0] in failure.message


@pytest.mark.parametrize("case", sorted(TEMPORARY))
def test_temporary_failures_are_retried(case: str) -> None:
    name, message = TEMPORARY[case]
    failure = classify_failure(Py4JLike(java((name, message))))
    assert (failure.code, failure.retryable) == (2001, True), failure


def test_a_python_permission_error_is_permanent_and_says_where() -> None:
    try:
        raise RuntimeError("listing failed") from PermissionError(
            13, "Permission denied", "/w/sales/_delta_log"
        )
    except RuntimeError as exc:
        failure = classify_failure(exc)
    assert (failure.code, failure.retryable) == (2001, False)
    assert "/w/sales/_delta_log" in failure.message


def test_an_object_store_out_of_reach_of_delta_rs_is_storage_unavailable() -> None:
    # As delta-rs raised it in tests/integration/test_objectstore_outage.py with the store killed.
    failure = classify_failure(OSError("Kernel error -> Generic S3 error: error sending request"))
    assert (failure.rule, failure.code, failure.retryable) == ("storage unavailable", 2001, True)


def test_every_rule_has_a_hint_and_the_first_match_wins() -> None:
    assert all(rule.hint for rule in FAILURE_RULES)
    # A missing table is an AnalysisException too: it must not read as a bad query.
    missing = classify_failure(
        Py4JLike(java(("org.apache.spark.sql.AnalysisException", "[PATH_NOT_FOUND] x")))
    )
    assert missing.rule == "table gone"


def test_a_lost_spark_jvm_is_retried_and_says_so() -> None:
    # As PySpark raised it in tests/integration/test_spark_outage.py with the worker's JVM killed.
    failure = classify_failure(ConnectionRefusedError(111, "Connection refused"))
    assert (failure.rule, failure.code, failure.retryable) == ("Spark lost", 2001, True)
    assert "new Spark session" in failure.message
