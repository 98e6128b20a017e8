"""Pipelines of MVs (issue 29): how long a base change takes to flow down a chain of MVs, against the
sum of the chain's own FAST runs; and whether an MV reading two MVs of one base always reads them at
one consistent cut while the base keeps changing.

    .venv/bin/python -m bench.pipeline [--rows 100000] [--rounds 6] [--burst 10] [--keep]

Real processes (a coordinator and two workers), the embedded broker (or ``MVS_BOOTSTRAP_SERVERS``),
Spark and Delta. The base tables are written with delta-rs from here, as any producer writes them.
The graph, created in one script (intermediate MVs ``TARGET LAG DOWNSTREAM``, driven by their
readers' ``ON CHANGE``)::

    orders ─▶ big (projection) ─▶ by_customer (aggregate) ─▶ enriched (⋈ customers)
                 └──────────────────────┴──▶ share (big ⋈ by_customer: a fan-in of one base)

Rounds: 0.1 % of the orders appended at once, then the time from that commit until ``enriched`` and
``share`` reflect it (their run records' end), against the sum of the three chain runs that carried
it (each run's own start to end). Goal: the chain current within 1.5 × that sum. Burst: ``--burst``
appends one second apart without waiting, then every commit ``share`` made is checked: the versions
of ``big`` and ``by_customer`` it read reflect one and the same version of ``orders``. At the end
every MV is compared with its query at its watermark (a Spark session here, after the fleet).
"""

from __future__ import annotations

import argparse
import re
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import pyarrow as pa
from deltalake import write_deltalake

from bench.common import broker, percentile, report
from tests.support.cluster import wait_until
from tests.support.cuts import inconsistent_cuts
from tests.support.processes import Fleet, Tail
from workers import warehouse
from workers.client import MvsClient
from workers.config import Settings
from workers.embedded.broker import one_broker_settings
from workers.jobs import read_watermark
from workers.records import Record

CUSTOMERS = 1000
STATEMENTS = [
    "CREATE MATERIALIZED VIEW LOG ON orders",
    "CREATE MATERIALIZED VIEW LOG ON customers",
    "CREATE MATERIALIZED VIEW big REFRESH FAST TARGET LAG DOWNSTREAM AS "
    "SELECT id, customer, amount FROM orders WHERE amount >= 10",
    "CREATE MATERIALIZED VIEW LOG ON big",
    "CREATE MATERIALIZED VIEW by_customer REFRESH FAST TARGET LAG DOWNSTREAM AS "
    "SELECT customer, SUM(amount) AS total, COUNT(*) AS n FROM big GROUP BY customer",
    "CREATE MATERIALIZED VIEW LOG ON by_customer",
    "CREATE MATERIALIZED VIEW enriched REFRESH FAST ON CHANGE AS "
    "SELECT b.customer, b.total, c.region FROM by_customer b JOIN customers c ON b.customer = c.customer",
    "CREATE MATERIALIZED VIEW share REFRESH FAST ON CHANGE AS "
    "SELECT b.id, b.amount, s.total FROM big b JOIN by_customer s ON b.customer = s.customer",
]
CHAIN = ("big", "by_customer", "enriched")
ENDS = ("enriched", "share")
QUERIES = {s.split()[3]: s.split(" AS ", 1)[1] for s in STATEMENTS if " AS " in s}
REFLECTS = re.compile(r"reflects (?:[a-z_]+@v\d+, )*orders@v(\d+)")
GOAL = 1.5


def _orders(start: int, count: int) -> pa.Table:
    ids = list(range(start, start + count))
    return pa.table(
        {
            "id": pa.array(ids, pa.int64()),
            "customer": pa.array([i * 7919 % CUSTOMERS for i in ids], pa.int64()),
            "amount": pa.array([i * 31 % 100 for i in ids], pa.int64()),
        }
    )


def _customers() -> pa.Table:
    return pa.table(
        {
            "customer": pa.array(range(CUSTOMERS), pa.int64()),
            "region": pa.array([f"r{c % 5}" for c in range(CUSTOMERS)], pa.string()),
        }
    )


class Graph:
    """The fleet, the tables and the MVs of one run of the benchmark."""

    def __init__(self, settings: Settings, root: Path) -> None:
        self.settings = settings
        self.fleet = Fleet(settings, root / "logs")
        self.runs = Tail(settings, "runs")
        self.client = MvsClient(settings, issued_by="bench-pipeline")
        self.next_id = 0

    def path(self, table: str) -> str:
        return warehouse.table_path(self.settings, table)

    def append(self, count: int) -> int:
        """``count`` new orders in one commit; the version it made."""
        write_deltalake(self.path("orders"), _orders(self.next_id, count), mode="append")
        self.next_id += count
        return self.version("orders")

    def version(self, table: str) -> int:
        version = warehouse.latest_version(self.settings, table)
        assert version is not None, table
        return version

    def start(self, rows: int) -> None:
        write_deltalake(self.path("customers"), _customers())
        write_deltalake(self.path("orders"), _orders(0, rows))
        self.next_id = rows
        self.fleet.coordinator("c1")
        self.fleet.worker("w1")
        self.fleet.worker("w2")
        for statement in STATEMENTS:
            result = self.client.execute(statement, timeout_s=120)
            assert result is not None and result["accepted"], (statement, result)
        self.reached(self.version("orders"), timeout_s=600)

    def reached(self, version: int, *, since: int = 0, timeout_s: float = 300) -> dict[str, Record]:
        """Waits until every MV has a COMPLETED run (among the run records from index ``since``)
        reflecting ``orders@version`` or later: the first such run of each."""

        def found() -> dict[str, Record] | None:
            self.runs.poll(0.05)
            first: dict[str, Record] = {}
            for run in self.runs.records[since:]:
                name = run["task_id"].removeprefix("mv:")
                reached = _reflected(run) if run["state"] == "COMPLETED" else None
                if name in QUERIES and name not in first and reached is not None and reached >= version:
                    first[name] = run
            return first if len(first) == len(QUERIES) else None

        return wait_until(found, timeout_s=timeout_s, what=f"every MV reflecting orders@v{version}")

    def close(self) -> None:
        self.runs.close()
        self.client.close()
        self.fleet.close()


def _reflected(run: Record) -> int | None:
    """The version of ``orders`` a run's result reflects (an MV over MVs says it in its message)."""
    after = run.get("watermark_after") or {}
    if "orders" in after:
        return int(after["orders"])
    found = REFLECTS.search(run.get("message") or "")
    return int(found.group(1)) if found else None


def _round(graph: Graph, count: int) -> dict[str, float]:
    graph.runs.poll(0.05)
    mark = len(graph.runs.records)
    began_ms = time.time() * 1000
    carried = graph.reached(graph.append(count), since=mark)
    chain_sum = sum(carried[n]["ended_at"] - carried[n]["started_at"] for n in CHAIN)
    current = max(carried[n]["ended_at"] for n in ENDS) - began_ms
    fast = all((carried[n]["message"] or "").startswith("incremental") for n in QUERIES)
    return {"end_to_end_ms": current, "chain_runs_ms": chain_sum, "fast": float(fast)}


def _differences(settings: Settings) -> list[str]:
    """Each MV against its query over its inputs at its watermark (Spark, after the fleet stopped)."""
    from workers.jobs import get_spark, stop_spark

    spark = get_spark(settings)
    wrong = []
    try:
        for name, query in QUERIES.items():
            mark = read_watermark(spark, settings, name)
            assert mark is not None, name
            session = spark.newSession()
            for table, version in mark.watermark.items():
                reader = session.read.format("delta").option("versionAsOf", version)
                reader.load(warehouse.table_path(settings, table)).createOrReplaceTempView(table)
            want = sorted(map(tuple, session.sql(query).collect()))
            got = sorted(
                map(tuple, spark.read.format("delta").load(warehouse.table_path(settings, name)).collect())
            )
            if got != want:
                wrong.append(f"{name}: {len(got)} rows, its query {len(want)}")
    finally:
        stop_spark()
    return wrong


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.pipeline", description=__doc__.split("\n")[0])
    parser.add_argument("--rows", type=int, default=100_000, help="orders at the start")
    parser.add_argument("--rounds", type=int, default=6, help="timed rounds of 0.1 %% new orders")
    parser.add_argument("--burst", type=int, default=10, help="appends one second apart, not waited for")
    parser.add_argument("--keep", action="store_true", help="keep the work folder (role logs)")
    args = parser.parse_args(argv)

    root = Path(tempfile.mkdtemp(prefix="mvs-pipeline-"))
    bootstrap, stop_broker = broker(root)
    settings = one_broker_settings(bootstrap, "bench", root)
    graph = Graph(settings, root)
    started = time.monotonic()
    count = max(1, args.rows // 1000)
    try:
        graph.start(args.rows)
        rounds = [_round(graph, count) for _ in range(args.rounds)]
        for _ in range(args.burst):
            graph.append(count)
            time.sleep(1.0)
        graph.reached(graph.version("orders"))
        checked, wrong_cuts = inconsistent_cuts(settings, "share", ("big", "by_customer"), "orders")
    finally:
        graph.close()
        stop_broker()
    differences = _differences(settings)
    if not args.keep:
        shutil.rmtree(root, ignore_errors=True)
    else:
        print(f"work folder kept: {root}")

    end_to_end = [r["end_to_end_ms"] for r in rounds]
    chain = [r["chain_runs_ms"] for r in rounds]
    ratios = [e / c for e, c in zip(end_to_end, chain, strict=True)]
    ratio = percentile(ratios, 50)
    rows: list[list[object]] = [
        [
            f"{args.rows:,} orders, +{count} per round",
            len(rounds),
            f"{percentile(end_to_end, 50) / 1000:.2f}",
            f"{percentile(chain, 50) / 1000:.2f}",
            f"{ratio:.2f}",
            f"≤ {GOAL} {'ok' if ratio <= GOAL else 'MISSED'}",
            "yes" if all(r["fast"] for r in rounds) else "no",
            f"{checked - len(wrong_cuts)}/{checked}",
            len(differences),
        ]
    ]
    figures: dict[str, Any] = {
        "bench": "pipeline",
        "wall_s": round(time.monotonic() - started, 1),
        "rows": args.rows,
        "change_rows": count,
        "end_to_end_p50_s": round(percentile(end_to_end, 50) / 1000, 3),
        "chain_runs_p50_s": round(percentile(chain, 50) / 1000, 3),
        "ratio_p50": round(ratio, 3),
        "goal_ratio": GOAL,
        "all_fast": all(r["fast"] for r in rounds),
        "share_commits_checked": checked,
        "inconsistent_cuts": wrong_cuts,
        "mismatches": differences,
    }
    report(
        "A base change down a chain of MVs: seconds until the chain is current vs the sum of its runs",
        [
            "base",
            "rounds",
            "current p50",
            "Σ chain runs p50",
            "ratio p50",
            "goal",
            "all FAST",
            "fan-in cuts consistent",
            "mismatches",
        ],
        rows,
        figures,
    )
    return 0 if not wrong_cuts and not differences else 1


if __name__ == "__main__":
    sys.exit(main())
