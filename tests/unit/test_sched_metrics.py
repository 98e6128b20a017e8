"""Prometheus metrics of the scheduling layer, on a registry of their own."""

from __future__ import annotations

import threading
import urllib.request

from prometheus_client import CollectorRegistry

from workers.sched.clock import ManualClock
from workers.sched.executor import BoundedExecutor
from workers.sched.metrics import SchedMetrics, process_metrics, serve_metrics
from workers.sched.runs import CancelToken, SubmitStatus

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
    metrics.untrack_executor("refresh")
    assert value("mvs_sched_completed_total") is None
    ex.shutdown()


def test_per_task_gauges_and_skips() -> None:
    metrics = SchedMetrics(CollectorRegistry())
    metrics.observe_task("mv:a", lag_s=12.5, next_run_in_s=-3.0)
    metrics.record_skip()
    metrics.record_skip()
    reg = metrics.registry
    assert reg.get_sample_value("mvs_mv_lag_seconds", {"task_id": "mv:a"}) == 12.5
    assert reg.get_sample_value("mvs_task_next_run_seconds", {"task_id": "mv:a"}) == 0.0  # overdue: 0
    assert reg.get_sample_value("mvs_sched_skipped_total", {"reason": "no_change"}) == 2
    metrics.forget_task("mv:a")
    metrics.forget_task("mv:never")
    assert reg.get_sample_value("mvs_mv_lag_seconds", {"task_id": "mv:a"}) is None


def test_process_metrics_is_one_instance_and_served_over_http() -> None:
    assert process_metrics() is process_metrics()
    process_metrics().observe_task("mv:served", lag_s=1.0)
    server, thread = serve_metrics(0, addr="127.0.0.1")
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{server.server_port}/metrics", timeout=WAIT) as resp:
            body = resp.read().decode()
        assert 'mvs_mv_lag_seconds{task_id="mv:served"} 1.0' in body
    finally:
        server.shutdown()
        server.server_close()
        thread.join(WAIT)
        process_metrics().forget_task("mv:served")
