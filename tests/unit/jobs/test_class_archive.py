"""The driver JVM's class archive is used only when one was made for exactly this JVM and jar set."""

from __future__ import annotations

from pathlib import Path

import pytest

from workers.jobs.spark import class_archive


def test_the_archive_is_named_by_its_jar_set_and_used_only_if_present(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(class_archive, "ARCHIVE_DIR", tmp_path)
    local = {"spark.jars": "/jars/delta-spark.jar"}
    cluster = {"spark.jars": "/jars/delta-spark.jar,/jars/hadoop-aws.jar"}
    assert class_archive.archive_path(local) != class_archive.archive_path(cluster)
    assert class_archive.java_option(local) == ""  # none made: the JVM starts without one
    class_archive.archive_path(local).write_bytes(b"archive")
    assert class_archive.java_option(local) == f"-XX:SharedArchiveFile={class_archive.archive_path(local)}"
    assert class_archive.java_option(cluster) == ""


def test_another_jvm_binary_finds_no_archive(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    jars = {"spark.jars": "/jars/delta-spark.jar"}
    monkeypatch.setenv("JAVA_HOME", str(tmp_path / "jdk-a"))
    first = class_archive.archive_path(jars)
    monkeypatch.setenv("JAVA_HOME", str(tmp_path / "jdk-b"))
    assert class_archive.archive_path(jars) != first


def test_jars_fetched_again_find_no_archive(tmp_path: Path) -> None:
    """The JVM refuses an archive whose jars were written after it ("the top archive failed to load")."""
    jar = tmp_path / "delta-spark.jar"
    jar.write_bytes(b"jar")
    jars = {"spark.jars": str(jar), "spark.driver.extraClassPath": f"{tmp_path / 'absent.jar'}"}
    first = class_archive.archive_path(jars)
    assert class_archive.archive_path(jars) == first
    jar.write_bytes(b"jar, fetched again")
    assert class_archive.archive_path(jars) != first
