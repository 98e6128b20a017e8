"""A class-data-sharing archive of the Spark driver's JVM: the classes a worker loads on start and on
its first Delta jobs, parsed and verified once at set-up (``infra/setup.sh``) instead of in every
process. Measured on 2 cores: a Spark start and first Delta write and read 24.9 s → 17.6 s.

The archive is only valid for the JVM binary and class path that made it; its file name carries a
fingerprint of both (the jars' sizes and times included), so a changed JDK, PySpark or jar set (or
the same jars fetched again) finds no archive (and runs without one) instead of a mismatched one.
Local masters only: a cluster's driver has another class path.

``infra/make_class_archive.py`` makes it at set-up (idempotent).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from collections.abc import Mapping
from pathlib import Path

from workers.config import CACHE_DIR

ARCHIVE_DIR = CACHE_DIR / "jvm"


def _java_binary() -> str:
    java_home = os.environ.get("JAVA_HOME")
    found = str(Path(java_home) / "bin" / "java") if java_home else shutil.which("java")
    return os.path.realpath(found) if found else ""


def _jar_stamps(jars_conf: Mapping[str, str]) -> list[tuple[str, int, int]]:
    """Each jar's size and modification time: the JVM refuses an archive whose jars were written again
    (a re-fetch), so a re-fetched jar must name another archive."""
    stamps = []
    for value in jars_conf.values():
        for path in value.replace(":", ",").split(","):
            if path.endswith(".jar") and os.path.isfile(path):
                found = os.stat(path)
                stamps.append((path, found.st_size, found.st_mtime_ns))
    return sorted(stamps)


def archive_path(jars_conf: Mapping[str, str]) -> Path:
    """Where the archive for this JVM, PySpark and jar set lives (whether or not it exists)."""
    import pyspark

    parts = [_java_binary(), pyspark.__version__, sorted(jars_conf.items()), _jar_stamps(jars_conf)]
    fingerprint = json.dumps(parts)
    return ARCHIVE_DIR / f"spark-{hashlib.sha256(fingerprint.encode()).hexdigest()[:16]}.jsa"


def java_option(jars_conf: Mapping[str, str]) -> str:
    """The driver JVM option that uses the archive, or "" when none was made for this set-up."""
    path = archive_path(jars_conf)
    return f"-XX:SharedArchiveFile={path}" if path.is_file() else ""
