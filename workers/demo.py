"""The live demo: one command, everything real, stopped cleanly at the end.

Starts the embedded Kafka broker, applies the topics, creates sample Delta tables `sales` and
`regions`, starts one coordinator and two worker processes, creates MV logs and three MVs through the
same path a user takes (`mvs sql`) — one of them a FAST join of both tables — appends data a few times
(and changes a region's manager once) and shows the MVs catching up in a live status table, then
checks each MV against its query, shows how the join MV was refreshed, and stops everything.
"""

from __future__ import annotations

import contextlib
import os
import random
import shutil
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from workers.client import MvsClient, StatementError
from workers.config import CACHE_DIR, REPO_ROOT, Settings
from workers.embedded.broker import EmbeddedKafka
from workers.embedded.objectstore import EmbeddedObjectStore
from workers.embedded.registry import EmbeddedRegistry
from workers.status import status_table
from workers.warehouse import latest_version, table_path

REGIONS = ["north", "south", "east", "west"]
MANAGERS = {"north": "ann", "south": "bob", "east": "cy", "west": "di"}
JOIN_QUERY = (
    "SELECT s.id, s.amount, r.manager FROM sales s JOIN regions r ON s.region = r.region "
    "WHERE s.amount >= 150"
)
# TPC-H-shaped (Q5's comma join with its equality in WHERE, Q14's share of a CASE sum): refreshed FAST
# by the join aggregate's linear rule, its SUMs kept with helper state, never re-read from the bases.
REVENUE_QUERY = (
    "SELECT r.manager, COUNT(*) AS orders, SUM(s.amount * 0.95) AS net_revenue, "
    "100.00 * SUM(CASE WHEN s.amount >= 150 THEN s.amount ELSE 0 END) / SUM(s.amount) AS big_share "
    "FROM sales s, regions r WHERE s.region = r.region GROUP BY r.manager"
)
STATEMENTS = [
    "CREATE MATERIALIZED VIEW LOG ON sales PURGE EVERY 10 SECONDS",
    "CREATE MATERIALIZED VIEW LOG ON regions PURGE EVERY 10 SECONDS",
    "CREATE MATERIALIZED VIEW sales_by_region REFRESH COMPLETE EVERY 5 SECONDS AS "
    "SELECT region, sum(amount) AS total, count(*) AS orders FROM sales GROUP BY region",
    "CREATE MATERIALIZED VIEW big_sales REFRESH FAST ON CHANGE AS "
    "SELECT id, region, amount FROM sales WHERE amount >= 100",
    f"CREATE MATERIALIZED VIEW top_sales_by_manager REFRESH FAST ON CHANGE AS {JOIN_QUERY}",
    f"CREATE MATERIALIZED VIEW revenue_by_manager REFRESH FAST ON CHANGE AS {REVENUE_QUERY}",
]
BAD_STATEMENTS = [
    # refused by the parser before anything is published
    "CREATE MATERIALIZED VIEW broken REFRESH COMPLETE EVERY 5 SECONDS AS DELETE FROM sales",
    # published, refused by the coordinator (unknown table): the answer carries the code and reason,
    # nothing is added to the catalog (a corrected CREATE of the same name then just works)
    "CREATE MATERIALIZED VIEW returns_by_region REFRESH COMPLETE EVERY 5 SECONDS AS "
    "SELECT region, count(*) AS n FROM returns GROUP BY region",
]
QUERIES = {
    "sales_by_region": "SELECT region, sum(amount) AS total, count(*) AS orders FROM sales GROUP BY region",
    "big_sales": "SELECT id, region, amount FROM sales WHERE amount >= 100",
    "top_sales_by_manager": JOIN_QUERY,
    "revenue_by_manager": REVENUE_QUERY,
}
BASES = {
    "sales_by_region": ("sales",),
    "big_sales": ("sales",),
    "top_sales_by_manager": ("sales", "regions"),
    "revenue_by_manager": ("sales", "regions"),
}


def _rows(start_id: int, count: int, rng: random.Random) -> list[dict[str, Any]]:
    return [
        {"id": start_id + i, "region": rng.choice(REGIONS), "amount": rng.randint(1, 200)}
        for i in range(count)
    ]


def _say(text: str) -> None:
    print(f"\n== {text}", flush=True)


def _spawn(role: str, env: dict[str, str], log_dir: Path) -> subprocess.Popen[bytes]:
    log = open(log_dir / f"{role}.log", "wb")  # noqa: SIM115 - owned by the child
    return subprocess.Popen(
        [sys.executable, "-m", "workers.cli", "-v", role.split("-")[0]],
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
        cwd=REPO_ROOT,
    )


def _caught_up(client: MvsClient, settings: Settings) -> tuple[bool, dict[str, Any]]:
    tasks = client.tasks()
    done = all(
        tasks.get(f"mv:{name}", {}).get("checkpoint", {}).get(base) == latest_version(settings, base)
        for name, bases in BASES.items()
        for base in bases
    )
    return done, tasks


def _hold_page(settings: Settings) -> None:
    """Keep the fleet and its status page up until Enter or Ctrl-C (the page goes dark after)."""
    print(f"the fleet keeps running: http://127.0.0.1:{settings.api_port}/ — press Enter to stop", flush=True)
    with contextlib.suppress(KeyboardInterrupt):
        sys.stdin.readline()


def run_demo(
    rounds: int = 3,
    timeout_s: float = 180.0,
    *,
    registry: bool = False,
    status_page: bool = False,
    object_store: bool = False,
) -> int:
    started = time.monotonic()
    demo_dir = CACHE_DIR / "demo"
    shutil.rmtree(demo_dir, ignore_errors=True)
    demo_dir.mkdir(parents=True)
    local_warehouse = REPO_ROOT / "warehouse" / "demo"
    shutil.rmtree(local_warehouse, ignore_errors=True)
    broker = EmbeddedKafka(demo_dir / "kafka", port=19092, controller_port=19093)
    processes: list[subprocess.Popen[bytes]] = []
    schema_registry: EmbeddedRegistry | None = None
    store: EmbeddedObjectStore | None = None
    _say("starting the Kafka broker (KRaft, official jars)")
    broker.start()
    try:
        env = {
            **os.environ,
            "MVS_BOOTSTRAP_SERVERS": broker.bootstrap_servers,
            "MVS_WAREHOUSE": str(local_warehouse),
            "MVS_NAMESPACE": "demo",
            "MVS_REPLICATION_FACTOR": "1",
        }
        if object_store:
            _say("starting the S3-compatible object store (versitygw); the warehouse is s3://mvs/demo")
            store = EmbeddedObjectStore(demo_dir / "s3", port=19014).start()
            env.update(store.environment(), MVS_WAREHOUSE=f"{store.create_bucket('mvs')}/demo")
        settings = Settings.from_env(env, embedded=False)
        if registry:
            _say("starting the schema registry (Apicurio, its schemas kept in the broker)")
            schema_registry = EmbeddedRegistry(
                demo_dir / "registry", port=8081, bootstrap_servers=broker.bootstrap_servers
            ).start()
            settings = replace(settings, schema_registry_url=schema_registry.url)
            env["MVS_SCHEMA_REGISTRY_URL"] = schema_registry.url
        from workers.kafka.admin import apply_topics

        _say("mvs topics apply")
        print(apply_topics(settings))
        if registry:
            from workers.kafka.subjects import apply_schemas

            _say("mvs schemas apply (records are now in the Confluent wire format)")
            print(apply_schemas(settings))
        roles = ["coordinator", "worker-1", "worker-2", *(["serve"] if status_page else [])]
        _say(
            f"starting a coordinator, 2 workers{', the REST API' if status_page else ''} (logs: .cache/demo/)"
        )
        processes = [_spawn(role, env, demo_dir) for role in roles]
        if status_page:
            print(f"status page: http://127.0.0.1:{settings.api_port}/", flush=True)
        _say("creating the base tables `sales` and `regions` (Delta) with Spark")
        from workers.demo_tables import append, create_table, read_table
        from workers.jobs import get_spark

        spark = get_spark(settings)
        rng = random.Random(7)
        create_table(spark, settings, "sales", _rows(0, 20, rng), "id BIGINT, region STRING, amount BIGINT")
        managers = [{"region": r, "manager": m} for r, m in MANAGERS.items()]
        create_table(spark, settings, "regions", managers, "region STRING, manager STRING")
        next_id = 20
        client = MvsClient(settings, issued_by="demo")
        for statement in [*STATEMENTS, *BAD_STATEMENTS]:
            print(f"mvs sql {statement!r}")
            try:
                result = client.execute(statement, timeout_s=60)
            except StatementError as exc:
                print(f"   → ERROR {exc.code} (not published): {exc}")
                continue
            assert result is not None
            print(
                "   →",
                "OK"
                if result["accepted"]
                else f"ERROR {result['error']['code']}: {result['error']['message']}",
            )
        for round_no in range(rounds + 1):
            if round_no:
                _say(f"round {round_no}: appending 10 rows to sales")
                append(spark, settings, "sales", _rows(next_id, 10, rng))
                next_id += 10
            if round_no == 2:  # the other side of the join changes too
                print("   and a new manager for the north region")
                regions = table_path(settings, "regions")
                spark.sql(f"UPDATE delta.`{regions}` SET manager = 'eve' WHERE region = 'north'")
            deadline = time.monotonic() + timeout_s
            while True:
                done, tasks = _caught_up(client, settings)
                print(status_table(tasks, lambda t: latest_version(settings, t)), flush=True)
                if done:
                    break
                if time.monotonic() > deadline:
                    print("MVs did not catch up in time; see .cache/demo/*.log", file=sys.stderr)
                    return 1
                time.sleep(1.0)
                print()
            versions = ", ".join(f"{b}@v{latest_version(settings, b)}" for b in ("sales", "regions"))
            print(f"-- every MV reflects {versions}")
        _say("checking every MV against its query over the base tables")
        ok = True
        oracle = spark.newSession()  # its temp views `sales` and `regions` are the tables now
        for base in ("sales", "regions"):
            oracle.read.format("delta").load(table_path(settings, base)).createTempView(base)
        for name, query in QUERIES.items():
            expected = sorted(tuple(row) for row in oracle.sql(query).collect())
            actual = sorted(tuple(row.values()) for row in read_table(spark, settings, name))
            ok &= expected == actual
            verdict = "equal to" if expected == actual else "DIFFERENT FROM"
            print(f"{name}: {len(actual)} rows, {verdict} its query")
        for name in ("top_sales_by_manager", "revenue_by_manager"):
            _say(f"how the FAST MV {name} was refreshed, run by run")
            for run in client.history(f"mv:{name}"):
                if run["state"] == "COMPLETED":
                    print(f"   {run['message']}")
        _say("run history (last 8)")
        from workers.status import history_table

        print(history_table(client.history(limit=8)))
        if registry:
            print("\nKafka's console consumer reads the runs: bin/mvs-console-consumer runs --from-beginning")
        client.close()
        print(f"\ndemo finished in {time.monotonic() - started:.1f}s", flush=True)
        if status_page and sys.stdin.isatty():
            _hold_page(settings)
        return 0 if ok else 1
    finally:
        _say("stopping workers, coordinator and broker")
        for process in processes:
            process.terminate()
        for process in processes:
            try:
                process.wait(60)
            except subprocess.TimeoutExpired:
                process.kill()
        from workers.jobs import stop_spark

        stop_spark()
        if schema_registry is not None:
            schema_registry.stop()
        if store is not None:
            store.stop()
        broker.stop()
