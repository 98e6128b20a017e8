"""The ``sales`` base table of the end-to-end tests, and how to compare an MV with its query.

The ``sales`` and ``cluster`` fixtures that use these live in conftest.py.
"""

from __future__ import annotations

from typing import Any

from tests.integration.cluster import Cluster
from workers.config import Settings
from workers.demo_tables import read_table
from workers.warehouse import latest_version

SCHEMA = "id BIGINT, region STRING, amount BIGINT"
BY_REGION = "SELECT region, sum(amount) AS total, count(*) AS orders FROM sales GROUP BY region"


def rows(start: int, count: int) -> list[dict[str, Any]]:
    regions = ["north", "south", "east"]
    return [{"id": i, "region": regions[i % 3], "amount": 10 + i} for i in range(start, start + count)]


def query_rows(spark: Any, settings: Settings, query: str) -> list[tuple[Any, ...]]:
    path = f"{settings.warehouse}/sales"
    return sorted(tuple(r) for r in spark.sql(query.replace("FROM sales", f"FROM delta.`{path}`")).collect())


def mv_rows(spark: Any, settings: Settings, name: str) -> list[tuple[Any, ...]]:
    return sorted(tuple(r.values()) for r in read_table(spark, settings, name))


def caught_up(cluster: Cluster, task_id: str) -> bool:
    """The task's reported checkpoint is the latest version of ``sales``."""
    task = cluster.task(task_id)
    latest = latest_version(cluster.settings, "sales")
    return bool(task and task["checkpoint"].get("sales") == latest)
