"""Issue 8, bad input against real processes: whatever a producer writes to any mvs topic, the
coordinator and the workers keep running, every DDL event gets exactly one answer, no MV replaces a
base table, nothing is written outside the warehouse, and valid DDL after the storm still works.

The storm is built from the shapes that broke mvs before (path characters, huge and empty names, an
MV named like its base, self-reading and escaping queries) plus seeded random ones: random bytes on
every topic, and schema-valid records with adversarial content on the DDL, command and heartbeat
topics, written by a raw producer that bypasses `mvs sql`'s own checks.
"""

from __future__ import annotations

import random
import re
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.integration.cluster import wait_until
from tests.integration.fleet import Harness, step
from tests.integration.processes import Fleet
from tests.integration.sales import BY_REGION, SCHEMA, mv_rows, query_rows, rows
from workers.codec import get_codec
from workers.config import Settings
from workers.demo_tables import create_table, read_table
from workers.embedded.broker import one_broker_settings
from workers.kafka.typed import TypedProducer, read_to_end

pytestmark = pytest.mark.integration

SEED = 20261122
NAMES = [
    "",
    "..",
    "../../escape",
    "a/b",
    "/etc",
    "x" * 10_000,
    "Sales",
    "sales",
    "sales__mlog",
    "naïve",
    "mv name",
    "mv;drop",
    "nul\x00byte",
    "ok_name",
]
QUERIES = [
    "SELECT region, sum(amount) AS total FROM sales GROUP BY region",
    "SELECT * FROM sales",
    "SELECT reflect('java.lang.Runtime', 'getRuntime') AS r FROM sales",
    "SELECT java_method('java.lang.System', 'getenv', 'HOME') AS r FROM sales",
    "SELECT TRANSFORM(region) USING 'id' AS (r) FROM sales",
    "SELECT * FROM parquet.`/etc`",
    "SELECT * FROM {name}",
    "SELECT * FROM range(10)",
    "INSERT INTO sales SELECT * FROM sales",
    "not sql at all",
    "",
    "SELECT " + "(" * 3000 + "1" + ")" * 3000 + " AS deep FROM sales",
]
ACTIONS = get_codec().schema("io.mvs.DdlAction")["symbols"]  # every action a producer may write
NAME = re.compile(r"[a-z_][a-z0-9_]*")
TOPICS = ["ddl", "manager", "maintainer", "coordinator", "catalog"]


def _spec(rng: random.Random, name: str) -> dict[str, Any]:
    kind = rng.choice(["EVERY", "ON_CHANGE", "ON_DEMAND", "TARGET_LAG"])
    interval = rng.choice([None, 0, -1, 1, 1000, 2**63 - 1])
    return {
        "query": rng.choice(QUERIES).format(name=name or "x"),
        "refresh_mode": rng.choice(["COMPLETE", "FAST", "FORCE"]),
        "trigger": {"kind": kind, "interval_ms": interval},
        "base_tables": rng.choice([[], ["sales"], [name], ["../x"]]),
    }


def adversarial_ddl(rng: random.Random) -> dict[str, Any]:
    name = rng.choice(NAMES)
    action = rng.choice(ACTIONS)
    return {
        "schema_version": rng.choice([1, 1, 1, 1, 0, 2, -7]),
        "event_id": uuid.uuid4().hex,
        "issued_at": rng.choice([0, -1, 2**62, 1767225600000]),
        "issued_by": rng.choice(["", "User:admin", "x" * 500]),
        "action": action,
        "name": name,
        "mv": rng.choice([None, _spec(rng, name)]),
        "mv_log": rng.choice(
            [None, {"base_table": rng.choice(NAMES), "purge_interval_ms": rng.choice([-5, 0, 1, 60_000])}]
        ),
        "sql": rng.choice([None, "", "DROP TABLE sales"]),
    }


def adversarial_task(rng: random.Random) -> dict[str, Any]:
    name = rng.choice(NAMES)
    is_mv = rng.random() < 0.7
    return {
        "task_id": rng.choice([f"mv:{name}", f"mvlog:{name}", name, "mv:", ":"]),
        "kind": "MV" if is_mv else "MV_LOG",
        "name": name,
        "mv": rng.choice([None, _spec(rng, name)]) if is_mv else None,
        "mv_log": None if is_mv else rng.choice([None, {"base_table": name, "purge_interval_ms": 0}]),
        "state": rng.choice(["NORMAL", "WARNING", "FAILED", "PAUSED", "FINISHED"]),
        "epoch": rng.choice([0, 1, 2**40, -3]),
        "error": None,
        "checkpoint": rng.choice([{}, {"sales": -1}, {"../x": 5}, {"sales": 2**60}]),
        "safepoint": rng.choice([None, -1, 0, 2**60]),
        "owner": rng.choice([None, "chaos-worker", ""]),
        "last_run": None,
        "next_run_at": rng.choice([None, 0, -1, 2**62]),
        "created_at": 0,
        "updated_at": 0,
    }


def adversarial_manager_command(rng: random.Random) -> dict[str, Any]:
    task = adversarial_task(rng)
    return {
        "command_id": uuid.uuid4().hex,
        "coordinator_epoch": rng.choice([0, 2**62]),
        "kind": rng.choice(["ADD_MAINTAINER", "REMOVE_MAINTAINER", "BOOTSTRAP"]),
        "task_id": rng.choice([task["task_id"], "__bootstrap__/x", "__bootstrap__/99"]),
        "epoch": rng.choice([0, 2**40]),
        "task": rng.choice([None, task]),
    }


def adversarial_maintainer_command(rng: random.Random) -> dict[str, Any]:
    return {
        "command_id": uuid.uuid4().hex,
        "coordinator_epoch": rng.choice([0, 2**62]),
        "kind": rng.choice(["REFRESH_NOW", "CANCEL_RUN", "SAFEPOINT"]),
        "task_id": rng.choice([f"mv:{rng.choice(NAMES)}", "mvlog:sales", "mv:by_region"]),
        "epoch": rng.choice([0, 1, 2**40]),
        "safepoint": rng.choice([None, -1, 2**60]),
    }


def adversarial_heartbeat(rng: random.Random) -> dict[str, Any]:
    statuses = []
    for _ in range(rng.randint(0, 4)):
        task = adversarial_task(rng)
        statuses.append(
            {
                "task_id": task["task_id"],
                "epoch": task["epoch"],
                "state": task["state"],
                "checkpoint": task["checkpoint"],
                "last_run": None,
                "next_run_at": task["next_run_at"],
                "error": None,
            }
        )
    return {
        "worker_id": rng.choice(["chaos-worker", "", "w1"]),
        "sent_at": rng.choice([0, -1, 2**62]),
        "coordinator_epoch": rng.choice([0, 2**62]),
        "full": rng.random() < 0.5,
        "statuses": statuses,
        "removed": rng.choice([[], ["mv:nope"], ["../x"]]),
    }


@pytest.fixture(scope="module")
def chaos_settings(kafka_bootstrap: str, tmp_path_factory: pytest.TempPathFactory) -> Settings:
    return one_broker_settings(kafka_bootstrap, "chaos", tmp_path_factory.mktemp("chaos"))


@pytest.fixture(scope="module")
def harness(
    chaos_settings: Settings, spark: Any, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Harness]:
    fleet = Fleet(chaos_settings, Path(tmp_path_factory.mktemp("chaos-logs")))
    h = Harness(chaos_settings, fleet, spark)
    try:
        fleet.coordinator("c1")
        worker = h.new_worker()
        create_table(spark, chaos_settings, "sales", rows(0, 12), SCHEMA)
        h.wait_warm(worker)
        yield h
    finally:
        fleet.close()
        h.close()


def test_a_storm_of_bad_records_stops_nothing_and_loses_nothing(harness: Harness, spark: Any) -> None:
    h, settings, rng = harness, harness.settings, random.Random(SEED)
    base_before = sorted(tuple(r.values()) for r in read_table(spark, settings, "sales"))
    h.ok("CREATE MATERIALIZED VIEW LOG ON sales")
    h.ok(f"CREATE MATERIALIZED VIEW by_region REFRESH FAST ON DEMAND AS {BY_REGION}")
    step("chaos: sending the storm")

    events: list[dict[str, Any]] = []
    sent = {"bytes": 0, "ddl": 0, "manager": 0, "maintainer": 0, "coordinator": 0}
    with TypedProducer(settings) as producer:
        for _ in range(40):
            event = adversarial_ddl(rng)
            # A record the schema itself cannot hold (e.g. an int out of range) is not a test of mvs.
            try:
                producer.send("ddl", event["name"][:200] or "k", event)
            except Exception:  # noqa: BLE001 - the codec refusing a record is fine here
                continue
            events.append(event)
            sent["ddl"] += 1
        for topic, make in (
            ("manager", adversarial_manager_command),
            ("maintainer", adversarial_maintainer_command),
            ("coordinator", adversarial_heartbeat),
        ):
            for _ in range(25):
                record = make(rng)
                key = str(record.get("task_id") or record.get("worker_id") or "k")[:200]
                try:
                    producer.send(topic, key, record)
                except Exception:  # noqa: BLE001
                    continue
                sent[topic] += 1
        for _ in range(20):
            topic = rng.choice(TOPICS)
            size = rng.choice([0, 1, 5, 64, 4096])
            producer.produce_raw(topic, rng.randbytes(8), rng.randbytes(size))
            sent["bytes"] += 1
        producer.flush()
    step(f"chaos: sent {sent}")

    # Every DDL event gets exactly one answer (none lost, none applied twice) ...
    ids = {e["event_id"] for e in events}

    def answered() -> dict[str, int] | None:
        counts: dict[str, int] = {}
        for message in read_to_end(settings, "ddl.results"):
            if message.value is not None and message.value["event_id"] in ids:
                counts[message.value["event_id"]] = counts.get(message.value["event_id"], 0) + 1
        return counts if len(counts) == len(ids) else None

    counts = wait_until(answered, timeout_s=120, what="an answer to every DDL event of the storm")
    assert set(counts.values()) == {1}, {k: v for k, v in counts.items() if v != 1}

    # ... the roles are alive, and valid DDL after the storm is applied and refreshes.
    assert all(role.alive for role in h.fleet.roles), h.fleet.logs()
    after = h.ok(f"CREATE MATERIALIZED VIEW after_storm REFRESH COMPLETE ON DEMAND AS {BY_REGION}")
    assert after["task_id"] == "mv:after_storm"
    h.wait_run("mv:after_storm", states={"COMPLETED"}, timeout_s=180)
    assert mv_rows(spark, settings, "after_storm") == query_rows(spark, settings, BY_REGION)
    h.ok("REFRESH MATERIALIZED VIEW by_region")
    wait_until(
        lambda: mv_rows(spark, settings, "by_region") == query_rows(spark, settings, BY_REGION),
        timeout_s=180,
        what="by_region equal to its query after the storm",
    )

    # No MV replaced the base, and nothing was written outside the warehouse.
    assert sorted(tuple(r.values()) for r in read_table(spark, settings, "sales")) == base_before
    warehouse = Path(settings.warehouse)
    assert not (warehouse.parent / "escape").exists() and not (warehouse.parent.parent / "escape").exists()
    tables = {p.name for p in warehouse.iterdir() if not p.name.startswith("_")}
    assert {"after_storm", "by_region", "sales", "sales__mlog"} <= tables
    assert all(NAME.fullmatch(t) for t in tables), tables
    assert all(role.alive for role in h.fleet.roles), h.fleet.logs()
    step(f"chaos: {len(events)} DDL events answered once each; roles alive")
