"""What every benchmark shares: percentiles, the table, the closing JSON line, task records, scratch
folders."""

from __future__ import annotations

import atexit
import json
import math
import os
import shutil
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path

from workers.codec import Record
from workers.coordinator.handlers import Context, new_task
from workers.ddl import QueryPlan, plan_record
from workers.jobs import with_plan
from workers.status import table


def broker(root: Path) -> tuple[str, Callable[[], None]]:
    """A broker for a benchmark's fleet: ``MVS_BOOTSTRAP_SERVERS`` if set, else an embedded one
    under ``root``; its bootstrap servers and how to stop it."""
    external = os.environ.get("MVS_BOOTSTRAP_SERVERS")
    if external:
        return external, lambda: None
    from workers.embedded.broker import EmbeddedKafka, free_port

    started = EmbeddedKafka(root / "kafka", port=free_port(), controller_port=free_port()).start()
    return started.bootstrap_servers, started.stop


def scratch_dir(prefix: str) -> str:
    """A new temporary folder (a benchmark's warehouse, dbgen's files), removed when the process exits:
    a TPC-H SF 1 run writes ~340 MB, which each run used to leave behind."""
    path = tempfile.mkdtemp(prefix=prefix)
    atexit.register(shutil.rmtree, path, ignore_errors=True)
    return path


def percentile(values: Sequence[float], q: float) -> float:
    """Nearest-rank percentile (``q`` in 0..100) of ``values``; NaN when empty."""
    if not values:
        return math.nan
    ordered = sorted(values)
    rank = max(1, math.ceil(q / 100 * len(ordered)))
    return ordered[rank - 1]


def report(title: str, headers: Sequence[str], rows: Sequence[Sequence[object]], figures: Record) -> None:
    """Print the table, then (last) one JSON line with the figures, for scripts to read."""
    print_table(title, headers, rows)
    print(json.dumps(figures, sort_keys=True))


def print_table(title: str, headers: Sequence[str], rows: Sequence[Sequence[object]]) -> None:
    """A titled table (a benchmark printing several ends with ``report``)."""
    print(f"\n{title}  (load average {os.getloadavg()[0]:.2f} on {os.cpu_count()} CPUs)")
    print(table(headers, rows))


WORKER_ID = "bench"  # the worker the benchmark tasks are issued to (a manager starts only its own)


def mv_task(
    name: str,
    *,
    trigger: str,
    interval_ms: int | None,
    query: str,
    base_tables: Sequence[str] = (),
    refresh_mode: str = "COMPLETE",
    plan: QueryPlan | None = None,
) -> Record:
    """A TaskRecord as the coordinator hands it to worker WORKER_ID (ADD_MAINTAINER). ``plan``: the
    coordinator's analysis of ``query`` (``workers.ddl.analysis.analyze_mv_query``), else the worker's
    own, as for a record without one (``with_plan``: no table columns, so a join must qualify its own)."""
    spec: Record = {
        "query": query,
        "refresh_mode": refresh_mode,
        "trigger": {"kind": trigger, "interval_ms": interval_ms},
        "base_tables": list(base_tables),
    }
    if plan is not None:
        spec["plan"] = plan_record(plan)
    ctx = Context(now_ms=0, coordinator_epoch=1, table_exists=lambda table: True)
    return with_plan({**new_task(f"mv:{name}", "MV", name, ctx, mv=spec), "owner": WORKER_ID})
