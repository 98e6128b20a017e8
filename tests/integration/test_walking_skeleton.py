"""Issue 2 end to end: DDL on Kafka → coordinator → worker → Spark → Delta, all real."""

from __future__ import annotations

from typing import Any

import pytest

from tests.support.cluster import Cluster, wait_until
from tests.support.sales import BY_REGION, caught_up, mv_rows, query_rows, rows
from workers.demo_tables import append, read_table
from workers.kafka.typed import TypedProducer, read_to_end
from workers.warehouse import latest_version, mlog_table_name, table_exists


@pytest.mark.parametrize("settings", ["local", "s3"], indirect=True)  # s3: tests/support/objectstore.py
def test_create_mv_holds_exactly_the_query_rows(cluster: Cluster, spark: Any) -> None:
    result = cluster.sql(f"CREATE MATERIALIZED VIEW by_region REFRESH COMPLETE EVERY 1 HOUR AS {BY_REGION}")
    assert result["accepted"], result
    wait_until(lambda: caught_up(cluster, "mv:by_region"), what="first refresh reported")
    assert mv_rows(spark, cluster.settings, "by_region") == query_rows(spark, cluster.settings, BY_REGION)
    task = cluster.task("mv:by_region")
    assert task is not None and task["owner"] == "worker-0" and task["last_run"]["state"] == "COMPLETED"


def test_append_then_next_refresh_shows_new_rows_and_advances_watermark(cluster: Cluster, spark: Any) -> None:
    cluster.sql(f"CREATE MATERIALIZED VIEW by_region REFRESH COMPLETE EVERY 1 SECONDS AS {BY_REGION}")
    wait_until(lambda: caught_up(cluster, "mv:by_region"), what="first refresh")
    first = cluster.task("mv:by_region")["checkpoint"]["sales"]  # type: ignore[index]
    append(spark, cluster.settings, "sales", rows(100, 5))
    wait_until(lambda: caught_up(cluster, "mv:by_region"), what="refresh after append")
    assert cluster.task("mv:by_region")["checkpoint"]["sales"] == first + 1  # type: ignore[index]
    assert mv_rows(spark, cluster.settings, "by_region") == query_rows(spark, cluster.settings, BY_REGION)
    history = cluster.client.history("mv:by_region")
    completed = [r for r in history if r["state"] == "COMPLETED"]
    assert [r["watermark_after"]["sales"] for r in completed][-2:] == [first, first + 1]


def test_unchanged_base_skips_without_a_spark_job(cluster: Cluster) -> None:
    cluster.sql(f"CREATE MATERIALIZED VIEW by_region REFRESH COMPLETE EVERY 1 SECONDS AS {BY_REGION}")
    skipped = wait_until(
        lambda: [r for r in cluster.client.history("mv:by_region") if r["state"] == "SKIPPED"],
        what="a skipped refresh",
    )
    assert skipped[0]["message"] == "skipped: no change"
    versions = [
        c for c in read_to_end(cluster.settings, "runs") if c.value and c.value["state"] == "COMPLETED"
    ]
    assert len(versions) == 1  # one real refresh; the rest only moved the schedule


def test_drop_mv_removes_task_and_stops_refreshing(cluster: Cluster, spark: Any) -> None:
    cluster.sql(f"CREATE MATERIALIZED VIEW by_region REFRESH COMPLETE EVERY 1 SECONDS AS {BY_REGION}")
    wait_until(lambda: caught_up(cluster, "mv:by_region"), what="first refresh")
    assert cluster.sql("DROP MATERIALIZED VIEW by_region")["accepted"]
    manager = cluster.managers[0]
    wait_until(lambda: "mv:by_region" not in manager.host.owned, what="maintainer removed")
    # DROPPING until the owner reports the data removed; then the task is gone.
    wait_until(lambda: cluster.task("mv:by_region") is None, what="the drop finished")
    assert "mv:by_region" not in manager.host.due
    assert not table_exists(cluster.settings, "by_region")
    runs_after_drop = len(cluster.client.history("mv:by_region", limit=1000))
    append(spark, cluster.settings, "sales", rows(200, 3))
    # Drive the worker past several would-be refresh times: its loop must start nothing for the task.
    marker = cluster.sql("CREATE MATERIALIZED VIEW probe REFRESH COMPLETE ON DEMAND AS SELECT id FROM sales")
    assert marker["accepted"]
    wait_until(lambda: caught_up(cluster, "mv:probe"), what="a later task refreshed")
    assert len(cluster.client.history("mv:by_region", limit=1000)) == runs_after_drop
    again = cluster.sql("DROP MATERIALIZED VIEW by_region")
    assert again["error"]["code"] == 1003


def test_invalid_query_fails_only_its_task(cluster: Cluster, spark: Any) -> None:
    cluster.sql(f"CREATE MATERIALIZED VIEW good REFRESH COMPLETE EVERY 1 SECONDS AS {BY_REGION}")
    bad = cluster.sql(
        "CREATE MATERIALIZED VIEW bad REFRESH COMPLETE EVERY 1 SECONDS AS SELECT * FROM nowhere"
    )
    assert not bad["accepted"] and bad["error"]["code"] == 1001
    assert "nowhere" in bad["error"]["message"]
    assert cluster.task("mv:bad") is None  # a refusal is the answer only: nothing in the catalog
    wait_until(lambda: caught_up(cluster, "mv:good"), what="good MV refreshed")
    append(spark, cluster.settings, "sales", rows(300, 2))
    wait_until(lambda: caught_up(cluster, "mv:good"), what="good MV keeps refreshing")
    dup = cluster.sql(f"CREATE MATERIALIZED VIEW good AS {BY_REGION}")
    assert dup["error"]["code"] == 1002


def test_undecodable_ddl_goes_to_dead_letters_and_next_ddl_applies(cluster: Cluster) -> None:
    producer = TypedProducer(cluster.settings)
    producer.produce_raw("ddl", b"junk", b"\xc3not avro at all", [])  # no known framing's first byte
    producer.flush()
    assert cluster.sql(f"CREATE MATERIALIZED VIEW by_region AS {BY_REGION}")["accepted"]
    dead = wait_until(lambda: read_to_end(cluster.settings, "dlq"), what="a dead letter")
    assert dead[0].header("mvs.source.topic") == cluster.settings.topic("ddl")
    assert "magic" in (dead[0].header("mvs.error") or "").lower()


def test_purge_keeps_unconsumed_change_rows(cluster: Cluster, spark: Any) -> None:
    settings = cluster.settings
    assert cluster.sql("CREATE MATERIALIZED VIEW LOG ON sales PURGE EVERY 1 SECONDS")["accepted"]
    wait_until(lambda: table_exists(settings, mlog_table_name("sales")), what="mv log created")
    cluster.sql("CREATE MATERIALIZED VIEW lagging REFRESH COMPLETE ON DEMAND AS SELECT id, amount FROM sales")
    cluster.sql(f"CREATE MATERIALIZED VIEW eager REFRESH COMPLETE EVERY 1 SECONDS AS {BY_REGION}")
    wait_until(lambda: caught_up(cluster, "mv:lagging"), what="lagging MV built once")
    held = cluster.task("mv:lagging")["checkpoint"]["sales"]  # type: ignore[index]
    for start in (400, 410, 420):
        append(spark, settings, "sales", rows(start, 2))
    wait_until(lambda: caught_up(cluster, "mv:eager"), what="eager MV caught up")

    def log_versions() -> list[int]:
        return sorted({r["_commit_version"] for r in read_table(spark, settings, mlog_table_name("sales"))})

    latest = latest_version(settings, "sales")
    assert latest is not None
    wait_until(lambda: cluster.task("mvlog:sales")["safepoint"] == held, what="safepoint = lowest watermark")  # type: ignore[index]
    wait_until(lambda: log_versions() and max(log_versions()) == latest, what="changes captured")
    assert min(log_versions()) > held - 1  # nothing the lagging MV still needs was purged
    assert all(v > held for v in log_versions())  # the appends after `held`, all kept
    assert cluster.sql("REFRESH MATERIALIZED VIEW lagging")["accepted"]
    wait_until(lambda: caught_up(cluster, "mv:lagging"), what="lagging MV refreshed on demand")
    wait_until(lambda: cluster.task("mvlog:sales")["safepoint"] == latest, what="safepoint advanced")  # type: ignore[index]
    wait_until(lambda: log_versions() == [latest], what="consumed change rows purged")
