"""Make the Spark driver JVM's class-data-sharing archive (``workers.jobs.spark.class_archive``), at
set-up (``infra/setup.sh``): idempotent; a child process runs the warm-up, since the JVM writes the
archive when it exits.
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
from pathlib import Path

from pyspark import SparkContext

from workers.config import Settings
from workers.jobs.spark.class_archive import ARCHIVE_DIR, archive_path
from workers.jobs.spark.session import get_spark, jars_conf


def _warm_up(dump_to: str) -> None:
    """Start Spark, dumping its classes at exit, and run the jobs a worker's first runs run."""
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
    target = archive_path(jars_conf("local[2]"))
    if target.is_file():
        print(f"class archive present: {target}")
        return 0
    ARCHIVE_DIR.mkdir(parents=True, exist_ok=True)
    partial = target.with_suffix(".partial")
    partial.unlink(missing_ok=True)
    # The JVM lists every class it could not archive on stdout: noise at set-up.
    dump = [sys.executable, str(Path(__file__).resolve()), "--dump", str(partial)]
    subprocess.run(dump, check=True, stdout=subprocess.DEVNULL)
    if not partial.is_file():
        print("the JVM wrote no class archive: workers start without one", file=sys.stderr)
        return 0
    partial.rename(target)
    print(f"class archive made: {target} ({target.stat().st_size // 2**20} MiB)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
