"""TPC-H as written, FAST vs COMPLETE under its refresh functions — the worker's own refresh path
(``SparkRunner.refresh``) on the 22 queries.

Generates scale factor ``--sf`` with dbgen (``bench.tpch.data``), loads it into Delta with MV logs,
and creates each query's MV as a user would (REFRESH FAST where the analysis gives a FAST plan,
FORCE otherwise: ``bench.tpch.mvs``), a COMPLETE twin, and for a FAST MV a FORCE twin (the refresh
chosen per run by cost: issue 30's goal is FORCE within 1.1 x the faster of FAST and COMPLETE). The
first build of each is untimed. Each round applies RF1 then RF2 (0.1 % of the orders each, untimed),
reads each table they changed at its new version (untimed, ``data.warm``: else whichever MV refreshes
first pays for loading them), and refreshes every MV once, timed, the COMPLETE twin first (``_order``);
after every round each MV must hold exactly its COMPLETE twin's rows (a mismatch is counted and
printed, and the run exits 1). Each timed run reads its change rows itself, as one MV on its bases
does (the rows another MV's run read are shared for a while: ``workers.jobs.changes.reads``;
``bench.fast_vs_complete --fanout`` measures that sharing).

Per query: accepted by the analysis, how its runs went (FAST, or COMPLETE and the reason the run
message gives), FAST p50, COMPLETE p50, their ratio, Spark jobs and generated-code compiles (p50, with
their ms: a plan text new to the JVM's code cache is compiled) of each side, FORCE p50 with
the choice it made each round and whether it stayed within 1.1 x min(FAST, COMPLETE).

    .venv/bin/python -m bench.tpch [--sf 1] [--rounds 2] [--queries q01,q06] [--data-dir DIR] [--no-force]
        [--profile]

``--profile`` lists each Spark job of every timed MV run with the ``workers/`` lines that started it
(``bench.tpch.profile``; its times include the profiling's overhead).
"""

from __future__ import annotations

import argparse
import json
import time
from contextlib import nullcontext
from typing import Any

from bench.common import percentile, print_table, scratch_dir
from bench.tpch import data
from bench.tpch.mvs import Run, TpchMv, create, refresh, rows_of
from bench.tpch.profile import call_sites, group_jobs, print_jobs
from bench.tpch.queries import load_queries
from tests.support.fast_checks import multiset_difference
from workers import warehouse
from workers.config import Settings
from workers.jobs import get_spark
from workers.jobs.changes import reads as change_reads
from workers.records import Record
from workers.worker.runner import SparkRunner

REASON_WIDTH = 70  # of the run message in the table (the JSON line has it whole)


def _equal(spark: Any, settings: Settings, a: str, b: str) -> str | None:
    """None when MVs ``a`` and ``b`` hold the same columns and multiset of rows, else what differs."""
    left, right = (
        rows_of(spark, spark.read.format("delta").load(warehouse.table_path(settings, name)))
        for name in (a, b)
    )
    if left[0] != right[0]:
        return f"columns {left[0]} vs {right[0]}"
    return multiset_difference(left[1], right[1])


Side = tuple[TpchMv, list[Run]]


def _order(twin: Side, mv: Side, force: Side | None, round_: int) -> list[Side]:
    """The order a round refreshes a query's MVs in: the COMPLETE twin first, then the FAST MV and its
    FORCE twin by turns. The run right after a recompute is 16-37 % slower than the one after it
    (session 41, TPC-H SF 1: the rotation of all three put FORCE there in a steady round and the FAST
    MV never, and FORCE read 1.1-1.4x its twin running the same technique); by turns, each of the two
    compared takes that place in one of any two rounds. Going first costs nothing since ``data.warm``."""
    if force is None:
        return [twin, mv]
    return [twin, force, mv] if round_ % 2 == 0 else [twin, mv, force]


def _how(runs: list[Run]) -> str:
    """FAST, or COMPLETE/FAILED with the reason of the last run that was not FAST; SKIPPED when no
    base the query reads changed (RF1 and RF2 touch orders and lineitem only)."""
    done = [r for r in runs if r.state != "SKIPPED"]
    if not runs:
        return "no runs"
    if not done:
        return "SKIPPED: no base it reads changed"
    if all(r.fast for r in done):
        return "FAST"
    last = next(r for r in reversed(done) if not r.fast)
    kind = "FAILED" if last.state == "FAILED" else "COMPLETE"
    reason = last.message.split("; wrote ")[0].removeprefix("complete: ")
    return f"{kind}: {reason}"


def _ms(runs: list[Run]) -> float | None:
    return round(percentile([r.ms for r in runs], 50), 1) if runs else None


def _jobs(runs: list[Run]) -> float | None:
    return percentile([r.spark_jobs or 0 for r in runs], 50) if runs else None


def _compiles(side: str, runs: list[Run]) -> Record:
    """p50 of the runs' generated-code compiles, and of their ms (None without runs)."""
    count = percentile([r.compiles or 0 for r in runs], 50) if runs else None
    ms = round(percentile([r.compile_ms or 0 for r in runs], 50)) if runs else None
    return {f"{side}_compiles_p50": count, f"{side}_compile_ms_p50": ms}


def _force_figures(forced: list[Run], f50: float | None, c50: float | None) -> Record:
    """A FORCE twin's p50, its choice round by round, and whether it stayed within 1.1 x the faster."""
    o50 = _ms(forced)
    # Runs skipped for want of change are a few ms each: not a cell to judge the choice by.
    ran = any(r.state != "SKIPPED" for r in forced)
    fastest = min(f50, c50) if f50 and c50 and ran else None
    return {
        "force_p50_ms": o50,
        "force_choices": "/".join(r.choice or ("SKIPPED" if r.state == "SKIPPED" else "?") for r in forced),
        "force_reasons": [r.reason for r in forced],
        "force_messages": [r.message for r in forced],
        "force_within_1_1x_min": o50 <= 1.1 * fastest if o50 is not None and fastest else None,
        "force_over_min": round(o50 / fastest, 2) if o50 is not None and fastest else None,
    }


def _cell(
    mv: TpchMv, build: Run | None, fast: list[Run], full: list[Run], forced: list[Run], mismatches: list[str]
) -> Record:
    """One query's figures (the JSON line's entry); no times where it was refused or its build failed."""
    if mv.refused:
        how = mv.refused
    elif build is not None and build.state == "FAILED":
        how = _how([build])
    else:
        how = _how(fast)
    f50, c50 = _ms(fast), _ms(full)
    return {
        "query": mv.name,
        "accepted": mv.task is not None,
        "mode": mv.mode,
        "fast": how == "FAST",
        "how": how,
        "fast_p50_ms": f50,
        "complete_p50_ms": c50,
        "speedup_p50": round(c50 / f50, 2) if f50 and c50 else None,
        "fast_jobs_p50": _jobs(fast),
        "complete_jobs_p50": _jobs(full),
        **_compiles("fast", fast),
        **_compiles("complete", full),
        "mismatches": mismatches,
        "messages": [r.message for r in fast],
        **_force_figures(forced, f50, c50),
    }


def _row(cell: Record) -> list[object]:
    def shown(value: float | None, fmt: str) -> str:
        return "-" if value is None else format(value, fmt)

    return [
        cell["query"],
        "yes" if cell["accepted"] else "no",
        cell["mode"],
        cell["how"][:REASON_WIDTH],
        shown(cell["fast_p50_ms"], ",.0f"),
        shown(cell["complete_p50_ms"], ",.0f"),
        shown(cell["speedup_p50"], ".2f"),
        f"{shown(cell['fast_jobs_p50'], '.0f')} / {shown(cell['complete_jobs_p50'], '.0f')}",
        f"{_compiles_shown(cell, 'fast')} / {_compiles_shown(cell, 'complete')}",
        shown(cell["force_p50_ms"], ",.0f"),
        cell["force_choices"] or "-",
        _within(cell),
        len(cell["mismatches"]),
    ]


def _compiles_shown(cell: Record, side: str) -> str:
    count, ms = cell[f"{side}_compiles_p50"], cell[f"{side}_compile_ms_p50"]
    return "-" if count is None else f"{count:.0f} ({ms:,.0f} ms)"


def _within(cell: Record) -> str:
    within = cell["force_within_1_1x_min"]
    return "-" if within is None else "yes" if within else f"NO ({cell['force_over_min']:.2f}x)"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.tpch", description=__doc__.split("\n")[0])
    parser.add_argument("--sf", type=float, default=1.0, help="TPC-H scale factor")
    parser.add_argument("--rounds", type=int, default=2, help="rounds of RF1 + RF2, each refreshed and timed")
    parser.add_argument("--queries", default="", help="a subset, e.g. q01,q06 (default: all 22)")
    parser.add_argument(
        "--data-dir",
        default=None,
        help="keep dbgen's files and a copy of the loaded tables here, and reuse them (same --sf, --rounds)",
    )
    parser.add_argument("--no-force", action="store_true", help="no FORCE twins (a third less time)")
    parser.add_argument(
        "--profile", action="store_true", help="list each Spark job of the MV's runs with the workers/ line"
    )
    args = parser.parse_args(argv)
    settings = Settings(namespace="bench", warehouse=scratch_dir("mvs-tpch-"))
    spark = get_spark(settings)
    runner = SparkRunner(settings)
    queries = load_queries()
    if args.queries:
        queries = {name: queries[name] for name in args.queries.split(",")}

    started = time.perf_counter()
    tpch = data.generate(
        spark,
        settings,
        args.sf,
        args.rounds,
        folder=args.data_dir or scratch_dir("mvs-tpch-dbgen-"),
        keep_loaded=bool(args.data_dir),
    )
    print(
        f"SF {args.sf:g}: generated and loaded in {time.perf_counter() - started:.0f} s; "
        f"RF1 and RF2 {tpch.per_round:,} orders each per round, {args.rounds} rounds"
    )
    pairs: dict[str, tuple[TpchMv, TpchMv]] = {
        name: (create(settings, name, sql), create(settings, f"{name}_complete", sql, mode="COMPLETE"))
        for name, sql in queries.items()
    }
    # A FORCE twin where the MV is FAST (an MV that is not is FORCE itself).
    forces: dict[str, TpchMv] = {
        name: create(settings, f"{name}_force", queries[name], mode="FORCE")
        for name, (mv, _) in pairs.items()
        if mv.mode == "FAST" and not args.no_force
    }
    builds: dict[str, Run] = {}
    for name, (mv, twin) in pairs.items():
        if mv.task is not None:
            builds[name] = refresh(runner, mv, "build")
            refresh(runner, twin, "build")
            if name in forces:
                refresh(runner, forces[name], "build")
    runs: dict[str, tuple[list[Run], list[Run], list[Run]]] = {name: ([], [], []) for name in pairs}
    mismatches: dict[str, list[str]] = {name: [] for name in pairs}
    for round_ in range(args.rounds):
        data.rf1(spark, tpch, round_)
        data.rf2(spark, tpch, round_)
        data.warm(spark, tpch)
        for name, (mv, twin) in pairs.items():
            if mv.task is None or builds[name].state == "FAILED":
                continue
            for side, into in _order(
                (twin, runs[name][1]),
                (mv, runs[name][0]),
                (forces[name], runs[name][2]) if name in forces else None,
                round_,
            ):
                # Not the rows the side before read, which whichever of the FAST and FORCE twins runs
                # second would take shared: one MV on its bases reads them itself.
                change_reads.forget()
                with call_sites(spark) if args.profile and side is mv else nullcontext():
                    into.append(refresh(runner, side, f"r{round_}"))
            mv_run, twin_run = runs[name][0][-1], runs[name][1][-1]
            forced = (
                f", FORCE {runs[name][2][-1].ms:,.0f} ms ({runs[name][2][-1].choice})"
                if name in forces
                else ""
            )
            print(
                f"    {name}: {mv_run.ms:,.0f} ms ({mv_run.message[:60]}), "
                f"COMPLETE {twin_run.ms:,.0f} ms{forced}"
            )
            if args.profile:
                print_jobs(group_jobs(spark, f"tpch-{mv.name}-r{round_}"))
            for other in [mv, *([forces[name]] if name in forces else [])]:
                difference = _equal(spark, settings, other.name, twin.name)
                if difference is not None:
                    mismatches[name].append(f"round {round_} {other.name}: {difference}")
        print(f"  round {round_ + 1} of {args.rounds} refreshed ({time.perf_counter() - started:.0f} s)")

    cells = [_cell(mv, builds.get(name), *runs[name], mismatches[name]) for name, (mv, _) in pairs.items()]
    table_rows = [_row(cell) for cell in cells]
    fast_cells = [c for c in cells if c["fast"]]
    figures = {
        "bench": "tpch",
        "sf": args.sf,
        "rounds": args.rounds,
        "orders_per_refresh_function": tpch.per_round,
        "accepted": sum(c["accepted"] for c in cells),
        "fast": len(fast_cells),
        "mismatches": sum(len(c["mismatches"]) for c in cells),
        "fast_speedup_median": (
            percentile([c["speedup_p50"] for c in fast_cells], 50) if fast_cells else None
        ),
        "force_within_1_1x_min": sum(c["force_within_1_1x_min"] is True for c in cells),
        "force_cells": sum(c["force_within_1_1x_min"] is not None for c in cells),
        "queries": cells,
    }
    print_table(
        f"TPC-H SF {args.sf:g} as written: MV (FAST where accepted, FORCE otherwise) vs COMPLETE and "
        f"FORCE twins, {args.rounds} rounds of RF1 + RF2 ({tpch.per_round:,} orders each)",
        [
            "query",
            "accepted",
            "mode",
            "runs (FAST, or COMPLETE: the run's reason)",
            "MV p50 ms",
            "COMPLETE p50 ms",
            "ratio",
            "Spark jobs MV / C",
            "compiles MV / C",
            "FORCE p50 ms",
            "FORCE ran",
            "FORCE <= 1.1x min",
            "mismatches",
        ],
        table_rows,
    )
    for name, found in mismatches.items():
        for line in found:
            print(f"MISMATCH {name} {line}")
    print(json.dumps(figures, sort_keys=True))
    return 1 if figures["mismatches"] else 0


if __name__ == "__main__":
    raise SystemExit(main())
