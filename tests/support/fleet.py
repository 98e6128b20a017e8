"""The fleet tests' harness: real role processes of one namespace, the run records they publish,
and the checks the tests make on MV tables and their Delta history (see test_fleet.py)."""

from __future__ import annotations

import sys
import time
from typing import Any

from tests.support.cluster import wait_until
from tests.support.processes import Fleet, Role, Tail
from workers.client import MvsClient
from workers.config import Settings
from workers.demo_tables import delta_history, read_table
from workers.jobs.delta.metadata import decode_user_metadata
from workers.kafka.admin import group_owners
from workers.kafka.messages import partition_for
from workers.kafka.typed import read_to_end
from workers.topics import topic_spec
from workers.warehouse import latest_version
from workers.worker.runner import SPARK_READY

PARTITIONS = topic_spec("manager").partitions
BIG_SCHEMA = "id BIGINT, k BIGINT, v BIGINT"
BIG_ROWS = 14_000
# A self-join: ~100M joined rows, a few seconds of Spark work — long enough to stop a worker in
# the middle of it.
SLOW_QUERY = (
    "SELECT a.k, count(*) AS pairs, sum(b.v) AS total FROM big a JOIN big b ON a.k = b.k GROUP BY a.k"
)
ORDERS_SCHEMA = "id BIGINT, region STRING, amount BIGINT"
BY_REGION = "SELECT region, sum(amount) AS total, count(*) AS n FROM orders GROUP BY region"
TERMINAL = {"COMPLETED", "SKIPPED", "ERROR", "CANCELED"}


def big_rows(start: int, count: int) -> list[dict[str, Any]]:
    return [{"id": i, "k": i % 2, "v": i % 97} for i in range(start, start + count)]


def order_rows(start: int, count: int) -> list[dict[str, Any]]:
    regions = ["north", "south", "east"]
    return [{"id": i, "region": regions[i % 3], "amount": 10 + i} for i in range(start, start + count)]


# -- the module's fleet ----------------------------------------------------------------------------
_T0 = time.monotonic()


def step(what: str) -> None:
    """A timeline line (pytest -s shows it): where a slow test spends its time."""
    # The real stderr: capsys (the CLI checks) must not see it.
    print(f"[{time.monotonic() - _T0:7.1f}s] {what}", file=sys.__stderr__, flush=True)


class Harness:
    """The fleet plus what every test reads: run records as they arrive, and a client."""

    def __init__(self, settings: Settings, fleet: Fleet, spark: Any) -> None:
        self.settings = settings
        self.fleet = fleet
        self.spark = spark
        self.runs = Tail(settings, "runs")
        self.client = MvsClient(settings, issued_by="test-fleet")
        self._workers = 0
        self.cold: str | None = None  # a replacement worker whose Spark may still be starting

    # roles
    def new_worker(self) -> Role:
        self._workers += 1
        return self.fleet.worker(f"w{self._workers}")

    def wait_warm(self, worker: Role, timeout_s: float = 180) -> None:
        """Until the worker's Spark session is up (it starts one at launch and logs it)."""
        wait_until(lambda: SPARK_READY in worker.log(), timeout_s=timeout_s, what=f"{worker.name}'s Spark")

    def live_workers(self) -> list[Role]:
        return [r for r in self.fleet.roles if r.kind == "worker" and r.alive]

    def pair(self) -> tuple[Role, Role]:
        """The two live workers, once both are in the group and hold every partition between them."""
        workers = self.live_workers()
        assert len(workers) == 2, [w.name for w in workers]
        names = {w.name for w in workers}

        def settled() -> bool:
            owners = group_owners(self.settings, self.settings.group("workers"))
            return (
                set(owners) == names and all(owners.values()) and sum(map(len, owners.values())) == PARTITIONS
            )

        wait_until(settled, timeout_s=60, what=f"workers {sorted(names)} sharing every partition")
        return workers[0], workers[1]

    def owner_of_partition(self, task_id: str) -> str:
        owners = group_owners(self.settings, self.settings.group("workers"))
        partition = partition_for(task_id, PARTITIONS)
        return next(name for name, parts in owners.items() if partition in parts)

    # DDL and catalog
    def sql(self, statement: str) -> dict[str, Any]:
        result = self.client.execute(statement, timeout_s=60)
        assert result is not None
        return result

    def ok(self, statement: str) -> dict[str, Any]:
        result = self.sql(statement)
        assert result["accepted"], (statement, result)
        return result

    def task(self, task_id: str) -> dict[str, Any] | None:
        return self.client.tasks().get(task_id)

    # runs
    def run(self, task_id: str, *, states: set[str], after: int = 0, **match: Any) -> dict[str, Any] | None:
        """The first run record of ``task_id`` (from index ``after`` of the tail) in one of ``states``
        whose fields equal ``match``."""
        self.runs.poll()
        for record in self.runs.records[after:]:
            matches = all(record.get(k) == v for k, v in match.items())
            if record["task_id"] == task_id and record["state"] in states and matches:
                return record
        return None

    def wait_run(self, task_id: str, *, states: set[str], timeout_s: float = 120, **match: Any) -> Any:
        return wait_until(
            lambda: self.run(task_id, states=states, **match),
            timeout_s=timeout_s,
            what=f"a {'/'.join(sorted(states))} run of {task_id} with {match}",
        )

    def runs_of(self, task_id: str, after: int = 0) -> list[dict[str, Any]]:
        self.runs.poll()
        return [r for r in self.runs.records[after:] if r["task_id"] == task_id]

    def mark(self) -> int:
        """A position in the run history: records after it are news."""
        self.runs.poll()
        return len(self.runs.records)

    def close(self) -> None:
        self.runs.close()
        self.client.close()


def name_on(h: Harness, prefix: str, *, on: str | None = None, off: str | None = None) -> str:
    """An MV name (``prefix`` + a number) whose task lands on a partition that worker ``on`` holds
    now, or that worker ``off`` does not hold (one still starting its JVM)."""
    for i in range(1000):
        owner = h.owner_of_partition(f"mv:{prefix}{i}")
        if (on is None or owner == on) and (off is None or owner != off):
            return f"{prefix}{i}"
    raise AssertionError(f"no name for {prefix} on {on} / off {off}")


# -- checks ----------------------------------------------------------------------------------------
def query_rows(h: Harness, query: str, table: str) -> list[tuple[Any, ...]]:
    path = f"{h.settings.warehouse}/{table}"
    sql = query.replace(f"FROM {table} ", f"FROM delta.`{path}` ").replace(
        f"JOIN {table} ", f"JOIN delta.`{path}` "
    )
    return sorted(tuple(r) for r in h.spark.sql(sql).collect())


def mv_rows(h: Harness, name: str) -> list[tuple[Any, ...]]:
    return sorted(tuple(r.values()) for r in read_table(h.spark, h.settings, name))


def mv_commits(h: Harness, name: str) -> list[tuple[int, int, dict[str, int], str]]:
    return refresh_commits(h.spark, h.settings, name)


def refresh_commits(spark: Any, settings: Settings, name: str) -> list[tuple[int, int, dict[str, int], str]]:
    """(Delta version, epoch, watermark, run id) of every refresh commit of an MV, oldest first."""
    out = []
    for commit in reversed(delta_history(spark, settings, name)):
        meta = decode_user_metadata(commit["userMetadata"])
        if meta is not None:
            out.append((commit["version"], meta.epoch, meta.watermark, meta.run_id))
    return out


def assert_applied_once(commits: list[tuple[int, int, dict[str, int], str]]) -> None:
    """No refresh result landed twice, and no older epoch committed after a newer one."""
    seen = [(epoch, tuple(sorted(wm.items()))) for _, epoch, wm, _ in commits]
    assert len(seen) == len(set(seen)), f"a refresh result was applied twice: {commits}"
    epochs = [epoch for _, epoch, _, _ in commits]
    assert epochs == sorted(epochs), f"an older epoch committed after a newer one: {commits}"


def unended_runs(settings: Settings, before_ms: int, worker_id: str | None = None) -> list[str]:
    """Runs (of ``worker_id``, or any worker's) that started before ``before_ms`` and have no end
    record in the runs topic, each said as its id, task, worker and start (what a failure needs)."""
    running: dict[str, dict[str, Any]] = {}
    ended: set[str] = set()
    for message in read_to_end(settings, "runs"):
        record = message.value
        if record is None:
            continue
        if record["state"] == "RUNNING":
            running[record["run_id"]] = record
        elif record["state"] in TERMINAL:
            ended.add(record["run_id"])
    return sorted(
        f"{r} ({rec['task_id']} on {rec['worker_id']}, started {before_ms - rec['started_at']} ms before)"
        for r, rec in running.items()
        if r not in ended and rec["started_at"] < before_ms and worker_id in (None, rec["worker_id"])
    )


def caught_up(h: Harness, task_id: str, table: str) -> bool:
    task = h.task(task_id)
    return bool(task and task["checkpoint"].get(table) == latest_version(h.settings, table))


def slow_mv_running_on_owner(h: Harness, name: str) -> tuple[dict[str, Any], Role, Role]:
    """Create the slow MV and return the RUNNING record of its first refresh (the workers' JVMs
    are warm: its Spark job is under way) with (its worker, the other worker)."""
    task_id = f"mv:{name}"
    h.ok(f"CREATE MATERIALIZED VIEW {name} REFRESH COMPLETE ON DEMAND AS {SLOW_QUERY}")
    running = h.wait_run(task_id, states={"RUNNING"})
    step(f"{name}: first refresh running on {running['worker_id']}")
    workers = {w.name: w for w in h.live_workers()}
    owner = workers.pop(running["worker_id"])
    (other,) = workers.values()
    return running, owner, other
