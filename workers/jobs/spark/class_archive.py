"""A class-data-sharing archive of the Spark driver's JVM: the classes a worker loads on start and on
its first Delta jobs, parsed and verified once at set-up (``infra/setup.sh``) instead of in every
process. Measured on 2 cores: a Spark start and first Delta write and read 24.9 s → 17.6 s.

The archive is only valid for the JVM binary and class path that made it; its file name carries a
fingerprint of both, so a changed JDK, PySpark or jar set finds no archive (and runs without one)
instead of a mismatched one. Local masters only: a cluster's driver has another class path.

``python -m workers.jobs.spark.class_archive`` makes it (idempotent; a child process runs the warm-up, since
the JVM writes the archive when it exits).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Mapping
from pathlib import Path

from workers.config import CACHE_DIR

ARCHIVE_DIR = CACHE_DIR / "jvm"


def _java_binary() -> str:
    java_home = os.environ.get("JAVA_HOME")
    found = str(Path(java_home) / "bin" / "java") if java_home else shutil.which("java")
    return os.path.realpath(found) if found else ""


def archive_path(jars_conf: Mapping[str, str]) -> Path:
    """Where the archive for this JVM, PySpark and jar set lives (whether or not it exists)."""
    import pyspark

    fingerprint = json.dumps([_java_binary(), pyspark.__version__, sorted(jars_conf.items())])
    return ARCHIVE_DIR / f"spark-{hashlib.sha256(fingerprint.encode()).hexdigest()[:16]}.jsa"


def java_option(jars_conf: Mapping[str, str]) -> str:
    """The driver JVM option that uses the archive, or "" when none was made for this set-up."""
    path = archive_path(jars_conf)
    return f"-XX:SharedArchiveFile={path}" if path.is_file() else ""


def _warm_up(dump_to: str) -> None:
    """Start Spark, dumping its classes at exit, and run the jobs a worker's first runs run."""
    from workers.config import Settings
    from workers.jobs.spark.session import get_spark

    with tempfile.TemporaryDirectory() as folder:
        settings = Settings(warehouse=folder, spark_java_options=f"-XX:ArchiveClassesAtExit={dump_to}")
        spark = get_spark(settings)
        table = f"{folder}/t"
        spark.range(10).write.format("delta").option("delta.enableChangeDataFeed", "true").save(table)
        spark.range(10, 20).write.format("delta").mode("append").save(table)
        spark.sql(
            f"MERGE INTO delta.`{table}` t USING (SELECT id FROM range(5)) s ON t.id = s.id "
            "WHEN MATCHED THEN DELETE WHEN NOT MATCHED THEN INSERT *"
        )
        changes = spark.read.format("delta").option("readChangeFeed", "true").option("startingVersion", 1)
        changes.load(table).groupBy("_change_type").count().collect()
        spark.read.format("delta").load(table).selectExpr("id % 3 AS k").groupBy("k").count().collect()
        spark.stop()
    # The JVM writes the archive as it exits, after this process would: close its gateway and wait.
    from pyspark import SparkContext

    gateway = SparkContext._gateway  # noqa: SLF001 - PySpark keeps the JVM's process only there
    if gateway is not None:
        process = gateway.proc
        gateway.shutdown()
        process.stdin.close()
        process.wait(timeout=600)


def main() -> int:
    if len(sys.argv) == 3 and sys.argv[1] == "--dump":
        _warm_up(sys.argv[2])
        return 0
    from workers.jobs.spark.session import jars_conf

    target = archive_path(jars_conf("local[2]"))
    if target.is_file():
        print(f"class archive present: {target}")
        return 0
    ARCHIVE_DIR.mkdir(parents=True, exist_ok=True)
    partial = target.with_suffix(".partial")
    partial.unlink(missing_ok=True)
    # The JVM lists every class it could not archive on stdout: noise at set-up.
    dump = [sys.executable, "-m", "workers.jobs.spark.class_archive", "--dump", str(partial)]
    subprocess.run(dump, check=True, stdout=subprocess.DEVNULL)
    if not partial.is_file():
        print("the JVM wrote no class archive: workers start without one", file=sys.stderr)
        return 0
    partial.rename(target)
    print(f"class archive made: {target} ({target.stat().st_size // 2**20} MiB)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
