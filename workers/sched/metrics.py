"""Prometheus metrics of the scheduling layer, on a registry of their own (one per process).

Executor numbers are read from ``BoundedExecutor.metrics()`` at scrape time (a custom
collector), so they are never counted twice and need no calls on the hot path. Per-task gauges
(data lag, time to next run) are read at scrape time too, from a source the manager registers
(its maintainers' ``gauges()``): a gauge set when the schedule changed would be stale a second
later. The skip counter is incremented by the maintainer. The active coordinator registers its
freshness decisions (``mvs_mv_stale``, ``mvs_mv_freshness_lag_seconds``) and counts the freshness
events it publishes.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable
from typing import Protocol
from wsgiref.simple_server import WSGIServer

from prometheus_client import CollectorRegistry, Counter, start_http_server
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.gc_collector import GCCollector
from prometheus_client.platform_collector import PlatformCollector
from prometheus_client.process_collector import ProcessCollector

from workers.sched.executor_types import EXECUTOR_COUNTERS, EXECUTOR_LEVELS, ExecutorMetrics
from workers.sched.gauges import FreshnessGauges, TaskGauges

__all__ = ["PREFIX", "MeteredExecutor", "SchedMetrics", "TaskGauges", "process_metrics", "serve_metrics"]

PREFIX = "mvs_sched"


class MeteredExecutor(Protocol):
    """What the collector needs of an executor (``BoundedExecutor`` fits)."""

    name: str

    def metrics(self) -> ExecutorMetrics: ...


class _ExecutorCollector:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._executors: dict[str, MeteredExecutor] = {}

    def track(self, executor: MeteredExecutor) -> None:
        with self._lock:
            self._executors[executor.name] = executor

    def untrack(self, executor: MeteredExecutor) -> None:
        with self._lock:
            if self._executors.get(executor.name) is executor:  # not a later one of the same name
                del self._executors[executor.name]

    def collect(self) -> Iterable[Metric]:
        with self._lock:
            snapshots = [(name, ex.metrics()) for name, ex in self._executors.items()]
        for field in EXECUTOR_COUNTERS:
            family = CounterMetricFamily(f"{PREFIX}_{field}", f"Runs {field} by an executor", labels=["pool"])
            for name, snap in snapshots:
                family.add_metric([name], getattr(snap, field))
            yield family
        for field in EXECUTOR_LEVELS:
            family_g = GaugeMetricFamily(f"{PREFIX}_{field}", f"Executor {field} now", labels=["pool"])
            for name, snap in snapshots:
                family_g.add_metric([name], getattr(snap, field))
            yield family_g


TaskSource = Callable[[], Iterable[TaskGauges]]


class _TaskCollector:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._sources: dict[str, TaskSource] = {}

    def track(self, name: str, source: TaskSource) -> None:
        with self._lock:
            self._sources[name] = source

    def untrack(self, name: str) -> None:
        with self._lock:
            self._sources.pop(name, None)

    def collect(self) -> Iterable[Metric]:
        with self._lock:
            sources = list(self._sources.values())
        lag = GaugeMetricFamily("mvs_mv_lag_seconds", "Age of the data an MV reflects", labels=["task_id"])
        next_run = GaugeMetricFamily(
            "mvs_task_next_run_seconds", "Seconds until the task's next run (0: due)", labels=["task_id"]
        )
        for source in sources:
            for gauges in source():
                if gauges.lag_s is not None:
                    lag.add_metric([gauges.task_id], gauges.lag_s)
                if gauges.next_run_in_s is not None:
                    next_run.add_metric([gauges.task_id], max(0.0, gauges.next_run_in_s))
        yield lag
        yield next_run


FreshnessSource = Callable[[], Iterable[FreshnessGauges]]


class _FreshnessCollector:
    """The active coordinator's freshness decisions (``workers/coordinator/freshness.py``)."""

    def __init__(self) -> None:
        self.source: FreshnessSource | None = None

    def collect(self) -> Iterable[Metric]:
        source = self.source
        lag = GaugeMetricFamily(
            "mvs_mv_freshness_lag_seconds",
            "Age of the oldest base-table commit an MV with a freshness goal does not reflect",
            labels=["task_id"],
        )
        goal = GaugeMetricFamily(
            "mvs_mv_freshness_goal_seconds", "An MV's FRESHNESS or TARGET LAG", labels=["task_id"]
        )
        stale = GaugeMetricFamily(
            "mvs_mv_stale", "1 while an MV misses its freshness goal", labels=["task_id"]
        )
        for gauges in source() if source is not None else ():
            lag.add_metric([gauges.task_id], gauges.lag_s)
            goal.add_metric([gauges.task_id], gauges.goal_s)
            stale.add_metric([gauges.task_id], 1.0 if gauges.stale else 0.0)
        yield lag
        yield goal
        yield stale


class SchedMetrics:
    """The scheduling metrics of one process; tests build their own on a fresh registry."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry if registry is not None else CollectorRegistry()
        self._executors = _ExecutorCollector()
        self.registry.register(self._executors)
        self._tasks = _TaskCollector()
        self.registry.register(self._tasks)
        self._freshness = _FreshnessCollector()
        self.registry.register(self._freshness)
        self.freshness_events = Counter(
            "mvs_freshness_events",
            "Freshness events published (an MV turned STALE or RECOVERED)",
            ["state"],
            registry=self.registry,
        )
        self.skipped = Counter(
            f"{PREFIX}_skipped",
            "Due runs that ran no job (base tables unchanged, or the result already applied)",
            ["reason"],
            registry=self.registry,
        )
        self.loop_errors = Counter(
            "mvs_loop_errors",
            "Exceptions a role's loop survived (step() raised; logged with its traceback, backed off)",
            ["role"],
            registry=self.registry,
        )

    def track_executor(self, executor: MeteredExecutor) -> None:
        """Export ``executor.metrics()`` under ``pool=executor.name`` (replaces one of that name)."""
        self._executors.track(executor)

    def untrack_executor(self, executor: MeteredExecutor) -> None:
        """Stop exporting ``executor`` (a later executor tracked under its name stays)."""
        self._executors.untrack(executor)

    def track_tasks(self, name: str, source: TaskSource) -> None:
        """Export, at every scrape, the gauges ``source()`` returns (one source per ``name``).

        ``source`` runs on the scrape thread: it must only read, quickly.
        """
        self._tasks.track(name, source)

    def untrack_tasks(self, name: str) -> None:
        """Drop a source; its tasks' series disappear from the next scrape."""
        self._tasks.untrack(name)

    def track_freshness(self, source: FreshnessSource | None) -> None:
        """Export, at every scrape, the freshness gauges ``source()`` returns (None: stop)."""
        self._freshness.source = source

    def record_freshness_event(self, state: str) -> None:
        self.freshness_events.labels(state).inc()

    def record_skip(self, reason: str = "no_change") -> None:
        self.skipped.labels(reason).inc()

    def record_loop_error(self, role: str) -> None:
        self.loop_errors.labels(role).inc()


_process_lock = threading.Lock()
_process_metrics: SchedMetrics | None = None


def process_metrics() -> SchedMetrics:
    """The process-wide instance, with process/GC/platform collectors on the same registry."""
    global _process_metrics
    with _process_lock:
        if _process_metrics is None:
            registry = CollectorRegistry()
            ProcessCollector(registry=registry)
            GCCollector(registry=registry)
            PlatformCollector(registry=registry)
            _process_metrics = SchedMetrics(registry)
        return _process_metrics


def serve_metrics(
    port: int, *, addr: str = "0.0.0.0", metrics: SchedMetrics | None = None
) -> tuple[WSGIServer, threading.Thread]:
    """Serve ``/metrics`` on a daemon thread; ``port=0`` picks a free port (``server.server_port``).

    Stop with ``server.shutdown(); server.server_close()``.
    """
    registry = (metrics or process_metrics()).registry
    return start_http_server(port, addr=addr, registry=registry)
