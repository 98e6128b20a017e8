"""Soak: DDL and base changes for N minutes while workers, coordinators and the broker die at random.

    .venv/bin/python -m bench.soak [--minutes 5] [--workers 2] [--coordinators 2] [--seed 1]

Real processes (``python -m workers.cli coordinator|worker``) on a broker of the soak's own (the
embedded jars: it is stopped and killed), Spark and Delta. Three MVs live through the whole soak
(FAST ON CHANGE aggregate, COMPLETE EVERY 5 s aggregate, FORCE ON CHANGE projection) and short-lived
ones are created, paused, resumed, refreshed and dropped while the soak appends to and deletes from
the base. Faults, one at a time (the next once the fleet has recovered from the last, at least 20 s
apart): kill -9 or SIGTERM a worker (a replacement starts), kill -9 a coordinator (it restarts),
stop the broker with SIGTERM or kill -9 for 5-20 s.

At the end (faults stopped) it waits for every MV to reflect the base's latest version and checks:
- every MV equals its query over the base at that version;
- every DDL event that reached the DDL topic got exactly one answer (none lost, none applied twice),
  and the catalog holds exactly the MVs that the accepted answers say exist;
- no role exited by itself (only the soak's own kills end a process).
It prints a table of the faults (count, recovery p50 / max: from the fault's end until every MV had
caught up with the base version of that moment) and one JSON line.
"""

from __future__ import annotations

import argparse
import contextlib
import random
import shutil
import tempfile
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.common import percentile, report
from tests.integration.cluster import wait_until
from tests.integration.processes import Fleet, Role
from workers.catalog.store import restore_catalog
from workers.ddl.parser import parse_statement
from workers.demo_tables import append, create_table, read_table
from workers.embedded.broker import EmbeddedKafka, free_port, one_broker_settings
from workers.jobs import get_spark, is_write_conflict
from workers.kafka.typed import BusError, TypedProducer, read_to_end
from workers.records import Record
from workers.warehouse import latest_version, table_path

SCHEMA = "id BIGINT, region STRING, amount BIGINT"
REGIONS = ["north", "south", "east", "west"]
LASTING = {
    "agg_fast": "REFRESH FAST ON CHANGE AS SELECT region, sum(amount) AS total, count(*) AS n "
    "FROM sales GROUP BY region",
    "agg_complete": "REFRESH COMPLETE EVERY 5 SECONDS AS SELECT region, max(amount) AS top "
    "FROM sales GROUP BY region",
    "proj_force": "REFRESH FORCE ON CHANGE AS SELECT id, amount FROM sales WHERE amount > 50",
}
SHORT_QUERY = "SELECT region, count(*) AS n FROM sales GROUP BY region"


@dataclass
class Outcome:
    faults: dict[str, list[float]] = field(default_factory=dict)  # kind → recovery seconds
    unrecovered: dict[str, int] = field(default_factory=dict)
    ddl_sent: int = 0
    ddl_undelivered: int = 0
    base_commits: int = 0


class Soak:
    def __init__(self, root: Path, workers: int, coordinators: int, seed: int) -> None:
        self.rng = random.Random(seed)
        self.broker = EmbeddedKafka(root / "kafka", port=free_port(), controller_port=free_port()).start()
        self.settings = one_broker_settings(self.broker.bootstrap_servers, "soak", root)
        # A heartbeat timeout well under the outages, so restarts after an outage are exercised too.
        self.fleet = Fleet(self.settings, root / "logs", env={"MVS_HEARTBEAT_TIMEOUT_S": "10"}, verbose=True)
        self.spark = get_spark(self.settings)
        self.producer = TypedProducer(self.settings)
        self.killed: set[int] = set()  # pids the soak ended itself
        self.events: list[Record] = []
        self.next_id = 10_000
        self.short_mvs: set[str] = set()
        self.outcome = Outcome()
        self.pace = threading.Event()  # never set: paces the soak's own loop
        self.pending: list[tuple[str, float, dict[str, int]]] = []  # (fault, ended, target versions)
        for i in range(coordinators):
            self.fleet.coordinator(f"c{i + 1}")
        self._workers = 0
        for _ in range(workers):
            self._new_worker()
        create_table(self.spark, self.settings, "sales", self._rows(0, 200), SCHEMA)

    # -- roles ----------------------------------------------------------------------------------
    def _new_worker(self) -> Role:
        self._workers += 1
        return self.fleet.worker(f"w{self._workers}")

    def _live(self, kind: str) -> list[Role]:
        return [r for r in self.fleet.roles if r.kind == kind and r.alive]

    def _end(self, role: Role, how: Callable[[], Any]) -> None:
        self.killed.add(role.pid)
        how()

    # -- inputs ---------------------------------------------------------------------------------
    def _rows(self, start: int, count: int) -> list[Record]:
        return [
            {"id": i, "region": REGIONS[i % 4], "amount": (i * 37) % 101} for i in range(start, start + count)
        ]

    def change_base(self) -> None:
        """Append or delete some rows, as a user's writer would: retrying a write conflict with
        mvs's own commits to the base (enabling the change feed for the MV log)."""
        for attempt in range(5):
            try:
                self._change_base()
                return
            except Exception as exc:
                if not is_write_conflict(exc) or attempt == 4:
                    raise

    def _change_base(self) -> None:
        if self.rng.random() < 0.8:
            append(self.spark, self.settings, "sales", self._rows(self.next_id, self.rng.randint(1, 50)))
            self.next_id += 50
        else:
            from delta.tables import DeltaTable

            DeltaTable.forPath(self.spark, table_path(self.settings, "sales")).delete(
                f"id % {self.rng.randint(7, 23)} = 0"
            )
        self.outcome.base_commits += 1

    def ddl(self, statement: str) -> None:
        event = parse_statement(statement, issued_by="soak")
        self.events.append(event)
        self.outcome.ddl_sent += 1
        try:
            self.producer.send("ddl", event["name"], event)
            self.producer.flush(10.0)
        except BusError:
            self.outcome.ddl_undelivered += 1  # still queued: it may arrive later, which is fine

    def churn_ddl(self) -> None:
        choice = self.rng.random()
        if choice < 0.35 or not self.short_mvs:
            name = f"short_{uuid.uuid4().hex[:6]}"
            self.short_mvs.add(name)
            self.ddl(f"CREATE MATERIALIZED VIEW {name} REFRESH COMPLETE ON CHANGE AS {SHORT_QUERY}")
        elif choice < 0.6:
            name = self.rng.choice(sorted(self.short_mvs))
            self.short_mvs.discard(name)
            self.ddl(f"DROP MATERIALIZED VIEW {name}")
        elif choice < 0.8:
            name = self.rng.choice(sorted(LASTING))
            self.ddl(f"ALTER MATERIALIZED VIEW {name} PAUSE")
            self.ddl(f"ALTER MATERIALIZED VIEW {name} RESUME")
        else:
            self.ddl(f"REFRESH MATERIALIZED VIEW {self.rng.choice(sorted(LASTING))}")

    # -- faults ---------------------------------------------------------------------------------
    def fault(self) -> str:
        kind = self.rng.choice(
            ["kill -9 worker", "SIGTERM worker", "kill -9 coordinator", "broker SIGTERM", "broker kill -9"]
        )
        if kind.endswith("worker"):
            victim = self.rng.choice(self._live("worker"))
            self._end(victim, victim.kill if kind.startswith("kill") else victim.terminate)
            self._new_worker()
        elif kind.endswith("coordinator"):
            victim = self.rng.choice(self._live("coordinator"))
            self._end(victim, victim.kill)
            self.fleet.coordinator(f"{victim.name}r")
        else:
            if kind == "broker SIGTERM":
                self.broker.stop()
            else:
                self.broker.kill()
            down = self.rng.uniform(5, 20)
            ends = time.monotonic() + down
            while time.monotonic() < ends:  # the base keeps changing while the bus is away
                self.change_base()
                self.pace.wait(1.0)
            self.broker.start()
        target = {"sales": latest_version(self.settings, "sales") or 0}
        self.pending.append((kind, time.monotonic(), target))
        return kind

    def check_recoveries(self, catalog: dict[str, Record]) -> None:
        lasting = [catalog.get(f"mv:{name}") for name in LASTING]
        still = []
        for kind, ended, target in self.pending:
            caught = all(
                t is not None
                and (t["state"] == "PAUSED" or t["checkpoint"].get("sales", -1) >= target["sales"])
                for t in lasting
            )
            if caught:
                self.outcome.faults.setdefault(kind, []).append(time.monotonic() - ended)
            else:
                still.append((kind, ended, target))
        self.pending = still

    # -- the soak -------------------------------------------------------------------------------
    def run(self, minutes: float) -> None:
        self.ddl("CREATE MATERIALIZED VIEW LOG ON sales")
        wait_until(
            lambda: "mvlog:sales" in restore_catalog(self.settings), timeout_s=300, what="the MV log on sales"
        )
        for name, body in LASTING.items():
            self.ddl(f"CREATE MATERIALIZED VIEW {name} {body}")
        deadline = time.monotonic() + minutes * 60
        last_fault = time.monotonic()
        while time.monotonic() < deadline:
            roll = self.rng.random()
            if roll < 0.5:
                self.change_base()
            elif roll < 0.75:
                self.churn_ddl()
            elif not self.pending and time.monotonic() - last_fault > 20:
                # One fault at a time: the next comes once the last one's recovery is measured.
                print(
                    f"[{minutes * 60 - (deadline - time.monotonic()):6.0f}s] fault: {self.fault()}",
                    flush=True,
                )
                last_fault = time.monotonic()
            with contextlib.suppress(BusError):  # the broker may be starting up again
                self.check_recoveries(restore_catalog(self.settings))
            self.pace.wait(1.0)
        for kind, _, _ in self.pending:
            self.outcome.unrecovered[kind] = self.outcome.unrecovered.get(kind, 0) + 1

    # -- the end --------------------------------------------------------------------------------
    def settle(self, timeout_s: float = 600) -> dict[str, Record]:
        """Every live MV current at the base's latest version (paused ones resumed first)."""
        for name in LASTING:
            self.ddl(f"ALTER MATERIALIZED VIEW {name} RESUME")
        version = latest_version(self.settings, "sales")

        def current() -> dict[str, Record] | None:
            tasks = {k: v for k, v in restore_catalog(self.settings).items() if v["kind"] == "MV"}
            ok = all(
                t["checkpoint"].get("sales") == version and t["state"] == "NORMAL" for t in tasks.values()
            )
            return tasks if ok and tasks else None

        return wait_until(current, timeout_s=timeout_s, what="every MV current at the latest base version")

    def verify(self, tasks: dict[str, Record]) -> dict[str, Any]:
        base = self.spark.read.format("delta").load(table_path(self.settings, "sales"))
        base.createOrReplaceTempView("sales")
        unequal = []
        for task in tasks.values():
            expected = sorted(tuple(r) for r in self.spark.sql(task["mv"]["query"]).collect())
            got = sorted(tuple(r.values()) for r in read_table(self.spark, self.settings, task["name"]))
            if expected != got:
                unequal.append(task["name"])
        self.spark.catalog.dropTempView("sales")
        # DDL: exactly one answer per delivered event, and the catalog is what the answers say.
        delivered = [m.value for m in read_to_end(self.settings, "ddl") if m.value is not None]
        answers: dict[str, list[Record]] = {}
        for message in read_to_end(self.settings, "ddl.results"):
            if message.value is not None:
                answers.setdefault(message.value["event_id"], []).append(message.value)
        lost = [e["event_id"] for e in delivered if e["event_id"] not in answers]
        twice = [k for k, v in answers.items() if len(v) > 1]
        expected_mvs: set[str] = set()
        for event in delivered:
            answer = answers.get(event["event_id"], [{}])[0]
            if answer.get("accepted") and event["action"] == "CREATE_MV":
                expected_mvs.add(event["name"])
            elif answer.get("accepted") and event["action"] == "DROP_MV":
                expected_mvs.discard(event["name"])
        own = {e["event_id"] for e in self.events}
        never = [e for e in own if e not in {d["event_id"] for d in delivered}]
        exited = [r.name for r in self.fleet.roles if not r.alive and r.pid not in self.killed]
        return {
            "mvs": len(tasks),
            "unequal_mvs": unequal,
            "ddl_delivered": len(delivered),
            "ddl_never_delivered": len(never),
            "ddl_unanswered": lost,
            "ddl_answered_twice": twice,
            "catalog_matches_answers": expected_mvs == {t["name"] for t in tasks.values()},
            "roles_exited_by_themselves": exited,
        }

    def close(self) -> None:
        self.producer.close(5)
        self.fleet.close()
        self.broker.stop()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.soak")
    parser.add_argument("--minutes", type=float, default=5.0)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--coordinators", type=int, default=2)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--keep", action="store_true", help="keep the soak's folder (logs, warehouse)")
    args = parser.parse_args(argv)
    root = Path(tempfile.mkdtemp(prefix="mvs-soak-"))
    print(f"soak folder: {root}", flush=True)
    soak = Soak(root, args.workers, args.coordinators, args.seed)
    began = time.monotonic()
    try:
        soak.run(args.minutes)
        settle_began = time.monotonic()
        tasks = soak.settle()
        settled_s = time.monotonic() - settle_began
        figures = soak.verify(tasks)
    finally:
        soak.close()
        if not args.keep:
            shutil.rmtree(root, ignore_errors=True)
    out = soak.outcome
    rows = []
    for kind in sorted(set(out.faults) | set(out.unrecovered)):
        times = out.faults.get(kind, [])
        p50, top = (f"{percentile(times, 50):.1f}", f"{max(times):.1f}") if times else ("-", "-")
        rows.append([kind, len(times) + out.unrecovered.get(kind, 0), p50, top, out.unrecovered.get(kind, 0)])
    figures.update(
        minutes=args.minutes,
        wall_s=round(time.monotonic() - began, 1),
        settle_s=round(settled_s, 1),
        base_commits=out.base_commits,
        ddl_sent=out.ddl_sent,
        ddl_flush_failed=out.ddl_undelivered,
        faults={
            k: len(out.faults.get(k, [])) + out.unrecovered.get(k, 0) for k in {*out.faults, *out.unrecovered}
        },
        recovery_max_s={k: round(max(v), 1) for k, v in out.faults.items()},
    )
    report(
        "soak: faults and recovery (from the fault's end until every lasting MV caught up)",
        ["fault", "count", "recovery p50 s", "max s", "still catching up at the end"],
        rows,
        figures,
    )
    bad = figures["unequal_mvs"] or figures["ddl_unanswered"] or figures["ddl_answered_twice"]
    bad = bad or figures["roles_exited_by_themselves"] or not figures["catalog_matches_answers"]
    return 1 if bad else 0


if __name__ == "__main__":
    raise SystemExit(main())
