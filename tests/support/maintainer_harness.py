"""What the maintainer and task-host tests share: a fake Runner (gated runs), a harness around the
real TaskHost (ManualClock, DueQueue, BoundedExecutor, mailboxes handled on the test thread), and
task records. See test_maintainer.py, test_maintainer_runs.py and test_task_host.py."""

from __future__ import annotations

import random
import threading
from dataclasses import dataclass

from prometheus_client import CollectorRegistry

from workers.catalog.errors import ErrorCode, MvsError
from workers.coordinator.handlers import Context, maintainer_command, new_task
from workers.jobs.errors import RunCancelled
from workers.records import Record
from workers.retry import REFRESH_RETRY, RetryPolicy
from workers.sched.clock import ManualClock
from workers.sched.executor import BoundedExecutor
from workers.sched.metrics import SchedMetrics
from workers.worker.host import TaskHost
from workers.worker.maintainer import Command, Maintainer
from workers.worker.runner import RunResult

WAIT = 5.0


# -- the fake runner ------------------------------------------------------------------------------
class Gate:
    """Makes one run block until released; a cancel releases it (unless ``stubborn``)."""

    def __init__(self, *, stubborn: bool = False) -> None:
        self.started = threading.Event()
        self.release = threading.Event()
        self.stubborn = stubborn
        self.cancelled = False

    def cancel(self) -> None:
        self.cancelled = True
        if not self.stubborn:
            self.release.set()

    def pass_through(self) -> None:
        self.started.set()
        assert self.release.wait(WAIT), "gate never released"
        if self.cancelled and not self.stubborn:
            raise RunCancelled("cancelled")


@dataclass(frozen=True)
class Call:
    kind: str
    task_id: str
    epoch: int
    job_group: str
    started: float


class FakeRunner:
    """Base tables are a dict of versions; a refresh reflects them. Failures and gates are scripted."""

    def __init__(self, clock: ManualClock) -> None:
        self.clock = clock
        self.versions: dict[str, int] = {"t": 1}
        self.calls: list[Call] = []
        self.version_reads = 0
        self.cancelled: list[str] = []
        self.dropped: list[str] = []
        self.drop_failures = 0  # the next drops that fail (the warehouse away)
        self._lock = threading.Lock()
        self._errors: dict[str, list[BaseException]] = {}
        self._gates: dict[str, Gate] = {}
        self._active: dict[str, Gate] = {}

    def fail(self, task_id: str, *errors: BaseException) -> None:
        self._errors.setdefault(task_id, []).extend(errors)

    def gate(self, task_id: str, *, stubborn: bool = False) -> Gate:
        gate = self._gates[task_id] = Gate(stubborn=stubborn)
        return gate

    def base_versions(self, tables: list[str], *, quick: bool = False) -> dict[str, int]:
        with self._lock:
            self.version_reads += 1
            missing = [t for t in tables if t not in self.versions]
            if missing:  # as SparkRunner: a table without a Delta log
                raise MvsError(ErrorCode.NOT_FOUND, f"base table {missing[0]} does not exist")
            return {t: self.versions[t] for t in tables}

    def _run(self, kind: str, task: Record, job_group: str) -> dict[str, int]:
        """Pins the base versions first (as the real refresh does), then blocks/fails as scripted."""
        task_id = task["task_id"]
        with self._lock:
            self.calls.append(Call(kind, task_id, task["epoch"], job_group, self.clock.monotonic()))
            pinned = {t: self.versions[t] for t in (task["mv"] or {}).get("base_tables", [])}
            gate = self._gates.pop(task_id, None)
            errors = self._errors.get(task_id)
            error = errors.pop(0) if errors else None
            if gate is not None:
                self._active[job_group] = gate
        if gate is not None:
            gate.pass_through()
        if error is not None:
            raise error
        return pinned

    def refresh(self, task: Record, *, run_id: str, job_group: str) -> RunResult:
        pinned = self._run("refresh", task, job_group)
        return RunResult("COMPLETED", 3, {}, pinned, "wrote 3 rows")

    def purge(self, task: Record, *, safepoint: int | None, run_id: str, job_group: str) -> RunResult:
        self._run("purge", task, job_group)
        return RunResult("COMPLETED", 0, {}, {}, "purged")

    def cancel(self, job_group: str) -> None:
        with self._lock:
            self.cancelled.append(job_group)
            gate = self._active.get(job_group)
        if gate is not None:
            gate.cancel()

    def drop(self, task: Record) -> None:
        if self.drop_failures:
            self.drop_failures -= 1
            raise OSError("object store unreachable")
        self.dropped.append(task["task_id"])


# -- the harness ----------------------------------------------------------------------------------
class Harness:
    """A task host on the test thread (ManualClock, the fake runner, no bus) and what tests read of it."""

    def __init__(
        self,
        *,
        slots: int = 2,
        queue: int = 16,
        retry: RetryPolicy = REFRESH_RETRY,
        rng: random.Random | None = None,
        timeout_s: float = 600.0,
    ) -> None:
        self.clock = ManualClock(start=1000.0, wall_start_ms=1_700_000_000_000)
        self.executor = BoundedExecutor(slots, queue, clock=self.clock, watchdog=False)
        self.runner = FakeRunner(self.clock)
        self.metrics = SchedMetrics(CollectorRegistry())
        self.host = TaskHost(
            "w1",
            clock=self.clock,
            runner=self.runner,
            executor=self.executor,
            heartbeat_timeout_s=25.0,
            run_timeout_s=timeout_s,
            metrics=self.metrics,
            retry=retry,
            rng=rng if rng is not None else random.Random(0),
        )
        self.due = self.host.due
        self.mail = self.host.mailboxes

    @property
    def records(self) -> list[Record]:
        """Every record the maintainers published, oldest first (nothing takes them off here)."""
        return self.host.outbox.queued()

    @property
    def dirty(self) -> set[str]:
        return self.host.dirty

    def add(self, task: Record) -> Maintainer:
        return self.host.start_maintainer(task, 0)

    def send(self, task_id: str, message: object) -> None:
        assert self.mail.send(task_id, message)
        self.mail.run_pending()

    def tick(self, *, settle: bool = True) -> int:
        due = self.host.tick()
        if settle:
            self.settle()
        return due

    def settle(self) -> None:
        """Until every run ended and every outcome was handled (handling may start more runs)."""
        while True:
            assert self.executor.wait_idle(timeout_s=WAIT), "runs never finished"
            if self.mail.run_pending() == 0:
                return

    def runs(self, task_id: str) -> list[Record]:
        """The last record of each run of ``task_id``, in start order (as ``mvs history`` shows)."""
        latest: dict[str, Record] = {}
        for record in self.records:
            if record["task_id"] == task_id:
                latest[record["run_id"]] = record
        return list(latest.values())

    def states(self, task_id: str) -> list[str]:
        return [r["state"] for r in self.runs(task_id)]

    def refreshes(self, task_id: str) -> int:
        return len([c for c in self.runner.calls if c.task_id == task_id])


CTX = Context(now_ms=0, coordinator_epoch=1, table_exists=lambda table: True)


def mv(
    name: str, kind: str = "EVERY", interval_ms: int | None = 60_000, *, epoch: int = 1, base: str = "t"
) -> Record:
    spec = {
        "query": f"SELECT * FROM {base}",
        "refresh_mode": "COMPLETE",
        "trigger": {"kind": kind, "interval_ms": interval_ms},
        "base_tables": [base],
    }
    return {**new_task(f"mv:{name}", "MV", name, CTX, mv=spec), "epoch": epoch}


def mv_log(base: str, purge_interval_ms: int) -> Record:
    spec = {"base_table": base, "purge_interval_ms": purge_interval_ms}
    return new_task(f"mvlog:{base}", "MV_LOG", base, CTX, mv_log=spec)


def command(kind: str, task_id: str, epoch: int) -> Command:
    return Command(maintainer_command(kind, {"task_id": task_id, "epoch": epoch}, CTX))


class FixedJitter(random.Random):
    """Jitter is always a quarter of its range, so the backoff sequence is exact."""

    def uniform(self, a: float, b: float) -> float:
        return a + 0.25 * (b - a)
