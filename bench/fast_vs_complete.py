"""Incremental (FAST) refresh from the MV log vs complete recomputation, after small changes to a
large base table — the worker's own refresh path (``SparkRunner.refresh``) for both.

Two MVs of each kind over one base table of ``--rows`` rows with an MV log: an aggregate
(``GROUP BY customer`` with SUM / COUNT, ~10,000 groups) and a filtered projection. Each round
changes the base (untimed): ``--batch`` new rows appended, then a few updated and a few deleted,
and times one refresh of each MV, counting the Spark jobs of the run's job group and the rows its
stages read (``workers.jobs.run_stats``). The COMPLETE twin is what a user would otherwise run (recompute
and overwrite); after the last round each FAST MV must hold exactly its COMPLETE twin's rows.

    .venv/bin/python -m bench.fast_vs_complete [--rows 1000000] [--batch 1000] [--rounds 5]
"""

from __future__ import annotations

import argparse
import tempfile
import time
from typing import Any

from bench.common import mv_task, percentile, report
from workers.config import Settings
from workers.jobs.mvlog import create_mv_log
from workers.jobs.run_stats import RunStats, group_stats
from workers.jobs.session import get_spark
from workers.jobs.tables import append
from workers.warehouse import table_path
from workers.worker.request import with_plan
from workers.worker.runner import SparkRunner

QUERIES = {
    "aggregate": "SELECT customer, sum(amount) AS total, count(*) AS orders FROM sales GROUP BY customer",
    "projection": "SELECT id, customer, amount FROM sales WHERE amount > 900",
}
CUSTOMERS = 10_000


def _base(spark: Any, settings: Settings, rows: int) -> None:
    frame = spark.range(rows).selectExpr(
        "id", f"id % {CUSTOMERS} AS customer", "(id * 7919) % 1000 AS amount"
    )
    frame.write.format("delta").mode("overwrite").save(table_path(settings, "sales"))
    create_mv_log(spark, settings, "sales")


def _change(spark: Any, settings: Settings, round_: int, start: int, batch: int) -> None:
    """One round of base changes: appends, then updates and deletes of older rows (3 commits)."""
    rows = [
        {"id": start + i, "customer": (start + i) % CUSTOMERS, "amount": (start + i) * 31 % 1000}
        for i in range(batch)
    ]
    append(spark, settings, "sales", rows)
    path = table_path(settings, "sales")
    spark.sql(f"UPDATE delta.`{path}` SET amount = amount + 1 WHERE id % 100003 = {round_}")
    spark.sql(f"DELETE FROM delta.`{path}` WHERE id % 100019 = {round_}")


def _rows(spark: Any, settings: Settings, name: str) -> list[tuple[Any, ...]]:
    return sorted(tuple(r) for r in spark.read.format("delta").load(table_path(settings, name)).collect())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.fast_vs_complete", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--rows", type=int, default=1_000_000, help="base table rows")
    parser.add_argument("--batch", type=int, default=1_000, help="rows appended per round")
    parser.add_argument("--rounds", type=int, default=5, help="timed refreshes per MV")
    args = parser.parse_args(argv)

    settings = Settings(namespace="bench", warehouse=tempfile.mkdtemp(prefix="mvs-fast-"))
    spark = get_spark(settings)
    runner = SparkRunner(settings)
    _base(spark, settings, args.rows)
    tasks = {  # with the query's plan, as the coordinator stores it (the maintainer's with_plan)
        (kind, mode): with_plan(
            mv_task(
                f"{kind}_{mode.lower()}",
                trigger="ON_DEMAND",
                interval_ms=None,
                query=query,
                base_tables=["sales"],
                refresh_mode=mode,
            )
        )
        for kind, query in QUERIES.items()
        for mode in ("FAST", "COMPLETE")
    }
    for task in tasks.values():  # the first build (complete for both) is not timed
        runner.refresh(task, run_id=f"build-{task['name']}", job_group=f"mvs-build-{task['name']}")

    timings: dict[tuple[str, str], list[float]] = {key: [] for key in tasks}
    costs: dict[tuple[str, str], list[RunStats]] = {key: [] for key in tasks}
    messages: dict[tuple[str, str], str] = {}
    next_id = args.rows
    for round_ in range(args.rounds):
        _change(spark, settings, round_, next_id, args.batch)
        next_id += args.batch
        for key, task in tasks.items():
            run_id = f"r{round_}-{task['name']}"
            started = time.perf_counter()
            result = runner.refresh(task, run_id=run_id, job_group=f"mvs-{run_id}")
            timings[key].append((time.perf_counter() - started) * 1000)
            costs[key].append(group_stats(spark, f"mvs-{run_id}"))
            assert result.state == "COMPLETED", result
            messages[key] = result.message or ""
        print(
            f"  round {round_ + 1}: " + ", ".join(f"{k[0]}/{k[1]} {v[-1]:.0f} ms" for k, v in timings.items())
        )
    for key in tasks:
        if key[1] == "FAST":
            assert messages[key].startswith("incremental:"), (key, messages[key])
    equal = {
        kind: _rows(spark, settings, f"{kind}_fast") == _rows(spark, settings, f"{kind}_complete")
        for kind in QUERIES
    }
    assert all(equal.values()), f"a FAST MV differs from its COMPLETE twin: {equal}"

    rows: list[list[object]] = []
    figures: dict[str, Any] = {"bench": "fast_vs_complete", "base_rows": args.rows, "batch": args.batch}
    for kind in QUERIES:
        fast, full = timings[(kind, "FAST")], timings[(kind, "COMPLETE")]
        speedup = percentile(full, 50) / percentile(fast, 50)
        jobs = {mode: percentile([c.jobs for c in costs[(kind, mode)]], 50) for mode in ("FAST", "COMPLETE")}
        read = {
            mode: percentile([c.rows_read for c in costs[(kind, mode)]], 50) for mode in ("FAST", "COMPLETE")
        }
        for label, mode, values in (
            ("FAST (mvs, from the MV log)", "FAST", fast),
            ("COMPLETE (recompute)", "COMPLETE", full),
        ):
            rows.append(
                [
                    kind,
                    label,
                    len(values),
                    f"{percentile(values, 50):.0f}",
                    f"{max(values):.0f}",
                    f"{jobs[mode]:.0f}",
                    f"{read[mode]:,.0f}",
                ]
            )
        rows.append([kind, "speed-up (p50)", "", f"{speedup:.2f}x", "", "", ""])
        figures[kind] = {
            "fast_p50_ms": round(percentile(fast, 50), 1),
            "complete_p50_ms": round(percentile(full, 50), 1),
            "speedup_p50": round(speedup, 2),
            "fast_jobs_p50": jobs["FAST"],
            "complete_jobs_p50": jobs["COMPLETE"],
            "fast_rows_read_p50": read["FAST"],
            "complete_rows_read_p50": read["COMPLETE"],
            "fast_plan": messages[(kind, "FAST")],
            "equal_rows": equal[kind],
        }
    report(
        f"refresh after small changes to a {args.rows:,}-row base ({args.batch} appended + updates/deletes)",
        ["MV", "refresh", "n", "p50 ms", "max ms", "Spark jobs per run (p50)", "rows read (p50)"],
        rows,
        figures,
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
