"""Issue 11, item 5: separate hosts, simulated — two workers, each in its own network namespace (its own
"host", ``tests.integration.netns``), the broker and the coordinator on the bridge. One worker's link
to the broker is cut (its cable pulled: the process and its Spark keep running). Its tasks move to the
other worker within the failover goal; it commits nothing over the new owner (Delta's idempotent-write
fencing: no older epoch lands after a newer one); and when the link heals it rejoins the group and
takes its share again without a failed run. Skipped, saying why, where namespaces cannot be made
(not root). The failover time is printed, not asserted."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.integration import netns
from tests.integration.cluster import wait_until
from tests.integration.fleet import Harness, assert_applied_once, refresh_commits, step
from tests.integration.processes import Fleet
from tests.integration.sales import SCHEMA, mv_rows, query_rows, rows
from workers.demo_tables import append, create_table
from workers.embedded.broker import EmbeddedKafka, free_port, one_broker_settings
from workers.kafka.admin import group_owners
from workers.warehouse import latest_version

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(netns.unavailable() is not None, reason=str(netns.unavailable())),
]

MVS = {
    "by_region": "SELECT region, sum(amount) AS total, count(*) AS orders FROM sales GROUP BY region",
    "big": "SELECT id, region, amount FROM sales WHERE amount > 15",
}
# The deadline, not the figure (printed): group session 3 s + heartbeat timeout 8 s + a refresh, with
# room for a loaded 2-core machine.
FAILOVER_GOAL_S = 90.0


@pytest.fixture
def hosts() -> Iterator[netns.Hosts]:
    with netns.Hosts(2) as made:
        yield made


def current(h: Harness, name: str, owner: str | None = None) -> bool:
    task = h.task(f"mv:{name}")
    if not task or task["checkpoint"].get("sales") != latest_version(h.settings, "sales"):
        return False
    if owner is not None and task["owner"] != owner:
        return False
    return mv_rows(h.spark, h.settings, name) == query_rows(h.spark, h.settings, MVS[name])


def test_a_worker_cut_off_from_the_broker_hands_over_and_rejoins(
    hosts: netns.Hosts, spark: Any, tmp_path: Path
) -> None:
    broker = EmbeddedKafka(
        tmp_path / "kafka", port=free_port(), controller_port=free_port(), host=netns.BRIDGE_ADDRESS
    )
    broker.start()
    settings = one_broker_settings(broker.bootstrap_servers, "hosts", tmp_path, heartbeat_timeout_s=8.0)
    fleet = Fleet(settings, tmp_path / "logs")
    h = Harness(settings, fleet, spark)
    try:
        fleet.coordinator("c1")
        workers = {name: fleet.worker(name, prefix=hosts.prefix(i)) for i, name in ((1, "w1"), (2, "w2"))}
        create_table(spark, settings, "sales", rows(0, 12), SCHEMA)
        for worker in workers.values():
            h.wait_warm(worker)
        h.ok("CREATE MATERIALIZED VIEW LOG ON sales")
        h.ok(f"CREATE MATERIALIZED VIEW by_region REFRESH COMPLETE EVERY 2 SECONDS AS {MVS['by_region']}")
        h.ok(f"CREATE MATERIALIZED VIEW big REFRESH FAST ON CHANGE AS {MVS['big']}")
        for name in MVS:
            wait_until(lambda n=name: current(h, n), timeout_s=180, what=f"{name} built")
        victim = h.task("mv:by_region")["owner"]  # type: ignore[index]
        (survivor,) = set(workers) - {victim}
        victim_host = 1 if victim == "w1" else 2
        step(f"hosts: both MVs built; by_region on {victim}, whose link is cut next")

        mark = h.mark()
        cut_at = time.monotonic()
        hosts.cut(victim_host)
        append(spark, settings, "sales", rows(100, 5))
        wait_until(
            lambda: current(h, "by_region", owner=survivor) and current(h, "big"),
            timeout_s=FAILOVER_GOAL_S,
            what=f"by_region moved to {survivor} and current",
        )
        failover = time.monotonic() - cut_at
        step(
            f"hosts: FAILOVER: by_region current on {survivor} {failover:.1f}s after {victim}'s link was cut"
        )
        assert workers[victim].alive, "a cut link must not kill the worker"
        for name in MVS:
            assert_applied_once(refresh_commits(spark, settings, name))  # no older epoch after a newer one

        hosts.heal(victim_host)
        wait_until(
            lambda: set(group_owners(settings, settings.group("workers"))) == set(workers),
            timeout_s=120,
            what=f"{victim} back in the group",
        )
        step(f"hosts: {victim}'s link healed; both workers in the group again")
        append(spark, settings, "sales", rows(200, 5))
        for name in MVS:
            wait_until(lambda n=name: current(h, n), timeout_s=120, what=f"{name} current after the heal")
            assert_applied_once(refresh_commits(spark, settings, name))
        # No failed run since the cut, the victim's included (what it ran while cut off arrives now),
        # but a retried write conflict: the cut-off worker may still be committing the run it had
        # started (it still reaches the warehouse) when the new owner commits the same MV.
        runs = h.runs_of("mv:by_region", after=mark) + h.runs_of("mv:big", after=mark)
        failed = [r for r in runs if r["state"] == "ERROR"]
        conflicts = [
            r for r in failed if r["error"]["retryable"] and "write conflict" in r["error"]["message"]
        ]
        assert [r for r in failed if r not in conflicts] == [], failed
        step(f"hosts: {len(conflicts)} run(s) lost a write conflict to the cut-off worker and were retried")
        assert all(w.alive for w in workers.values())
    except BaseException:
        print(fleet.logs())
        raise
    finally:
        fleet.close()
        h.close()
        broker.stop()
