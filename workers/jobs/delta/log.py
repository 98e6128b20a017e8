"""Reading a Delta table's commit log: latest version and commit infos, newest first.

Read without Spark, for local and object-store warehouses alike (``workers.warehouse``: delta-rs's
object store, a folder listing for a local table's latest version): milliseconds, and the ``txn``
actions of each commit are visible.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from pyspark.sql import SparkSession

from workers import warehouse
from workers.config import Settings
from workers.jobs.spark.session import active_spark

CHANGE_FEED_PROPERTY = "delta.enableChangeDataFeed"
COLUMN_MAPPING_PROPERTY = "delta.columnMapping.mode"


@dataclass(frozen=True)
class CommitInfo:
    version: int
    timestamp_ms: int | None
    operation: str | None
    user_metadata: str | None
    operation_parameters: dict[str, str] = field(default_factory=dict)
    # By Spark's names whichever engine wrote the commit (``_spark_names``).
    operation_metrics: dict[str, str] = field(default_factory=dict)
    # (appId, version) of the commit's idempotent-write actions.
    txns: tuple[tuple[str, int], ...] = ()
    engine: str | None = None  # ``engineInfo``: "Apache-Spark/… Delta-Lake/…", "delta-rs:py-…"


def current_version(spark: SparkSession | None, settings: Settings, name: str) -> int | None:
    """Latest committed version of table ``name``, None if it does not exist (``spark`` is unused:
    kept so callers need not know how the log is read)."""
    return warehouse.latest_version(settings, name)


def change_feed_on(configuration: Mapping[str, str]) -> bool:
    """Whether a table's properties (its ``metaData.configuration``) turn its change data feed on."""
    return configuration.get(CHANGE_FEED_PROPERTY, "false").lower() == "true"


def column_mapping_mode(configuration: Mapping[str, str] | None) -> str:
    """A table's column mapping mode by its properties: "none", "name" or "id"."""
    return (configuration or {}).get(COLUMN_MAPPING_PROPERTY, "none")


def iter_commits(
    spark: SparkSession | None,
    settings: Settings,
    name: str,
    *,
    after: int | None = None,
    newest: int | None = None,
) -> Iterator[CommitInfo]:
    """Commit infos of versions > ``after`` (all if None) up to ``newest`` (the latest if None),
    newest first, lazily.

    Stops at the first commit file removed by log cleanup. No Spark is needed (``spark`` may be
    None: a caller can decide before its JVM has started).
    """
    floor = -1 if after is None else after
    latest = warehouse.latest_version(settings, name) if newest is None else newest
    for version in range(latest if latest is not None else -1, floor, -1):
        try:
            actions = warehouse.read_commit(settings, name, version)
        except FileNotFoundError:
            return
        yield commit_info(version, actions)


def commit_info(version: int, actions: list[dict[str, Any]]) -> CommitInfo:
    """The commit info of the commit ``version`` whose ``actions`` were read."""
    info: dict[str, Any] = next((a["commitInfo"] for a in actions if "commitInfo" in a), {})
    txns = tuple((str(a["txn"]["appId"]), int(a["txn"]["version"])) for a in actions if "txn" in a)
    return CommitInfo(
        version=version,
        timestamp_ms=info.get("timestamp"),
        operation=info.get("operation"),
        user_metadata=info.get("userMetadata"),
        operation_parameters={k: str(v) for k, v in (info.get("operationParameters") or {}).items()},
        operation_metrics=_spark_names(info.get("operationMetrics") or {}),
        txns=txns,
        engine=info.get("engineInfo"),
    )


# delta-rs's names for the metrics Spark names otherwise (after snake_case to camelCase).
_RENAMED = {"numAddedRows": "numOutputRows"}


def _spark_names(metrics: dict[str, Any]) -> dict[str, str]:
    """Operation metrics by Spark's names: delta-rs (``workers.jobs.delta.rs_commit``) writes
    ``num_target_rows_updated`` for Spark's ``numTargetRowsUpdated`` and ``num_added_rows`` for
    ``numOutputRows``."""
    named: dict[str, str] = {}
    for key, value in metrics.items():
        head, *rest = key.split("_")
        camel = head + "".join(word.capitalize() for word in rest)
        named[_RENAMED.get(camel, camel)] = str(value)
    return named


def forget_table(settings: Settings, name: str) -> None:
    """Drop Delta's cached state of a table whose folder was deleted, so a table re-created at
    the same path is read fresh (Delta caches table logs by path, process-wide)."""
    spark = active_spark()
    if spark is None:
        return
    jvm = spark.sparkContext._jvm
    assert jvm is not None  # a live session always has its gateway
    path = jvm.org.apache.hadoop.fs.Path(warehouse.table_path(settings, name))
    jvm.org.apache.spark.sql.delta.DeltaLog.invalidateCache(spark._jsparkSession, path)
