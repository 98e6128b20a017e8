"""FAST / FORCE refresh end to end: DDL → coordinator → worker → incremental MERGE from the MV log.

The MVs must equal their queries after inserts, updates and deletes of the base table, and the run
history must say how each refresh was done (incremental, or complete and why).
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.support.cluster import Cluster, wait_until
from tests.support.sales import BY_REGION, caught_up, mv_rows, query_rows, rows
from workers.demo_tables import append

BIG = "SELECT id, region, amount FROM sales WHERE amount > 15"
# A window without PARTITION BY has no incremental plan (any change reaches every row): FORCE refreshes
# it completely and says why.
RANKED = "SELECT id, rank() OVER (ORDER BY amount) AS r FROM sales"


def last_completed(cluster: Cluster, task_id: str) -> dict[str, Any]:
    completed = [r for r in cluster.client.history(task_id) if r["state"] == "COMPLETED"]
    assert completed, f"{task_id} never completed a run"
    return completed[-1]


def all_caught_up(cluster: Cluster, *task_ids: str) -> bool:
    return all(caught_up(cluster, t) for t in task_ids)


# On the object store only (tests/support/objectstore.py): FAST ON CHANGE through workers on a local
# warehouse runs in the broker-outage, Kafka-cluster and separate-hosts tests.
@pytest.mark.parametrize("settings", ["s3"], indirect=True)
def test_fast_mvs_follow_inserts_updates_and_deletes_incrementally(cluster: Cluster, spark: Any) -> None:
    settings = cluster.settings
    assert cluster.sql("CREATE MATERIALIZED VIEW LOG ON sales")["accepted"]
    for sql in (
        f"CREATE MATERIALIZED VIEW by_region REFRESH FAST ON CHANGE AS {BY_REGION}",
        f"CREATE MATERIALIZED VIEW big REFRESH FAST ON CHANGE AS {BIG}",
        f"CREATE MATERIALIZED VIEW ranked REFRESH FORCE ON CHANGE AS {RANKED}",
    ):
        result = cluster.sql(sql)
        assert result["accepted"], result
    tasks = ("mv:by_region", "mv:big", "mv:ranked")
    wait_until(lambda: all_caught_up(cluster, *tasks), what="first builds")
    first = next(r for r in cluster.client.history("mv:by_region") if r["state"] == "COMPLETED")
    assert first["message"].startswith("complete: first build"), first

    path = f"{settings.warehouse}/sales"
    changes = (
        ("insert", lambda: append(spark, settings, "sales", rows(100, 6))),
        ("update", lambda: spark.sql(f"UPDATE delta.`{path}` SET amount = amount + 7 WHERE id % 4 = 0")),
        ("delete", lambda: spark.sql(f"DELETE FROM delta.`{path}` WHERE id % 5 = 1")),
    )
    for what, change in changes:
        change()
        wait_until(lambda: all_caught_up(cluster, *tasks), what=f"refresh after the {what}")
        for name, query in (("by_region", BY_REGION), ("big", BIG), ("ranked", RANKED)):
            assert mv_rows(spark, settings, name) == query_rows(spark, settings, query), (what, name)
        for task_id in ("mv:by_region", "mv:big"):
            run = last_completed(cluster, task_id)
            assert run["message"].startswith("incremental:"), (what, run)
            assert run["watermark_after"]["sales"] == run["watermark_before"]["sales"] + 1
        forced = last_completed(cluster, "mv:ranked")["message"]
        assert forced.startswith("complete: fast refresh is not possible"), forced
