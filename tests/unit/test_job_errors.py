"""Recognising Delta write conflicts, whatever shape pyspark hands them over in."""

from __future__ import annotations

from dataclasses import dataclass

from workers.jobs.errors import is_write_conflict


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


def test_other_failures_are_not() -> None:
    assert not is_write_conflict(Py4JLike(JavaThrowable("java.io.FileNotFoundException")))
    assert not is_write_conflict(ValueError("no java side"))
