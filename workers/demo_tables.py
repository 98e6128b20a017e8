"""Plain Delta table helpers for the demo and the tests: create, append, read, history."""

from __future__ import annotations

from typing import Any

from pyspark.sql import SparkSession

from workers import warehouse
from workers.config import Settings
from workers.jobs.delta import log as deltalog


def create_table(
    spark: SparkSession, settings: Settings, name: str, rows: list[dict[str, Any]], schema_ddl: str
) -> None:
    """(Re)create Delta table ``name`` with ``rows``; ``schema_ddl`` like ``"id long, v string"``."""
    df = spark.createDataFrame(rows, schema=schema_ddl)
    (
        df.write.format("delta")
        .mode("overwrite")
        .option("overwriteSchema", "true")
        .save(warehouse.table_path(settings, name))
    )


def append(spark: SparkSession, settings: Settings, name: str, rows: list[dict[str, Any]]) -> None:
    """Append ``rows`` (dicts keyed by column) to existing table ``name``, in its schema."""
    path = warehouse.table_path(settings, name)
    schema = spark.read.format("delta").load(path).schema
    spark.createDataFrame(rows, schema=schema).write.format("delta").mode("append").save(path)


def read_table(
    spark: SparkSession, settings: Settings, name: str, version: int | None = None
) -> list[dict[str, Any]]:
    """Every row of table ``name`` (at ``version`` if given) as dicts."""
    reader = spark.read.format("delta")
    if version is not None:
        reader = reader.option("versionAsOf", version)
    return [row.asDict(recursive=True) for row in reader.load(warehouse.table_path(settings, name)).collect()]


def delta_history(spark: SparkSession, settings: Settings, name: str) -> list[dict[str, Any]]:
    """Commits of ``name``, newest first: version, timestamp, operation, userMetadata,
    operationMetrics (by Spark's names), txn (list of {appId, version}; visible on local warehouses only)
    and engine (the writer's ``engineInfo``)."""
    return [
        {
            "version": c.version,
            "timestamp": c.timestamp_ms,
            "operation": c.operation,
            "userMetadata": c.user_metadata,
            "operationMetrics": c.operation_metrics,
            "txn": [{"appId": app, "version": version} for app, version in c.txns],
            "engine": c.engine,
        }
        for c in deltalog.iter_commits(spark, settings, name)
    ]
