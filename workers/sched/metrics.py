"""Prometheus metrics of the scheduling layer, on a registry of their own (one per process).

Executor numbers are read from ``BoundedExecutor.metrics()`` at scrape time (a custom
collector), so they are never counted twice and need no calls on the hot path. Per-MV gauges
(data lag, time to next run) and the skip counter are set by the maintainer.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterable
from typing import Protocol
from wsgiref.simple_server import WSGIServer

from prometheus_client import CollectorRegistry, Counter, Gauge, start_http_server
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.gc_collector import GCCollector
from prometheus_client.platform_collector import PlatformCollector
from prometheus_client.process_collector import ProcessCollector

from workers.sched.runs import ExecutorMetrics

PREFIX = "mvs_sched"
_COUNTERS = ("submitted", "completed", "failed", "timeout", "rejected", "canceled", "coalesced")
_GAUGES = ("running", "waiting", "zombies", "max_concurrency", "queue_size")


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

    def untrack(self, name: str) -> None:
        with self._lock:
            self._executors.pop(name, None)

    def collect(self) -> Iterable[Metric]:
        with self._lock:
            snapshots = [(name, ex.metrics()) for name, ex in self._executors.items()]
        for field in _COUNTERS:
            family = CounterMetricFamily(f"{PREFIX}_{field}", f"Runs {field} by an executor", labels=["pool"])
            for name, snap in snapshots:
                family.add_metric([name], getattr(snap, field))
            yield family
        for field in _GAUGES:
            family_g = GaugeMetricFamily(f"{PREFIX}_{field}", f"Executor {field} now", labels=["pool"])
            for name, snap in snapshots:
                family_g.add_metric([name], getattr(snap, field))
            yield family_g


class SchedMetrics:
    """The scheduling metrics of one process; tests build their own on a fresh registry."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry if registry is not None else CollectorRegistry()
        self._executors = _ExecutorCollector()
        self.registry.register(self._executors)
        self.skipped = Counter(
            f"{PREFIX}_skipped", "Runs skipped (no base-table change…)", ["reason"], registry=self.registry
        )
        self.lag_seconds = Gauge(
            "mvs_mv_lag_seconds", "Age of the data an MV reflects", ["task_id"], registry=self.registry
        )
        self.next_run_seconds = Gauge(
            "mvs_task_next_run_seconds",
            "Seconds until the task's next run",
            ["task_id"],
            registry=self.registry,
        )

    def track_executor(self, executor: MeteredExecutor) -> None:
        """Export ``executor.metrics()`` under ``pool=executor.name`` (replaces one of that name)."""
        self._executors.track(executor)

    def untrack_executor(self, name: str) -> None:
        self._executors.untrack(name)

    def record_skip(self, reason: str = "no_change") -> None:
        self.skipped.labels(reason).inc()

    def observe_task(
        self, task_id: str, *, lag_s: float | None = None, next_run_in_s: float | None = None
    ) -> None:
        """Set a task's gauges; None leaves one untouched."""
        if lag_s is not None:
            self.lag_seconds.labels(task_id).set(lag_s)
        if next_run_in_s is not None:
            self.next_run_seconds.labels(task_id).set(max(0.0, next_run_in_s))

    def forget_task(self, task_id: str) -> None:
        """Drop a task's series (it was removed or moved to another worker)."""
        for gauge in (self.lag_seconds, self.next_run_seconds):
            with contextlib.suppress(KeyError):  # never observed
                gauge.remove(task_id)


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
