"""Issue 11, item 3: a replicated Kafka cluster — three KRaft brokers from the same jars, mvs's topics
replicated 3 times with ``min.insync.replicas`` 2 (``topics/``), every producer acks=all and idempotent.

One broker — the leader of the DDL topic, so the coordinator's input, its transactions and a share
of every group's partitions move — is killed (kill -9) while the fleet refreshes and DDL is being
published. Every accepted DDL is applied once, the MVs keep up, no run record is lost, and no refresh
is applied twice (each MV's Delta commits name distinct runs, watermarks only move forward). Then
the broker comes back, every replica is in sync again, and the fleet goes on.

The coordinator and two workers run in this process (``Cluster``: real loops in threads against the
real brokers, sharing the test session's Spark), so the test pays for three broker JVMs only.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.integration.cluster import Cluster, wait_until
from tests.integration.fleet import assert_applied_once, refresh_commits, step, unended_runs
from tests.integration.sales import SCHEMA, mv_rows, query_rows, rows
from workers.config import Settings
from workers.demo_tables import append, create_table
from workers.embedded.kafka_cluster import KafkaCluster
from workers.kafka.admin import describe, partition_leader, under_replicated
from workers.kafka.typed import read_to_end
from workers.warehouse import latest_version

pytestmark = pytest.mark.integration

BY_REGION = "SELECT region, sum(amount) AS total, count(*) AS orders FROM sales GROUP BY region"
BIG = "SELECT id, region, amount FROM sales WHERE amount > 15"


@pytest.fixture(scope="module")
def kafka3(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaCluster]:
    with KafkaCluster(tmp_path_factory.mktemp("kafka3"), nodes=3) as cluster:
        yield cluster


def current(cluster: Cluster, spark: Any, name: str, query: str) -> bool:
    task = cluster.task(f"mv:{name}")
    if not task or task["checkpoint"].get("sales") != latest_version(cluster.settings, "sales"):
        return False
    return mv_rows(spark, cluster.settings, name) == query_rows(spark, cluster.settings, query)


def all_current(cluster: Cluster, spark: Any, mvs: dict[str, str], when: str) -> None:
    for name, query in mvs.items():
        wait_until(
            lambda n=name, q=query: current(cluster, spark, n, q), timeout_s=180, what=f"{name} {when}"
        )


def test_one_broker_killed_while_the_fleet_works(kafka3: KafkaCluster, spark: Any, tmp_path: Path) -> None:
    settings = Settings.from_env(
        bootstrap_servers=kafka3.bootstrap_servers,
        embedded=False,
        namespace=f"k3{uuid.uuid4().hex[:8]}",
        warehouse=str(tmp_path / "warehouse"),
        session_timeout_ms=6000,
    )
    assert settings.replication_factor is None  # topics/ decides: 3 replicas, 2 in sync
    create_table(spark, settings, "sales", rows(0, 12), SCHEMA)
    cluster = Cluster(settings, workers=2)
    try:
        # Brokers learn of new topics from the metadata log, each at its own pace (Kafka documents that
        # for seconds after a creation a broker may not list them): the one answering may lag.
        wait_until(
            lambda: all(s.exists and not s.drift for s in describe(settings)),
            timeout_s=60,
            what="every topic listed with its declared replication",
        )
        mvs = {"by_region": BY_REGION, "big": BIG}
        for sql in (
            "CREATE MATERIALIZED VIEW LOG ON sales",
            f"CREATE MATERIALIZED VIEW by_region REFRESH COMPLETE EVERY 2 SECONDS AS {BY_REGION}",
            f"CREATE MATERIALIZED VIEW big REFRESH FAST ON CHANGE AS {BIG}",
        ):
            assert cluster.sql(sql)["accepted"], sql
        all_current(cluster, spark, mvs, "built")
        step("kafka3: fleet up on 3 brokers, both MVs built")

        epoch = cluster.coordinator.coordinator_epoch
        victim_id = partition_leader(settings, "ddl", 0)
        victim = kafka3.brokers[victim_id - 1]
        victim.kill()
        killed_at = time.monotonic()
        step(f"kafka3: broker {victim_id} (leader of the ddl topic) killed")
        append(spark, settings, "sales", rows(100, 5))
        for i in range(3):  # DDL keeps coming while the partitions move
            query = f"SELECT id, amount FROM sales WHERE amount > {i}"
            sql = f"CREATE MATERIALIZED VIEW extra{i} REFRESH COMPLETE EVERY 2 SECONDS AS {query}"
            result = cluster.client.execute(sql, timeout_s=90)
            assert result is not None and result["accepted"], (sql, result)
            mvs[f"extra{i}"] = query
            step(f"kafka3: failover: DDL {i + 1} answered {time.monotonic() - killed_at:.1f}s after the kill")
        append(spark, settings, "sales", rows(200, 5))
        all_current(cluster, spark, mvs, f"with broker {victim_id} down")
        step(f"kafka3: failover: every MV current {time.monotonic() - killed_at:.1f}s after the kill")
        # The coordinator kept its leadership (same epoch) or took it again (a newer one).
        wait_until(lambda: cluster.coordinator.active, timeout_s=60, what="the coordinator active")
        assert cluster.coordinator.coordinator_epoch >= epoch
        kept = cluster.coordinator.coordinator_epoch == epoch
        step(f"kafka3: failover: the coordinator {'kept its leadership' if kept else 'was re-elected'}")

        # Every accepted DDL applied once: one task each, and one answer per request.
        tasks = cluster.client.tasks()
        assert {t for t in tasks if t.startswith("mv:")} == {f"mv:{n}" for n in mvs}
        answers = [m.value["event_id"] for m in read_to_end(settings, "ddl.results") if m.value]
        assert len(answers) == len(set(answers)) == len(mvs) + 1  # + the MV log
        # No refresh applied twice: distinct runs per MV commit, watermarks never moving back.
        for name in mvs:
            assert_applied_once(refresh_commits(spark, settings, name))

        victim.start()
        serving_at = time.monotonic()
        wait_until(lambda: not under_replicated(settings), timeout_s=120, what="every replica back in sync")
        caught_up = time.monotonic() - serving_at
        step(f"kafka3: failover: broker {victim_id} back, replicas in sync {caught_up:.1f}s after it served")
        append(spark, settings, "sales", rows(300, 5))
        all_current(cluster, spark, mvs, f"after broker {victim_id} came back")
        # No run record lost: every run that started has its end record.
        now_ms = int(time.time() * 1000)
        wait_until(lambda: not unended_runs(settings, now_ms), timeout_s=60, what="every started run ended")
    finally:
        cluster.close()
