"""The refresh engine: Spark jobs that refresh an MV (complete or FAST), keep and purge MV logs, and
commit to Delta tables. This module is its public face; the worker, the benchmarks and most tests use
only these names.

Inside (docs/ARCHITECTURE.md, "The refresh engine"): ``complete`` (a complete refresh), ``fast/`` (a
FAST refresh: its driver, one module per operator rule, ``fast/aggregate/``, and the commit sequence),
``changes/`` (MV logs, change rows), ``delta/`` (the Delta log, commit metadata, the idempotent write,
delta-rs), ``spark/`` (sessions, the query guard, job groups, held frames).

The names are imported on first use: importing this package (or its light modules ``request``,
``errors`` and ``rebuilt``) does not start PySpark, so a role that never runs a job never loads it.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from workers.jobs.changes.mvlog import PurgeResult, create_mv_log, drop_mv_log, purge
    from workers.jobs.complete import (
        RefreshResult,
        cancel_run,
        drop_mv_table,
        read_watermark,
        refresh_complete,
    )
    from workers.jobs.delta.metadata import MvWatermark
    from workers.jobs.errors import (
        ChangesNotRetained,
        JobError,
        RunCancelled,
        TableNotFound,
        classify_failure,
        is_write_conflict,
    )
    from workers.jobs.fast.refresh import (
        FastRefreshNotPossible,
        fast_refresh_blocker,
        helper_state_catch_up,
        refresh_incremental,
    )
    from workers.jobs.request import RunRequest, with_plan
    from workers.jobs.spark.groups import job_group
    from workers.jobs.spark.session import get_spark, stop_spark

# Each public name and the module that defines it.
_HOME = {
    "PurgeResult": "changes.mvlog",
    "create_mv_log": "changes.mvlog",
    "drop_mv_log": "changes.mvlog",
    "purge": "changes.mvlog",
    "RefreshResult": "complete",
    "cancel_run": "complete",
    "drop_mv_table": "complete",
    "read_watermark": "complete",
    "refresh_complete": "complete",
    "MvWatermark": "delta.metadata",
    "ChangesNotRetained": "errors",
    "JobError": "errors",
    "RunCancelled": "errors",
    "TableNotFound": "errors",
    "classify_failure": "errors",
    "is_write_conflict": "errors",
    "FastRefreshNotPossible": "fast.refresh",
    "fast_refresh_blocker": "fast.refresh",
    "helper_state_catch_up": "fast.refresh",
    "refresh_incremental": "fast.refresh",
    "RunRequest": "request",
    "with_plan": "request",
    "job_group": "spark.groups",
    "get_spark": "spark.session",
    "stop_spark": "spark.session",
}

__all__ = [
    "ChangesNotRetained",
    "FastRefreshNotPossible",
    "JobError",
    "MvWatermark",
    "PurgeResult",
    "RefreshResult",
    "RunCancelled",
    "RunRequest",
    "TableNotFound",
    "cancel_run",
    "classify_failure",
    "create_mv_log",
    "drop_mv_log",
    "drop_mv_table",
    "fast_refresh_blocker",
    "helper_state_catch_up",
    "get_spark",
    "is_write_conflict",
    "job_group",
    "purge",
    "read_watermark",
    "refresh_complete",
    "refresh_incremental",
    "stop_spark",
    "with_plan",
]


def __getattr__(name: str) -> Any:
    home = _HOME.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{home}"), name)
