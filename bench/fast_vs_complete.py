"""Incremental (FAST) refresh vs complete recomputation, by base size, change size and MV shape, and
N MVs on one base sharing one change read — the worker's own refresh path (``SparkRunner.refresh``).

For each base size (``--rows``), a ``sales`` table (id, customer, amount) and a 10,000-row
``customers`` table (id, region), both with an MV log, and per shape (``--shapes``) a FAST MV, its
COMPLETE twin (what a user would otherwise run: recompute and overwrite) and its FORCE twin (the
worker chooses per run by cost: ``workers.worker.planning``; the table prints its choices and checks
FORCE <= 1.1 x min(FAST, COMPLETE), the goal of issue 30). For each change size
(``--changes``: a whole number is rows, a fraction is of the base) and round, the base changes
(untimed: 80 % appended rows, 10 % updated, 10 % deleted, in 3 commits) and every MV is refreshed
once, timed, with its Spark jobs and the rows its stages read (``workers.jobs.run_stats``). After each
base size every FAST MV must hold exactly its twin's rows.

Then N MVs on one base (``--fanout`` MVs, at the largest base and 0.1 % changes): the change rows are
read once and shared (``workers.jobs.changes.reads``) vs read by each MV (the sharing turned off).

    .venv/bin/python -m bench.fast_vs_complete [--rows 1000000,10000000] [--changes 1,0.0001,0.001,0.01]
        [--shapes aggregate,projection,join] [--rounds 3] [--complete-rounds 1] [--fanout 4] [--profile]

``--profile`` also prints, per change size, where each MV's last FAST run spent its Spark jobs and
their time, step by step (``workers.jobs.run_stats.step_profile``).
"""

from __future__ import annotations

import argparse
import json
import time
from typing import Any

from bench.common import mv_task, percentile, print_table, scratch_dir
from workers.config import Settings
from workers.jobs import create_mv_log, get_spark
from workers.jobs.changes import reads as changes
from workers.jobs.run_stats import RunStats, group_stats, step_profile
from workers.warehouse import table_path
from workers.worker.runner import SparkRunner

SHAPES = {
    "aggregate": "SELECT customer, sum(amount) AS total, count(*) AS orders FROM sales GROUP BY customer",
    # The same with COUNT(amount): its SUM needs no helper state (Oracle's rule for FAST SUM).
    "aggregate_counted": (
        "SELECT customer, sum(amount) AS total, count(amount) AS n, count(*) AS orders FROM sales "
        "GROUP BY customer"
    ),
    "projection": "SELECT id, customer, amount FROM sales WHERE amount > 900",
    "join": (
        "SELECT s.id, s.amount, c.region FROM sales s JOIN customers c ON s.customer = c.id "
        "WHERE s.amount > 900"
    ),
}
FANOUT = (  # N MVs on one base
    "SELECT customer, sum(amount) AS total, count(*) AS orders FROM sales GROUP BY customer",
    "SELECT amount, count(*) AS n FROM sales GROUP BY amount",
    "SELECT id, amount FROM sales WHERE amount < 10",
    "SELECT customer, max(amount) AS top, count(*) AS n FROM sales GROUP BY customer",
    "SELECT customer, min(amount) AS low, count(*) AS n FROM sales GROUP BY customer",
    "SELECT id, customer FROM sales WHERE amount BETWEEN 500 AND 510",
)
CUSTOMERS = 10_000
MODES = ("FAST", "COMPLETE", "FORCE")
READ_STEP = "read the change rows"


class Bench:
    def __init__(self, rows: int) -> None:
        self.rows = rows
        self.settings = Settings(namespace="bench", warehouse=scratch_dir("mvs-fast-"))
        self.spark = get_spark(self.settings)
        self.runner = SparkRunner(self.settings)
        self.next_id = rows
        self.edited = 0  # rows of the original range updated or deleted so far
        self.groups: dict[str, str] = {}  # MV name -> job group of its latest refresh
        spark, path = self.spark, self.path
        spark.range(rows).selectExpr(
            "id", f"id % {CUSTOMERS} AS customer", "(id * 7919) % 1000 AS amount"
        ).write.format("delta").mode("overwrite").save(path("sales"))
        spark.range(CUSTOMERS).selectExpr("id", "concat('r', id % 7) AS region").write.format("delta").mode(
            "overwrite"
        ).save(path("customers"))
        for base in ("sales", "customers"):
            create_mv_log(spark, self.settings, base)

    def path(self, name: str) -> str:
        return table_path(self.settings, name)

    def task(self, name: str, query: str, mode: str) -> dict[str, Any]:
        bases = ["sales", "customers"] if "customers" in query else ["sales"]
        task = mv_task(
            name, trigger="ON_DEMAND", interval_ms=None, query=query, base_tables=bases, refresh_mode=mode
        )
        self.refresh(task, f"build-{name}")  # the first build is complete for both, untimed
        return task

    def refresh(self, task: dict[str, Any], run_id: str) -> tuple[float, RunStats, RunStats, str, str, str]:
        """(ms, run cost, change-read cost, message, technique run, why) of one refresh."""
        group = f"mvs-{run_id}"
        started = time.perf_counter()
        result = self.runner.refresh(task, run_id=run_id, job_group=group)
        elapsed = (time.perf_counter() - started) * 1000
        assert result.state == "COMPLETED", result
        self.groups[task["name"]] = group
        stats, read = group_stats(self.spark, group), group_stats(self.spark, group, step=READ_STEP)
        planning = result.planning or {}
        return (
            elapsed,
            stats,
            read,
            result.message or "",
            planning.get("choice", ""),
            planning.get("reason", ""),
        )

    def change(self, size: int) -> None:
        """``size`` change rows: 80 % appended, 10 % updated, 10 % deleted (3 commits, untimed)."""
        edits = size // 10
        added = size - 2 * edits
        spark = self.spark
        spark.range(self.next_id, self.next_id + added).selectExpr(
            "id", f"id % {CUSTOMERS} AS customer", "(id * 31) % 1000 AS amount"
        ).write.format("delta").mode("append").save(self.path("sales"))
        self.next_id += added
        if edits:  # contiguous id ranges: Delta's data skipping keeps these commits cheap
            lo, sales = self.edited, self.path("sales")
            spark.sql(
                f"UPDATE delta.`{sales}` SET amount = amount + 1 WHERE id >= {lo} AND id < {lo + edits}"
            )
            lo += edits
            spark.sql(f"DELETE FROM delta.`{sales}` WHERE id >= {lo} AND id < {lo + edits}")
            self.edited = lo + edits

    def equal(self, a: str, b: str) -> bool:
        left = self.spark.read.format("delta").load(self.path(a))
        right = self.spark.read.format("delta").load(self.path(b))
        return left.exceptAll(right).isEmpty() and right.exceptAll(left).isEmpty()


def _size(spec: str, rows: int) -> int:
    value = float(spec)
    return int(value) if value >= 1 else max(1, round(rows * value))


def _label(spec: str) -> str:
    value = float(spec)
    return f"{int(value)} row{'s' if value > 1 else ''}" if value >= 1 else f"{value * 100:g} %"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.fast_vs_complete", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--rows", default="1000000,10000000", help="base sizes, comma-separated")
    parser.add_argument(
        "--changes", default="1,0.0001,0.001,0.01", help="change sizes: rows (>= 1) or fractions"
    )
    parser.add_argument(
        "--shapes", default="aggregate,projection,join", help=f"MV shapes, of {', '.join(SHAPES)}"
    )
    parser.add_argument("--rounds", type=int, default=3, help="timed FAST refreshes per change size")
    parser.add_argument(
        "--complete-rounds", type=int, default=1, help="timed COMPLETE refreshes per change size"
    )
    parser.add_argument(
        "--fanout", type=int, default=4, help="MVs on one base sharing a change read (0: skip)"
    )
    parser.add_argument("--profile", action="store_true", help="print each FAST run's jobs and time by step")
    args = parser.parse_args(argv)
    sizes = [int(r) for r in args.rows.split(",")]
    shapes = args.shapes.split(",")
    specs = args.changes.split(",")

    rows: list[list[object]] = []
    figures: dict[str, Any] = {"bench": "fast_vs_complete", "cells": []}
    fast_ms: dict[tuple[int, int, str], float] = {}  # (base rows, change rows, shape) -> FAST p50
    bench = None
    for base_rows in sizes:
        bench = Bench(base_rows)
        tasks = {(s, m): bench.task(f"{s}_{m.lower()}", SHAPES[s], m) for s in shapes for m in MODES}
        for spec in specs:
            size = _size(spec, base_rows)
            runs: dict[tuple[str, str], list[tuple[float, RunStats, RunStats, str, str, str]]] = {
                k: [] for k in tasks
            }
            for round_ in range(args.rounds):
                bench.change(size)
                very_last = spec == specs[-1] and round_ == args.rounds - 1
                # The first run after a change pays for what the others reuse (the base's new Delta
                # snapshot, the change rows' read): the shapes and each shape's twins take turns at
                # going first, as in bench.tpch.
                shift = round_ % len(MODES)
                order = shapes[round_ % len(shapes) :] + shapes[: round_ % len(shapes)]
                turns = [(s, m) for s in order for m in MODES[shift:] + MODES[:shift]]
                for shape, mode in turns:
                    task = tasks[(shape, mode)]
                    timed = mode != "COMPLETE" or round_ < args.complete_rounds
                    if timed or very_last:  # the twins catch up once more for the equality check
                        run = bench.refresh(task, f"{base_rows}-{size}-{round_}-{shape}-{mode}")
                        if timed:
                            runs[(shape, mode)].append(run)
            for shape in shapes:
                fast, full = runs[(shape, "FAST")], runs[(shape, "COMPLETE")]
                assert all(r[3].startswith("incremental:") for r in fast), (shape, fast[-1][3])
                f50, c50 = percentile([r[0] for r in fast], 50), percentile([r[0] for r in full], 50)
                forced = runs[(shape, "FORCE")]
                o50 = percentile([r[0] for r in forced], 50)
                chosen = "/".join(r[4] or "?" for r in forced)  # FORCE's choice, round by round
                fast_ms[(base_rows, size, shape)] = f50
                cell = {
                    "base_rows": base_rows,
                    "change_rows": size,
                    "shape": shape,
                    "fast_p50_ms": round(f50, 1),
                    "complete_p50_ms": round(c50, 1),
                    "speedup_p50": round(c50 / f50, 2),
                    "fast_jobs_p50": percentile([r[1].jobs for r in fast], 50),
                    "complete_jobs_p50": percentile([r[1].jobs for r in full], 50),
                    "fast_rows_read_p50": percentile([r[1].rows_read for r in fast], 50),
                    "complete_rows_read_p50": percentile([r[1].rows_read for r in full], 50),
                    "fast_plan": fast[-1][3],
                    "force_p50_ms": round(o50, 1),
                    "force_choices": chosen,
                    "force_reasons": [r[5] for r in forced],  # why, round by round
                    "force_within_1_1x_min": o50 <= 1.1 * min(f50, c50),
                }
                figures["cells"].append(cell)
                rows.append(
                    [
                        f"{base_rows:,}",
                        _label(spec),
                        shape,
                        f"{f50:.0f}",
                        f"{c50:.0f}",
                        f"{c50 / f50:.2f}x",
                        f"{o50:.0f}",
                        chosen,
                        "yes" if cell["force_within_1_1x_min"] else f"NO ({o50 / min(f50, c50):.2f}x)",
                        f"{cell['fast_jobs_p50']:.0f} / {cell['complete_jobs_p50']:.0f}",
                        f"{cell['fast_rows_read_p50']:,.0f} / {cell['complete_rows_read_p50']:,.0f}",
                    ]
                )
            print(
                f"  {base_rows:,} rows, {_label(spec)} changed: "
                + ", ".join(f"{r[2]} {r[5]} (FORCE {r[7]}: {r[8]})" for r in rows[-len(shapes) :])
            )
            if args.profile:
                _print_profile(bench, shapes, f"{base_rows:,} rows, {_label(spec)} changed")
        unequal = [
            f"{s}_{m}"
            for s in shapes
            for m in ("fast", "force")
            if not bench.equal(f"{s}_{m}", f"{s}_complete")
        ]
        assert not unequal, f"FAST MVs differ from their COMPLETE twins at {base_rows:,} rows: {unequal}"
    figures["growth_10x"] = _growth(fast_ms, sizes, shapes)
    print_table(
        "FAST vs COMPLETE vs FORCE after changes of a given size (p50; FAST and FORCE rows equal COMPLETE's)",
        [
            "base rows",
            "change",
            "MV",
            "FAST ms",
            "COMPLETE ms",
            "speed-up",
            "FORCE ms",
            "FORCE ran",
            "FORCE <= 1.1x min",
            "Spark jobs F / C",
            "rows read F / C",
        ],
        rows,
    )
    growth_rows = [[k, f"{v:.2f}x"] for k, v in figures["growth_10x"].items()]
    if growth_rows:
        print_table(
            "FAST time when the base grows 10x, same number of change rows (goal <= 1.5x)",
            ["change rows, MV, base sizes", "FAST time ratio"],
            growth_rows,
        )
    if args.fanout and bench is not None:
        figures["fanout"] = _fanout(bench, args.fanout, _size("0.001", bench.rows))
    print(json.dumps(figures, sort_keys=True))
    return 0


def _print_profile(bench: Bench, shapes: list[str], what: str) -> None:
    """Each shape's last FAST run, step by step: Spark jobs and their summed time."""
    table_rows: list[list[object]] = []
    for shape in shapes:
        for step, (jobs, ms) in step_profile(bench.spark, bench.groups[f"{shape}_fast"]).items():
            table_rows.append([shape, step, jobs, f"{ms:.0f}"])
    print_table(f"where the last FAST runs went, {what}", ["MV", "step", "Spark jobs", "job ms"], table_rows)


def _growth(
    fast_ms: dict[tuple[int, int, str], float], sizes: list[int], shapes: list[str]
) -> dict[str, float]:
    out: dict[str, float] = {}
    for small in sizes:
        big = small * 10
        for (base, change, shape), ms in fast_ms.items():
            if base == small and (big, change, shape) in fast_ms:
                out[f"{change} rows, {shape}, {small:,} -> {big:,}"] = round(
                    fast_ms[(big, change, shape)] / ms, 2
                )
    return out


def _fanout(bench: Bench, n: int, size: int) -> dict[str, Any]:
    """N FAST MVs on ``sales`` after one change, the change rows shared vs read by each MV."""
    queries = (FANOUT * (n // len(FANOUT) + 1))[:n]
    tasks = [bench.task(f"fan{i}", q, "FAST") for i, q in enumerate(queries)]
    # One untimed FAST run each first: an MV's first FAST run fences its epoch and builds its helper
    # state from the base, which neither timed pass below should carry.
    bench.change(size)
    for i, task in enumerate(tasks):
        bench.refresh(task, f"fan-warm-{i}")
    result: dict[str, Any] = {"mvs": n, "change_rows": size, "base_rows": bench.rows}
    table_rows: list[list[object]] = []
    for label, shared in (("shared (mvs)", True), ("each MV reads", False)):
        bench.change(size)
        changes.forget()
        total_ms, read_jobs, read_rows, all_jobs = 0.0, 0, 0, 0
        for i, task in enumerate(tasks):
            if not shared:
                changes.forget()
            ms, stats, read, message, _, _ = bench.refresh(task, f"fan-{label[:4]}-{i}")
            assert message.startswith("incremental:"), message
            total_ms += ms
            read_jobs, read_rows, all_jobs = (
                read_jobs + read.jobs,
                read_rows + read.rows_read,
                all_jobs + stats.jobs,
            )
        result["shared" if shared else "unshared"] = {
            "total_ms": round(total_ms, 1),
            "change_read_jobs": read_jobs,
            "change_read_rows": read_rows,
            "jobs": all_jobs,
        }
        table_rows.append([label, f"{total_ms:.0f}", read_jobs, f"{read_rows:,}", all_jobs])
    print_table(
        f"{n} FAST MVs on one {bench.rows:,}-row base, {size:,} change rows: one change read for all",
        ["change rows", "total ms", "change-read jobs", "change-read rows", "Spark jobs"],
        table_rows,
    )
    return result


if __name__ == "__main__":
    raise SystemExit(main())
