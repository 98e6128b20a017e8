"""Prometheus metrics of the scheduling layer, on a registry of their own."""

from __future__ import annotations

import dataclasses
import threading
import urllib.request

from prometheus_client import CollectorRegistry

from workers.sched.clock import ManualClock
from workers.sched.executor import BoundedExecutor
from workers.sched.executor_types import (
    EXECUTOR_COUNTERS,
    EXECUTOR_LEVELS,
    CancelToken,
    ExecutorMetrics,
    SubmitStatus,
)
from workers.sched.gauges import TaskGauges
from workers.sched.metrics import SchedMetrics, process_metrics, serve_metrics

WAIT = 5.0


def test_executor_numbers_are_read_at_scrape_time() -> None:
    metrics = SchedMetrics(CollectorRegistry())
    ex = BoundedExecutor(1, 1, clock=ManualClock(), name="refresh", watchdog=False)
    metrics.track_executor(ex)
    release, started = threading.Event(), threading.Event()

    def body(token: CancelToken) -> object:
        started.set()
        return release.wait(WAIT)

    assert ex.submit("mv:a", body, priority=0) is SubmitStatus.ACCEPTED
    assert ex.submit("mv:b", body, priority=0) is SubmitStatus.REJECTED
    assert started.wait(WAIT)

    def value(name: str) -> float | None:
        return metrics.registry.get_sample_value(name, {"pool": "refresh"})

    assert value("mvs_sched_submitted_total") == 1
    assert value("mvs_sched_rejected_total") == 1
    assert value("mvs_sched_running") == 1
    assert value("mvs_sched_waiting") == 0
    release.set()
    assert ex.wait_idle(timeout_s=WAIT)
    assert value("mvs_sched_completed_total") == 1
    assert value("mvs_sched_running") == 0
    newer = BoundedExecutor(1, 1, clock=ManualClock(), name="refresh", watchdog=False)
    metrics.track_executor(newer)
    metrics.untrack_executor(ex)  # an older executor of the same name leaving keeps the newer one
    assert value("mvs_sched_completed_total") == 0
    metrics.untrack_executor(newer)
    assert value("mvs_sched_completed_total") is None
    ex.shutdown()
    newer.shutdown()


def test_per_task_gauges_are_read_at_scrape_time_and_skips_counted() -> None:
    metrics = SchedMetrics(CollectorRegistry())
    now = [0.0]
    # A source as the manager registers it: computed from the current time on every scrape.
    metrics.track_tasks(
        "w1",
        lambda: [TaskGauges("mv:a", 10.0 + now[0], 5.0 - now[0]), TaskGauges("mvlog:t", None, None)],
    )
    metrics.record_skip()
    metrics.record_skip()
    reg = metrics.registry
    assert reg.get_sample_value("mvs_mv_lag_seconds", {"task_id": "mv:a"}) == 10.0
    assert reg.get_sample_value("mvs_task_next_run_seconds", {"task_id": "mv:a"}) == 5.0
    now[0] = 8.0
    assert reg.get_sample_value("mvs_mv_lag_seconds", {"task_id": "mv:a"}) == 18.0
    assert reg.get_sample_value("mvs_task_next_run_seconds", {"task_id": "mv:a"}) == 0.0  # overdue: 0
    assert reg.get_sample_value("mvs_task_next_run_seconds", {"task_id": "mvlog:t"}) is None
    assert reg.get_sample_value("mvs_sched_skipped_total", {"reason": "no_change"}) == 2
    metrics.untrack_tasks("w1")
    assert reg.get_sample_value("mvs_mv_lag_seconds", {"task_id": "mv:a"}) is None


def test_process_metrics_is_one_instance_and_served_over_http() -> None:
    assert process_metrics() is process_metrics()
    process_metrics().track_tasks("served", lambda: [TaskGauges("mv:served", 1.0, None)])
    server, thread = serve_metrics(0, addr="127.0.0.1")
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{server.server_port}/metrics", timeout=WAIT) as resp:
            body = resp.read().decode()
        assert 'mvs_mv_lag_seconds{task_id="mv:served"} 1.0' in body
    finally:
        server.shutdown()
        server.server_close()
        thread.join(WAIT)
        process_metrics().untrack_tasks("served")


def test_every_executor_number_is_exported_as_a_counter_or_a_level() -> None:
    names = [f.name for f in dataclasses.fields(ExecutorMetrics)]
    assert sorted(EXECUTOR_COUNTERS + EXECUTOR_LEVELS) == sorted(names)
    ex = BoundedExecutor(1, 1, clock=ManualClock(), name="all", watchdog=False)
    metrics = SchedMetrics(CollectorRegistry())
    metrics.track_executor(ex)
    for name in EXECUTOR_COUNTERS:
        assert metrics.registry.get_sample_value(f"mvs_sched_{name}_total", {"pool": "all"}) == 0
    assert metrics.registry.get_sample_value("mvs_sched_max_concurrency", {"pool": "all"}) == 1
    ex.shutdown()
