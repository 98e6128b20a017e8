"""Issue 12 item 6b: an MV that falls behind its FRESHNESS goal is announced STALE on the freshness
topic, and RECOVERED once it caught up (real broker, Spark and Delta; the coordinator decides)."""

from __future__ import annotations

from typing import Any

from tests.integration.cluster import Cluster, wait_until
from tests.integration.sales import BY_REGION, caught_up, rows
from workers.demo_tables import append
from workers.kafka.reader import read_to_end
from workers.records import Record
from workers.warehouse import latest_version, read_commit

GOAL_MS = 3_000


def freshness_events(cluster: Cluster) -> list[Record]:
    events = [m.value for m in read_to_end(cluster.settings, "freshness") if m.value is not None]
    return sorted(events, key=lambda e: e["at"])


def test_an_mv_behind_its_freshness_goal_is_stale_then_recovered(cluster: Cluster, spark: Any) -> None:
    settings = cluster.settings
    assert cluster.sql(f"CREATE MATERIALIZED VIEW fresh REFRESH COMPLETE ON DEMAND AS {BY_REGION}")[
        "accepted"
    ]
    assert cluster.sql("REFRESH MATERIALIZED VIEW fresh")["accepted"]
    wait_until(lambda: caught_up(cluster, "mv:fresh"), what="the first refresh")
    assert cluster.sql("ALTER MATERIALIZED VIEW fresh FRESHNESS 3 SECONDS")["accepted"]
    assert cluster.task("mv:fresh")["mv"]["freshness_ms"] == GOAL_MS  # type: ignore[index]

    append(spark, settings, "sales", rows(100, 2))  # the base moves; ON DEMAND: nothing refreshes
    version = latest_version(settings, "sales")
    assert version is not None
    committed_ms = next(
        a["commitInfo"]["timestamp"] for a in read_commit(settings, "sales", version) if "commitInfo" in a
    )
    (stale,) = wait_until(lambda: freshness_events(cluster), what="a STALE event")
    assert (stale["task_id"], stale["state"], stale["goal_source"], stale["goal_ms"]) == (
        "mv:fresh",
        "STALE",
        "FRESHNESS",
        GOAL_MS,
    )
    assert stale["behind_since"] == committed_ms and stale["lag_ms"] > GOAL_MS
    assert stale["checkpoint"]["sales"] == version - 1

    assert cluster.sql("REFRESH MATERIALIZED VIEW fresh")["accepted"]
    wait_until(lambda: len(freshness_events(cluster)) >= 2, what="RECOVERED")
    events = freshness_events(cluster)
    assert [(e["task_id"], e["state"]) for e in events] == [("mv:fresh", "STALE"), ("mv:fresh", "RECOVERED")]
    assert events[1]["lag_ms"] == 0 and events[1]["checkpoint"]["sales"] == version
