"""Schedule precision: N tasks refreshed EVERY interval on one worker, a no-op job.

lateness = when the job body starts − when the run was due.

- mvs: the real Manager scheduling path — maintainers (FSMs in mailboxes), the due queue, the
  bounded executor, run records into the outbox — with a no-op Runner and no Kafka I/O: tasks
  arrive through ``Manager.add_task`` (staggered over the first interval, as creations spread in
  time), dispatch is ``Manager.tick()``, and between ticks the loop waits for the next due time,
  at most 50 ms (as ``Manager.step`` does; outcomes are handled on the next tick).
- APScheduler 3.11: ``BackgroundScheduler``, a thread pool of the same size, the same N interval
  jobs with the same phases.

CPU = process CPU time / wall time over the measured window (100 % = one core). Runs due in the
first interval (while tasks are still being added) are not measured. A run the executor turns
away (its queue full) is retried a second later: its lateness still counts from when it fell
due, and the table counts such rejections.

    .venv/bin/python bench/sched_precision.py [--tasks 10000] [--interval 10] [--seconds 30]
"""

from __future__ import annotations

import argparse
import math
import tempfile
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime

from bench.common import WORKER_ID, mv_task, percentile, report
from workers.config import Settings
from workers.records import Record
from workers.sched.due import DueQueue
from workers.worker.manager import Manager
from workers.worker.runner import RunResult

TICK_S = 0.05  # Manager.step's longest wait
GOAL_P99_MS = 100.0


@dataclass
class Lateness:
    """Lateness samples (seconds) of runs due inside [start, end) on one clock."""

    start: float
    end: float
    samples: list[float] = field(default_factory=list)

    def add(self, due: float, started: float) -> None:
        if self.start <= due < self.end:
            self.samples.append(started - due)  # list.append is atomic: many threads add


class RecordingDueQueue(DueQueue[str]):
    """The manager's due queue, remembering when each task's next run fell due.

    The first due time since the task's last start counts: a run rejected by a full executor
    queue is rescheduled a second later, and its lateness is still measured from the original due
    time. A task is rescheduled only after its run's outcome was handled, so ``started`` (called
    by the runner's body) reads the time that made this run due.
    """

    def __init__(self) -> None:
        super().__init__()
        self._first_due: dict[str, float] = {}

    def schedule(self, key: str, due: float) -> None:
        self._first_due.setdefault(key, due)
        super().schedule(key, due)

    def started(self, key: str) -> float:
        return self._first_due.pop(key)


class NoopRunner:
    """A job that does nothing but note its lateness; no base tables, so every due time runs."""

    def __init__(self, due: RecordingDueQueue, lateness: Lateness) -> None:
        self.due = due
        self.lateness = lateness

    def base_versions(self, tables: list[str]) -> dict[str, int]:
        return {}

    def refresh(self, task: Record, *, run_id: str, job_group: str) -> RunResult:
        self.lateness.add(self.due.started(task["task_id"]), time.monotonic())
        return RunResult("COMPLETED", 0)

    def purge(self, task: Record, *, safepoint: int | None, run_id: str, job_group: str) -> RunResult:
        return RunResult("COMPLETED", 0)

    def cancel(self, job_group: str) -> None:
        pass

    def drop(self, task: Record) -> None:
        pass


@dataclass(frozen=True)
class Outcome:
    samples: list[float]  # lateness, seconds
    cpu_pct: float
    rejected: int | None  # runs the executor turned away (queue full), then retried; None: n/a


def run_mvs(tasks: int, interval_s: float, seconds: float, slots: int) -> Outcome:
    settings = Settings(
        namespace="bench", worker_id=WORKER_ID, warehouse=tempfile.mkdtemp(), max_concurrent_runs=slots
    )
    t0 = time.monotonic() + 0.5
    lateness = Lateness(t0 + interval_s, t0 + seconds)
    due = RecordingDueQueue()
    manager = Manager(settings, runner=NoopRunner(due, lateness))
    manager.host.due = due  # before any maintainer exists: they all get this queue
    every = int(interval_s * 1000)
    arrivals = deque(
        (t0 + i * interval_s / tasks, mv_task(f"m{i}", trigger="EVERY", interval_ms=every, query="SELECT 1"))
        for i in range(tasks)
    )
    cpu = _cpu_meter(lateness.start - time.monotonic())
    try:
        while (now := time.monotonic()) < lateness.end:
            while arrivals and arrivals[0][0] <= now:
                manager.host.add_task(arrivals.popleft()[1], partition=0)
            manager.host.tick()
            manager.host.outbox.clear()  # the run records would go to Kafka; this bench has no broker
            wakes = [manager.host.due.next_due(), arrivals[0][0] if arrivals else None, lateness.end]
            pause = min(TICK_S, min(t for t in wakes if t is not None) - time.monotonic())
            if pause > 0:
                time.sleep(pause)
        cpu_pct = cpu()
    finally:
        manager.host.executor.shutdown(timeout_s=30)
    return Outcome(lateness.samples, cpu_pct, manager.host.executor.metrics().rejected)


def run_apscheduler(tasks: int, interval_s: float, seconds: float, slots: int) -> Outcome:
    from apscheduler.executors.pool import ThreadPoolExecutor
    from apscheduler.schedulers.background import BackgroundScheduler
    from apscheduler.triggers.interval import IntervalTrigger

    wall0 = time.time() + 0.5
    lateness = Lateness(wall0 + interval_s, wall0 + seconds)

    def job(start: float) -> None:
        now = time.time()
        due = start + max(0, math.floor((now - start) / interval_s)) * interval_s
        lateness.add(due, now)

    scheduler = BackgroundScheduler(
        executors={"default": ThreadPoolExecutor(slots)},
        job_defaults={"coalesce": True, "max_instances": 1, "misfire_grace_time": int(seconds)},
    )
    for i in range(tasks):
        start = wall0 + i * interval_s / tasks
        trigger = IntervalTrigger(seconds=interval_s, start_date=datetime.fromtimestamp(start, UTC))
        scheduler.add_job(job, trigger, args=(start,), id=f"m{i}")
    scheduler.start()
    cpu = _cpu_meter(lateness.start - time.time())
    threading.Event().wait(max(0.0, lateness.end - time.time()))
    cpu_pct = cpu()
    scheduler.shutdown(wait=True)
    return Outcome(lateness.samples, cpu_pct, None)


def _cpu_meter(start_in_s: float) -> Callable[[], float]:
    """Process CPU from ``start_in_s`` seconds from now until the returned function is called."""
    mark: list[float] = []
    timer = threading.Timer(
        max(0.0, start_in_s), lambda: mark.extend([time.process_time(), time.monotonic()])
    )
    timer.start()

    def value() -> float:
        timer.join()
        return 100 * (time.process_time() - mark[0]) / (time.monotonic() - mark[1])

    return value


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=10_000)
    parser.add_argument("--interval", type=float, default=10.0, help="seconds between runs of a task")
    parser.add_argument("--seconds", type=float, default=30.0, help="length of each scheduler's run")
    parser.add_argument("--slots", type=int, default=8, help="concurrent runs (executor / thread pool)")
    args = parser.parse_args()
    rows, figures = [], {"tasks": args.tasks, "interval_s": args.interval, "goal_p99_ms": GOAL_P99_MS}
    for name, fn in (("mvs", run_mvs), ("apscheduler", run_apscheduler)):
        out = fn(args.tasks, args.interval, args.seconds, args.slots)
        expected = args.tasks * (args.seconds - args.interval) / args.interval
        if len(out.samples) < 0.9 * expected:  # a broken path must not pass as a quiet table
            raise SystemExit(f"{name}: only {len(out.samples)} runs measured, expected about {expected:.0f}")
        ms = [s * 1000 for s in out.samples]
        p50, p99, worst = percentile(ms, 50), percentile(ms, 99), max(ms)
        rejected = "-" if out.rejected is None else out.rejected
        rows.append(
            [name, len(ms), f"{p50:.1f}", f"{p99:.1f}", f"{worst:.1f}", f"{out.cpu_pct:.0f}%", rejected]
        )
        figures[name] = {
            "runs": len(ms),
            "p50_ms": p50,
            "p99_ms": p99,
            "max_ms": worst,
            "cpu_pct": out.cpu_pct,
            "rejected": out.rejected,
        }
    figures["mvs_meets_goal"] = figures["mvs"]["p99_ms"] <= GOAL_P99_MS
    report(
        f"schedule precision: {args.tasks} tasks EVERY {args.interval:g}s, no-op job, {args.slots} slots",
        ["scheduler", "runs", "p50 late ms", "p99 late ms", "max late ms", "CPU (1 core=100%)", "rejected"],
        rows,
        figures,
    )


if __name__ == "__main__":
    main()
