"""A tiny refresh on the worker's warm SparkSession vs the same refresh as a fresh ``spark-submit``
per run (what a cron job does: start a JVM and a session, refresh, exit).

Both run ``SparkRunner.refresh`` — the worker's own refresh path (pin the base version,
recompute the query, one Delta commit with the watermark) — on the same tiny Delta table. Before
each trial (untimed) one row is appended to the base, so every refresh really recomputes and
commits (an MV already current at the base's version is skipped without a job). ``spark-submit``
is the one pyspark ships in the venv, given the Delta jars from ``.cache/jars/delta``. The warm side
also reports the Spark jobs each run started (its job group's, from Spark's status tracker).

    .venv/bin/python -m bench.warm_vs_submit [--warm 5] [--cold 3]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

import pyspark

from bench.common import mv_task, percentile, report, scratch_dir
from workers.config import REPO_ROOT, Settings
from workers.demo_tables import append, create_table
from workers.jobs.spark.session import delta_jars, get_spark
from workers.worker.runner import RunResult, SparkRunner

GOAL_SPEEDUP = 10.0
GOAL_WARM_MS = 1000.0  # a tiny complete refresh on a warm worker
GOAL_SPARK_JOBS = 3
QUERY = "SELECT region, sum(amount) AS total, count(*) AS orders FROM sales GROUP BY region"
SPARK_SUBMIT = Path(pyspark.__file__).parent / "bin" / "spark-submit"


def refresh_once(warehouse: str, epoch: int) -> RunResult:
    """One refresh of the tiny MV at ``epoch`` on this process's session."""
    settings = Settings(namespace="bench", warehouse=warehouse)
    task = {
        **mv_task("tiny", trigger="EVERY", interval_ms=60_000, query=QUERY, base_tables=["sales"]),
        "epoch": epoch,
    }
    result = SparkRunner(settings).refresh(task, run_id=f"bench{epoch}", job_group=f"mvs-bench{epoch}")
    assert result.state == "COMPLETED" and result.rows_written, result
    return result


def submit_once(warehouse: str, epoch: int) -> float:
    """Wall time of ``spark-submit`` running ``refresh_once`` in a new JVM and Python process."""
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable, "PYTHONPATH": str(REPO_ROOT)}
    command = [
        str(SPARK_SUBMIT),
        "--master",
        "local[2]",
        "--jars",
        ",".join(delta_jars()),
        "--conf",
        "spark.ui.enabled=false",
        str(Path(__file__)),
        "--child",
        warehouse,
        str(epoch),
    ]
    started = time.perf_counter()
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=600, check=False)
    elapsed = time.perf_counter() - started
    if done.returncode != 0 or "refreshed:" not in done.stdout:
        raise RuntimeError(f"spark-submit failed ({done.returncode}):\n{done.stdout}\n{done.stderr[-3000:]}")
    return elapsed


def main() -> None:
    if sys.argv[1:2] == ["--child"]:  # inside spark-submit
        print("refreshed:", refresh_once(sys.argv[2], int(sys.argv[3])).message, flush=True)
        return
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--warm", type=int, default=5, help="timed refreshes on the warm session")
    parser.add_argument("--cold", type=int, default=3, help="timed spark-submit runs")
    args = parser.parse_args()
    warehouse = scratch_dir("mvs-warm-")
    settings = Settings(warehouse=warehouse)
    spark = get_spark(settings)
    create_table(
        spark,
        settings,
        "sales",
        [{"id": i, "region": ("north", "south", "east")[i % 3], "amount": i} for i in range(30)],
        "id BIGINT, region STRING, amount BIGINT",
    )
    refresh_once(warehouse, epoch=1)  # the worker's session has done this kind of work before

    def change_base(epoch: int) -> None:
        append(spark, settings, "sales", [{"id": 1000 + epoch, "region": "west", "amount": epoch}])

    warm, jobs = [], []
    for epoch in range(2, 2 + args.warm):
        change_base(epoch)
        started = time.perf_counter()
        result = refresh_once(warehouse, epoch)
        warm.append(time.perf_counter() - started)
        jobs.append(result.spark_jobs if result.spark_jobs is not None else -1)
    cold = []
    for epoch in range(100, 100 + args.cold):
        change_base(epoch)
        cold.append(submit_once(warehouse, epoch))

    warm_ms, cold_ms = [w * 1000 for w in warm], [c * 1000 for c in cold]
    speedup = percentile(cold_ms, 50) / percentile(warm_ms, 50)
    jobs_p50 = int(percentile(jobs, 50))
    figures = {
        "warm_p50_ms": percentile(warm_ms, 50),
        "warm_ms": warm_ms,
        "warm_spark_jobs": jobs,
        "warm_spark_jobs_p50": jobs_p50,
        "goal_warm_ms": GOAL_WARM_MS,
        "goal_spark_jobs": GOAL_SPARK_JOBS,
        "meets_warm_goal": percentile(warm_ms, 50) <= GOAL_WARM_MS and jobs_p50 <= GOAL_SPARK_JOBS,
        "submit_p50_ms": percentile(cold_ms, 50),
        "submit_ms": cold_ms,
        "speedup_p50": speedup,
        "goal_speedup": GOAL_SPEEDUP,
        "meets_goal": speedup >= GOAL_SPEEDUP,
    }
    report(
        "tiny refresh: warm worker session vs spark-submit per run",
        ["how", "n", "p50 ms", "min ms", "max ms", "Spark jobs per run"],
        [
            [
                "warm session (mvs worker)",
                len(warm_ms),
                f"{percentile(warm_ms, 50):.0f}",
                f"{min(warm_ms):.0f}",
                f"{max(warm_ms):.0f}",
                f"{jobs_p50} (min {min(jobs)}, max {max(jobs)})",
            ],
            [
                "spark-submit per run (cron)",
                len(cold_ms),
                f"{percentile(cold_ms, 50):.0f}",
                f"{min(cold_ms):.0f}",
                f"{max(cold_ms):.0f}",
                "",
            ],
            ["speed-up (p50)", "", f"{speedup:.1f}x", "", "", ""],
            ["goal (warm)", "", f"<= {GOAL_WARM_MS:.0f}", "", "", f"<= {GOAL_SPARK_JOBS}"],
        ],
        figures,
    )


if __name__ == "__main__":
    main()
