"""Skipped refresh: a due refresh whose base table has not changed — time to decide, and proof
that no Spark job ran.

The real worker path without Kafka I/O: a Manager with its SparkRunner on a warm local session,
one MV (EVERY 1 hour) over a small Delta table. The first run really refreshes. Then, per trial,
the task is made due and ``Manager.tick()`` is timed: pop, Due message, the maintainer reads the
base table's Delta version from its ``_delta_log`` listing, finds the watermark unchanged, records
SKIPPED and schedules the next run. Spark job ids are compared before and after: the status
tracker's jobs outside any job group (the bench thread's), and every job in Spark's status store.
For contrast, a few real refreshes after an append are timed the same way (tick → outcome handled).

    .venv/bin/python -m bench.skip_refresh [--trials 200]
"""

from __future__ import annotations

import argparse
import time
from typing import Any

from bench.common import WORKER_ID, mv_task, percentile, report, scratch_dir
from workers.config import Settings
from workers.demo_tables import append, create_table
from workers.jobs import get_spark
from workers.worker.manager import Manager

GOAL_MS = 50.0
QUERY = "SELECT region, sum(amount) AS total, count(*) AS orders FROM sales GROUP BY region"
WAIT_S = 120.0


def rows(start: int, count: int) -> list[dict[str, Any]]:
    return [
        {"id": i, "region": ("north", "south", "east")[i % 3], "amount": 10 + i}
        for i in range(start, start + count)
    ]


class JobCounter:
    """Spark jobs seen so far: ids outside any job group (public tracker) and the status store's total."""

    def __init__(self, spark: Any) -> None:
        self.tracker = spark.sparkContext.statusTracker()
        self.store = spark.sparkContext._jsc.sc().statusStore()  # every job, any group (JVM side)

    def snapshot(self) -> tuple[frozenset[int], int]:
        return frozenset(self.tracker.getJobIdsForGroup(None)), int(self.store.jobsList(None).size())


def timed_tick(manager: Manager, task_id: str, *, wait_for_run: bool) -> float:
    """Make the task due now and time the tick that handles it (and, for a real run, its outcome)."""
    manager.host.due.schedule(task_id, time.monotonic())
    started = time.perf_counter()
    manager.host.tick()
    if wait_for_run:
        assert manager.host.executor.wait_idle(timeout_s=WAIT_S), "refresh did not finish"
        manager.host.tick()  # the outcome handled: the run recorded, the next one scheduled
    elapsed = time.perf_counter() - started
    manager.host.outbox.clear()  # the run records would go to Kafka; this bench has no broker
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=200)
    parser.add_argument("--real", type=int, default=5, help="real refreshes timed for contrast")
    args = parser.parse_args()
    settings = Settings(
        namespace="bench", worker_id=WORKER_ID, warehouse=scratch_dir("mvs-skip-"), max_concurrent_runs=1
    )
    spark = get_spark(settings)
    create_table(spark, settings, "sales", rows(0, 30), "id BIGINT, region STRING, amount BIGINT")
    jobs = JobCounter(spark)
    manager = Manager(settings)
    task = mv_task("by_region", trigger="EVERY", interval_ms=3_600_000, query=QUERY, base_tables=["sales"])
    manager.host.add_task(task, partition=0)
    maintainer = manager.host.owned[task["task_id"]]
    try:
        timed_tick(manager, task["task_id"], wait_for_run=True)  # the first, real refresh (and warm-up)
        assert maintainer.last_run is not None and maintainer.last_run["state"] == "COMPLETED"

        skips, skip_runs, before = [], set(), jobs.snapshot()
        for _ in range(args.trials):
            skips.append(timed_tick(manager, task["task_id"], wait_for_run=False))
            assert maintainer.last_run["state"] == "SKIPPED", maintainer.last_run
            skip_runs.add(maintainer.last_run["run_id"])
        after = jobs.snapshot()
        assert len(skip_runs) == args.trials  # every trial decided (and recorded) anew

        real, real_jobs = [], []
        for i in range(args.real):
            append(spark, settings, "sales", rows(100 + i, 1))
            seen = jobs.snapshot()[1]
            real.append(timed_tick(manager, task["task_id"], wait_for_run=True))
            assert maintainer.last_run["state"] == "COMPLETED", maintainer.last_run
            real_jobs.append(jobs.snapshot()[1] - seen)
    finally:
        manager.host.executor.shutdown(timeout_s=WAIT_S)

    skip_ms, real_ms = [s * 1000 for s in skips], [s * 1000 for s in real]
    new_jobs = after[1] - before[1]
    new_ungrouped = sorted(after[0] - before[0])
    figures = {
        "trials": len(skip_ms),
        "skip_p50_ms": percentile(skip_ms, 50),
        "skip_p99_ms": percentile(skip_ms, 99),
        "skip_max_ms": max(skip_ms),
        "spark_jobs_during_skips": new_jobs,
        "ungrouped_job_ids_during_skips": new_ungrouped,
        "real_refresh_p50_ms": percentile(real_ms, 50),
        "real_refresh_spark_jobs": real_jobs,
        "goal_ms": GOAL_MS,
        "meets_goal": percentile(skip_ms, 99) <= GOAL_MS and new_jobs == 0 and not new_ungrouped,
    }
    report(
        "skipped refresh: due, base table unchanged (worker path: tick → maintainer → SKIPPED record)",
        ["case", "n", "p50 ms", "p99 ms", "max ms", "Spark jobs started"],
        [
            [
                "skip (unchanged)",
                len(skip_ms),
                f"{figures['skip_p50_ms']:.2f}",
                f"{figures['skip_p99_ms']:.2f}",
                f"{max(skip_ms):.2f}",
                new_jobs,
            ],
            [
                "real refresh (after append)",
                len(real_ms),
                f"{percentile(real_ms, 50):.0f}",
                f"{percentile(real_ms, 99):.0f}",
                f"{max(real_ms):.0f}",
                "/".join(map(str, real_jobs)),
            ],
        ],
        figures,
    )


if __name__ == "__main__":
    main()
