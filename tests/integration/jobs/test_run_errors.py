"""Issue 8, class 7: a failed run carries its root cause and is retried only if a retry can help.

Real Spark 4.0.1 + Delta 4.0.1 raise the failures; the worker's own mapping (``SparkRunner``'s
``_storage_errors`` over ``workers.jobs.errors.FAILURE_RULES``) classifies them."""

from __future__ import annotations

import os
import shutil
import uuid
from typing import Any

import pytest

from tests.support.cluster import Cluster, wait_until
from tests.support.sales import BY_REGION, caught_up, rows
from workers import warehouse
from workers.config import Settings
from workers.demo_tables import create_table
from workers.worker.runner import RunFailure, SparkRunner, _storage_errors


def runner_on(spark: Any, settings: Settings) -> SparkRunner:
    runner = SparkRunner(settings, lambda _: spark)  # the session the tests share
    return runner


def test_a_change_feed_cut_by_a_schema_change_is_permanent_with_the_delta_message(
    spark: Any, local_settings: Settings
) -> None:
    create_table(spark, local_settings, "sales", rows(0, 4), "id BIGINT, region STRING, amount BIGINT")
    runner = runner_on(spark, local_settings)
    task = {"task_id": "mvlog:sales", "kind": "MV_LOG", "name": "sales"}
    runner.purge(task, safepoint=None, run_id="r1", job_group="g1")  # enables CDF, creates the log
    path = warehouse.table_path(local_settings, "sales")
    spark.sql(
        f"ALTER TABLE delta.`{path}` SET TBLPROPERTIES ('delta.columnMapping.mode' = 'name', "
        "'delta.minReaderVersion' = '2', 'delta.minWriterVersion' = '5')"
    )
    spark.sql(f"ALTER TABLE delta.`{path}` RENAME COLUMN region TO area")
    spark.createDataFrame([(9, "x", 1)], "id BIGINT, area STRING, amount BIGINT").write.format("delta").mode(
        "append"
    ).save(path)
    with pytest.raises(RunFailure) as raised:
        runner.purge(task, safepoint=None, run_id="r2", job_group="g2")
    failure = raised.value
    record = failure.record(0)
    assert (record["code"], record["retryable"], record["severity"]) == (5001, False, "ERROR")
    # Delta 4.0.1 says DATA_SCHEMA for this read (SCHEMA_CHANGE when reading across with the old schema)
    assert "[DELTA_CHANGE_DATA_FEED_INCOMPATIBLE_" in failure.message
    assert "DROP MATERIALIZED VIEW LOG ON" in failure.message


def test_a_table_gone_under_spark_is_permanent_and_names_the_table(
    spark: Any, local_settings: Settings
) -> None:
    create_table(spark, local_settings, "orders", rows(0, 2), "id BIGINT, region STRING, amount BIGINT")
    path = warehouse.table_path(local_settings, "orders")
    shutil.rmtree(path)
    with pytest.raises(RunFailure) as raised, _storage_errors():
        spark.read.format("delta").load(path).collect()
    record = raised.value.record(0)
    assert (record["code"], record["retryable"]) == (1003, False)
    assert "[PATH_NOT_FOUND]" in record["message"] and "orders" in record["message"]


def test_a_failed_save_shows_the_java_cause_not_the_py4j_call(spark: Any, tmp_path: Any) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    with pytest.raises(RunFailure) as raised, _storage_errors():
        spark.range(1).write.format("delta").save(str(blocker / "table"))
    message = raised.value.message
    assert "An error occurred while calling" not in message
    assert "[DELTA_CANNOT_CREATE_LOG_PATH]" in message and "a-file" in message
    assert "\n" not in message and len(message) < 600


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads a chmod 000 directory: nothing is denied")
def test_a_permission_denied_base_is_permanent(spark: Any, local_settings: Settings) -> None:
    create_table(spark, local_settings, "sales", rows(0, 2), "id BIGINT, region STRING, amount BIGINT")
    log_dir = os.path.join(warehouse.table_path(local_settings, "sales"), "_delta_log")
    os.chmod(log_dir, 0)
    try:
        with pytest.raises(RunFailure) as raised:
            runner_on(spark, local_settings).base_versions(["sales"])
    finally:
        os.chmod(log_dir, 0o755)
    record = raised.value.record(0)
    assert (record["code"], record["retryable"]) == (2001, False)
    assert "Permission denied" in record["message"]


def test_a_base_table_deleted_mid_life_fails_the_mv_once_without_retrying(
    cluster: Cluster, spark: Any
) -> None:
    name = f"gone_{uuid.uuid4().hex[:6]}"
    assert cluster.sql(f"CREATE MATERIALIZED VIEW {name} REFRESH COMPLETE EVERY 1 SECONDS AS {BY_REGION}")[
        "accepted"
    ]
    wait_until(lambda: caught_up(cluster, f"mv:{name}"), what="first refresh")
    shutil.rmtree(warehouse.table_path(cluster.settings, "sales"))
    task = wait_until(
        lambda: (t := cluster.task(f"mv:{name}")) is not None and t["state"] == "FAILED" and t,
        what="the MV failed",
    )
    error = task["error"]
    assert (error["code"], error["retryable"]) == (1003, False)
    assert "base table sales does not exist" in error["message"] and "RESUME" in error["message"]
    manager = cluster.managers[0]
    assert f"mv:{name}" not in manager.host.due  # nothing scheduled: no retry loop
    errors = [r for r in cluster.client.history(f"mv:{name}", limit=1000) if r["state"] == "ERROR"]
    assert len(errors) == 1 and "sales" in errors[0]["message"]
