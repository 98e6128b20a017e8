"""Failover: how long until a task runs elsewhere when its worker dies (kill -9) or leaves (SIGTERM).

    .venv/bin/python -m bench.failover [--trials 10] [--graceful-trials 10] [--no-defaults]

Real processes (``python -m workers.cli coordinator|worker``), the embedded broker (or
``MVS_BOOTSTRAP_SERVERS``), Spark and Delta. Each configuration gets a *cell*: its own namespace and
warehouse, a coordinator, two workers and four small ON DEMAND MVs.

A kill trial picks a target MV, SIGKILLs the process group (Python and JVM) of the worker holding
its partition, starts a replacement worker at once, and measures from the kill to
- claim: the first heartbeat of another worker reporting the task (it claims it at the old epoch);
- owned: the task's maintainer runs on another worker under the epoch the coordinator raised for
  it — the first record saying so: a run record of any state (PENDING: its run was submitted) or a
  heartbeat status under that epoch. This is "running elsewhere", the goal's figure;
- run: the task's first RUNNING run record on that worker (the Spark body started). It also counts
  the new owner's run queue and, on a fresh replacement, its Spark JVM start.
All from the records' own times (``Heartbeat.sent_at``, ``RunRecord.started_at``).
A graceful trial does the same with SIGTERM; its replacement starts after the measurement.
Between trials the cell settles: two workers hold every partition, every task is owned by a live
worker under its current epoch, and every live worker's Spark session is up (a worker starts it
at launch, ``SparkRunner.warm``): the figures are a running fleet's, not a JVM start's. A
new owner that finds the MV already current (its predecessor's last result) records the run
SKIPPED without any Spark job; a task whose MV is behind recomputes it, and "run" counts that
run's start. The table prints the load average: on a 2-CPU machine it shows in the figures.

Configurations: the settings mvs ships (``Settings.session_timeout_ms``) with both group protocols
(classic cooperative-sticky, and KIP-848 ``consumer`` where the session timeout is a broker-side
group config), and Kafka's defaults (``MVS_SESSION_TIMEOUT_MS=0``: librdkafka's 45 s, or the
broker's 45 s group default). The two default cells run side by side to keep the wall time sane.
Goals with the shipped settings: kill -9 p95 ≤ 10 s, SIGTERM p95 ≤ 2 s.
"""

from __future__ import annotations

import argparse
import dataclasses
import shutil
import signal
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench.common import broker, percentile, report
from tests.support.cluster import wait_until
from tests.support.processes import Fleet, Role, Tail
from workers.client import MvsClient
from workers.config import Settings
from workers.embedded.broker import one_broker_settings
from workers.kafka.admin import group_owners
from workers.kafka.messages import partition_for
from workers.records import Record
from workers.topics import topic_spec
from workers.worker.runner import SPARK_READY

PARTITIONS = topic_spec("manager").partitions
TASKS = 4
KILL, TERM = "kill -9", "SIGTERM"
GOALS = {KILL: 10.0, TERM: 2.0}
SHIPPED_SESSION_MS = Settings.session_timeout_ms


@dataclasses.dataclass
class Trial:
    kind: str
    target: str
    victim: str
    new_owner: str
    claim_s: float
    owned_s: float
    run_s: float


class Cell:
    """One configuration: a namespace with a coordinator, two workers and the MVs."""

    def __init__(self, name: str, protocol: str, session_ms: int, bootstrap: str, root: Path) -> None:
        self.name = name
        self.protocol = protocol
        self.session_ms = session_ms
        self.settings = one_broker_settings(
            bootstrap,
            "bench",
            root / name.replace("/", "-"),
            group_protocol=protocol,
            session_timeout_ms=session_ms,
        )
        self.fleet = Fleet(self.settings, root / name.replace("/", "-") / "logs")
        self.runs = Tail(self.settings, "runs")
        self.beats = Tail(self.settings, "coordinator")
        self.client = MvsClient(self.settings, issued_by="bench-failover")
        self.tasks = [f"mv:t{i}" for i in range(TASKS)]
        self.trials: list[Trial] = []
        self.failures: dict[str, int] = {}  # kind → trials that timed out
        self._workers = 0

    # -- the fleet ----------------------------------------------------------------------------------
    def worker(self) -> Role:
        self._workers += 1
        return self.fleet.worker(f"w{self._workers}")

    def live(self) -> dict[str, Role]:
        return {r.name: r for r in self.fleet.roles if r.kind == "worker" and r.alive}

    def start(self) -> None:
        self.fleet.coordinator("c1")
        self.worker()
        self.worker()
        self.wait_group()
        for task_id in self.tasks:
            name = task_id.split(":", 1)[1]
            sql = f"CREATE MATERIALIZED VIEW {name} REFRESH COMPLETE ON DEMAND AS SELECT id, v FROM base"
            result = self.client.execute(sql, timeout_s=60)
            assert result is not None and result["accepted"], result
        self.settle(warm=True)

    def wait_group(self) -> dict[str, list[int]]:
        names = set(self.live())

        def held() -> dict[str, list[int]] | None:
            owners = group_owners(self.settings, self.settings.group("workers"))
            ok = set(owners) == names and sum(map(len, owners.values())) == PARTITIONS
            return owners if ok and all(owners.values()) else None

        return wait_until(held, timeout_s=180, what=f"{self.name}: {sorted(names)} holding every partition")

    def settle(self, *, warm: bool = False) -> None:
        """Two workers hold the partitions and every task is owned by a live worker (the coordinator
        raised its epoch for it). ``warm``: every task also finished a run there (JVMs are up)."""
        self.wait_group()
        live = set(self.live())

        def done() -> bool:
            self.runs.poll(0.1)
            tasks = self.client.tasks()
            finished = {
                (r["task_id"], r["epoch"])
                for r in self.runs.records
                if r["state"] in ("COMPLETED", "SKIPPED") and r["worker_id"] in live
            }
            return all(
                (t := tasks.get(task_id)) is not None
                and t["owner"] in live
                and (not warm or (task_id, t["epoch"]) in finished)
                for task_id in self.tasks
            )

        wait_until(done, timeout_s=240, what=f"{self.name}: every task owned by a live worker")
        wait_until(
            lambda: all(SPARK_READY in role.log() for role in self.live().values()),
            timeout_s=240,
            what=f"{self.name}: every live worker's Spark session up",
        )

    # -- a trial ------------------------------------------------------------------------------------
    def holder(self, task_id: str) -> str:
        owners = group_owners(self.settings, self.settings.group("workers"))
        partition = partition_for(task_id, PARTITIONS)
        return next(name for name, parts in owners.items() if partition in parts)

    def trial(self, kind: str, index: int) -> Trial:
        target = self.tasks[index % len(self.tasks)]
        victim = self.live()[self.holder(target)]
        epoch = self.client.tasks()[target]["epoch"]
        self.runs.poll(0.1)
        self.beats.poll(0.1)
        runs_mark, beats_mark = len(self.runs.records), len(self.beats.records)
        t0_ms = time.time() * 1000
        if kind == KILL:
            victim.kill()
            self.worker()  # the replacement joins while the dead one's session runs out
        else:
            victim.process.send_signal(signal.SIGTERM)

        def reported(newer: bool) -> Record | None:
            self.beats.poll(0.05)
            for beat in self.beats.records[beats_mark:]:
                if beat["worker_id"] != victim.name and any(
                    s["task_id"] == target and (s["epoch"] > epoch or not newer) for s in beat["statuses"]
                ):
                    return beat
            return None

        def running() -> Record | None:
            self.runs.poll(0.05)
            for run in self.runs.records[runs_mark:]:
                if (
                    run["task_id"] == target
                    and run["worker_id"] != victim.name
                    and run["state"] in ("RUNNING", "COMPLETED", "SKIPPED", "ERROR")
                ):
                    return run
            return None

        limit = max(self.session_ms, 45_000) / 1000 + 60
        claim = wait_until(lambda: reported(False), timeout_s=limit, what=f"{self.name}: {target} claimed")

        def started() -> float | None:
            """Wall ms of the first sign of the new owner's maintainer (run record or heartbeat)."""
            self.runs.poll(0.05)
            times = [
                float(r["started_at"])
                for r in self.runs.records[runs_mark:]
                if r["task_id"] == target and r["worker_id"] != victim.name and r["epoch"] > epoch
            ]
            beat = reported(True)
            if beat is not None:
                times.append(float(beat["sent_at"]))
            return min(times) if times else None

        owned_ms = wait_until(started, timeout_s=limit, what=f"{self.name}: {target} owned")
        run = wait_until(running, timeout_s=limit + 120, what=f"{self.name}: {target} run started")
        if kind == TERM:
            assert victim.process.wait(60) == 0, f"{victim.name} exited {victim.process.returncode}"
            self.worker()
        result = Trial(
            kind,
            target,
            victim.name,
            run["worker_id"],
            (claim["sent_at"] - t0_ms) / 1000,
            (owned_ms - t0_ms) / 1000,
            (run["started_at"] - t0_ms) / 1000,
        )
        self.trials.append(result)
        print(
            f"  {self.name:<18} {kind:<8} #{index + 1:<2} {target} {victim.name}→{result.new_owner}: "
            f"claim {result.claim_s:6.2f}s  owned {result.owned_s:6.2f}s  run {result.run_s:6.2f}s",
            flush=True,
        )
        self.settle()
        return result

    def run_trials(self, kind: str, count: int) -> None:
        """``count`` trials; one that times out is counted as failed (and shown), not fatal: the
        cell settles and goes on, or stops its trials if it cannot settle."""
        for index in range(count):
            try:
                self.trial(kind, index)
            except AssertionError as exc:
                self.failures[kind] = self.failures.get(kind, 0) + 1
                print(f"  {self.name:<18} {kind:<8} #{index + 1:<2} FAILED: {exc}", flush=True)
                try:
                    self.settle()
                except AssertionError as stuck:
                    print(f"  {self.name}: cannot settle, no more trials: {stuck}", flush=True)
                    return

    def close(self) -> None:
        self.fleet.close()
        self.runs.close()
        self.beats.close()
        self.client.close()


def _create_base_tables(cells: list[Cell]) -> None:
    """The MVs' base table, in each cell's warehouse, from this process's (short-lived) Spark."""
    from workers.demo_tables import create_table
    from workers.jobs import get_spark, stop_spark

    spark = get_spark(cells[0].settings)
    rows = [{"id": i, "v": i % 7} for i in range(100)]
    for cell in cells:
        create_table(spark, cell.settings, "base", rows, "id BIGINT, v BIGINT")
    stop_spark()  # the workers need the CPU more than we do


def _in_parallel(jobs: list[Callable[[], None]]) -> None:
    errors: list[BaseException] = []

    def guard(job: Callable[[], None]) -> None:
        try:
            job()
        except BaseException as exc:  # reported after every job ended
            errors.append(exc)

    threads = [threading.Thread(target=guard, args=(job,)) for job in jobs]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if errors:
        raise errors[0]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.failover", description=__doc__.split("\n")[0])
    parser.add_argument("--trials", type=int, default=10, help="kill -9 trials per configuration")
    parser.add_argument("--graceful-trials", type=int, default=10, help="SIGTERM trials (shipped settings)")
    parser.add_argument("--no-defaults", action="store_true", help="skip the 45 s Kafka-default cells")
    parser.add_argument("--keep", action="store_true", help="keep the work folder (role logs)")
    args = parser.parse_args(argv)

    root = Path(tempfile.mkdtemp(prefix="mvs-failover-"))
    bootstrap, stop_broker = broker(root)
    shipped = [Cell(f"{p}/shipped", p, SHIPPED_SESSION_MS, bootstrap, root) for p in ("classic", "consumer")]
    defaults = (
        []
        if args.no_defaults
        else [Cell(f"{p}/kafka-default", p, 0, bootstrap, root) for p in ("classic", "consumer")]
    )
    cells = shipped + defaults
    started = time.monotonic()
    try:
        _create_base_tables(cells)
        for cell in shipped:  # one at a time: their seconds are what we want to read cleanly
            cell.start()
            cell.run_trials(KILL, args.trials)
            cell.run_trials(TERM, args.graceful_trials)
            cell.close()
        if defaults:
            _in_parallel([d.start for d in defaults])
            _in_parallel([lambda d=d: d.run_trials(KILL, args.trials) for d in defaults])  # type: ignore[misc]
    finally:
        for cell in cells:
            cell.close()
        stop_broker()
        if not args.keep:
            shutil.rmtree(root, ignore_errors=True)
        else:
            print(f"work folder kept: {root}")

    rows: list[list[object]] = []
    figures: dict[str, Any] = {"bench": "failover", "wall_s": round(time.monotonic() - started, 1)}
    for cell in cells:
        for kind in (KILL, TERM):
            trials = [t for t in cell.trials if t.kind == kind]
            failed = cell.failures.get(kind, 0)
            goal = GOALS[kind] if cell.session_ms == SHIPPED_SESSION_MS else None
            session = f"{cell.session_ms / 1000:g} s" if cell.session_ms else "45 s (Kafka default)"
            if not trials:
                if failed:
                    rows.append(
                        [cell.protocol, session, kind, 0, *["-"] * 7, "MISSED" if goal else "-", failed]
                    )
                    figures[f"{cell.name}/{'kill' if kind == KILL else 'sigterm'}"] = {
                        "failed_trials": failed
                    }
                continue
            owned = [t.owned_s for t in trials]
            claims = [t.claim_s for t in trials]
            runs = [t.run_s for t in trials]
            p95 = percentile(owned, 95)
            rows.append(
                [
                    cell.protocol,
                    session,
                    kind,
                    len(trials),
                    f"{percentile(claims, 50):.2f}",
                    f"{percentile(claims, 95):.2f}",
                    f"{percentile(owned, 50):.2f}",
                    f"{p95:.2f}",
                    f"{max(owned):.2f}",
                    f"{percentile(runs, 50):.2f}",
                    f"{percentile(runs, 95):.2f}",
                    "-" if goal is None else f"≤ {goal:g} {'ok' if p95 <= goal and not failed else 'MISSED'}",
                    failed,
                ]
            )
            figures[f"{cell.name}/{'kill' if kind == KILL else 'sigterm'}"] = {
                "trials": len(trials),
                "failed_trials": failed,
                "session_timeout_ms": cell.session_ms or 45_000,
                "claim_p50_s": round(percentile(claims, 50), 3),
                "claim_p95_s": round(percentile(claims, 95), 3),
                "owned_p50_s": round(percentile(owned, 50), 3),
                "owned_p95_s": round(p95, 3),
                "owned_max_s": round(max(owned), 3),
                "run_p50_s": round(percentile(runs, 50), 3),
                "run_p95_s": round(percentile(runs, 95), 3),
                "goal_p95_s": goal,
            }
    report(
        "Failover, seconds from the signal to: claimed / owned (maintainer running) / run started, elsewhere",
        [
            "protocol",
            "session",
            "signal",
            "trials",
            "claim p50",
            "claim p95",
            "owned p50",
            "owned p95",
            "owned max",
            "run p50",
            "run p95",
            "goal (owned p95)",
            "failed",
        ],
        rows,
        figures,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
