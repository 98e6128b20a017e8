"""Issue 4 end to end: a run past its timeout is really cancelled (its Spark job stops, the slot
frees up for another task), `mvs history` shows it, and the worker's Prometheus endpoint counts it.

Real broker, real Spark (the session fixture), the real coordinator and manager loops.
"""

from __future__ import annotations

import re
import urllib.request
from collections.abc import Iterator
from dataclasses import replace
from typing import Any

import pytest

from tests.support.cluster import Cluster, wait_until
from workers import warehouse
from workers.cli import main
from workers.config import Settings
from workers.demo_tables import create_table
from workers.records import Record
from workers.sched.metrics import serve_metrics

TIMEOUT_S = (
    30.0  # a few seconds of Delta reads come first (more on a loaded 2-core CI machine); the join is minutes
)
# 2·10^10 row pairs through a broadcast nested-loop join: minutes of work, far past the timeout.
# (Its tasks stop soon after a kill: they check for it between scan batches. A sort-merge join over
# a few huge keys would not, and would keep Spark's cores busy long after its job was cancelled.)
SLOW = "SELECT a.g, count(*) AS n FROM big a JOIN probe b ON a.id > b.id GROUP BY a.g"


@pytest.fixture
def cluster(settings: Settings, spark: Any) -> Iterator[Cluster]:
    spark.range(1_000_000).selectExpr("id", "id % 10 AS g").write.format("delta").save(
        warehouse.table_path(settings, "big")
    )
    spark.range(20_000).write.format("delta").save(warehouse.table_path(settings, "probe"))
    create_table(spark, settings, "small", [{"id": i} for i in range(5)], "id BIGINT")
    # One slot: the small MV can only run once the slow run's slot is given back. The slow join holds
    # both cores for its 30 s: a broker starved of them for a few seconds made the worker's group
    # session time out and its task move mid-run (a CI run, session 24), which this test is not about.
    cluster = Cluster(
        replace(settings, run_timeout_s=TIMEOUT_S, max_concurrent_runs=1, session_timeout_ms=20_000)
    )
    yield cluster
    cluster.close()


def run_record(cluster: Cluster, task_id: str, state: str, run_id: str | None = None) -> Record | None:
    for record in reversed(cluster.client.history(task_id)):
        if record["state"] == state and run_id in (None, record["run_id"]):
            return record
    return None


def wait_for_run(cluster: Cluster, task_id: str, state: str, run_id: str | None = None) -> Record:
    found = wait_until(
        lambda: run_record(cluster, task_id, state, run_id), what=f"a {state} run of {task_id}"
    )
    assert found is not None
    return found


def scrape(port: int) -> dict[str, float]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
        text = response.read().decode()
    samples = {}
    for line in text.splitlines():
        match = re.match(r"^(\w+(?:\{[^}]*\})?) (\S+)$", line)
        if match:
            samples[match.group(1)] = float(match.group(2))
    return samples


def test_run_past_its_timeout_is_cancelled_frees_its_slot_and_shows_in_history_and_metrics(
    cluster: Cluster, spark: Any, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    server, thread = serve_metrics(0, addr="127.0.0.1")  # what `mvs worker --metrics-port N` serves
    try:
        before = scrape(server.server_port)
        assert cluster.sql(f"CREATE MATERIALIZED VIEW pairs REFRESH COMPLETE ON DEMAND AS {SLOW}")["accepted"]
        slow = wait_for_run(cluster, "mv:pairs", "RUNNING")
        group = f"mvs-{slow['run_id']}"
        tracker = spark.sparkContext.statusTracker()
        wait_until(
            lambda: set(tracker.getJobIdsForGroup(group)) & set(tracker.getActiveJobsIds()),
            what="the slow run's Spark job running",
        )
        created = cluster.sql(
            "CREATE MATERIALIZED VIEW small_copy REFRESH COMPLETE ON DEMAND AS SELECT id FROM small"
        )
        assert created["accepted"]
        executor = cluster.managers[0].host.executor
        wait_until(lambda: executor.metrics().waiting == 1, what="the small MV queued behind the slow run")

        failed = wait_for_run(cluster, "mv:pairs", "ERROR", slow["run_id"])
        assert f"exceeded its timeout of {TIMEOUT_S:g}s and was cancelled" in failed["message"]
        assert failed["error"]["code"] == 2001 and failed["error"]["retryable"]
        # The record keeps the executor's times: the outcome goes out at the deadline (the watchdog's
        # latency), however long the worker's loop then takes to write it down.
        assert TIMEOUT_S * 1000 - 5 <= failed["ended_at"] - failed["started_at"] < TIMEOUT_S * 1000 + 3000
        # Really cancelled, not just abandoned: the run's body returned (its Spark call was
        # interrupted), so nothing of its job group is still running or can start any more.
        wait_until(lambda: executor.metrics().zombies == 0, timeout_s=30, what="the cancelled body returned")
        assert not set(tracker.getJobIdsForGroup(group)) & set(tracker.getActiveJobsIds())
        statuses = [tracker.getJobInfo(j).status for j in tracker.getJobIdsForGroup(group)]
        assert statuses and "RUNNING" not in statuses  # a job caught mid-way ends FAILED
        # The slot came back at the timeout: the queued small MV ran on it at once, before the slow
        # task's retry, and Spark's cores were free again: it completed within its own timeout.
        done = wait_until(
            lambda: [r for r in cluster.client.history("mv:small_copy") if r["ended_at"]],
            what="the small MV's first run ended",
        )[0]
        assert done["state"] == "COMPLETED", done
        deadline_ms = failed["started_at"] + TIMEOUT_S * 1000
        assert deadline_ms - 5 <= done["started_at"] < deadline_ms + 5000  # before the 5 s retry
        assert done["watermark_after"] == {"small": 0}
        wait_until(lambda: (cluster.task("mv:pairs") or {}).get("state") == "WARNING", what="WARNING state")
        error = (cluster.task("mv:pairs") or {})["error"]
        assert error["code"] == 2001 and "timeout" in error["message"]

        # A refresh request with nothing changed: no job, recorded as a skip.
        assert cluster.sql("REFRESH MATERIALIZED VIEW small_copy")["accepted"]
        wait_for_run(cluster, "mv:small_copy", "SKIPPED")

        after = scrape(server.server_port)

        def grew(name: str) -> float:
            return after.get(name, 0.0) - before.get(name, 0.0)

        assert grew('mvs_sched_timeout_total{pool="runs"}') >= 1
        assert grew('mvs_sched_completed_total{pool="runs"}') >= 1
        assert grew('mvs_sched_submitted_total{pool="runs"}') >= 2
        assert grew('mvs_sched_skipped_total{reason="no_change"}') >= 1
        assert after['mvs_sched_max_concurrency{pool="runs"}'] == 1
        assert 0 <= after['mvs_mv_lag_seconds{task_id="mv:small_copy"}'] < 60
        assert 'mvs_task_next_run_seconds{task_id="mv:small_copy"}' not in after  # ON DEMAND: none
        # The timed-out task waits for its retry (5 s backoff, or already running it).
        assert (
            'mvs_task_next_run_seconds{task_id="mv:pairs"}' in after
            or after['mvs_sched_running{pool="runs"}'] == 1
        )
        for name in ("running", "waiting", "failed", "rejected"):
            assert any(key.startswith(f"mvs_sched_{name}") for key in after), name
    finally:
        server.shutdown()
        server.server_close()
        thread.join(10)

    # `mvs history pairs`, as an operator runs it (the CLI reads its settings from the environment).
    settings = cluster.settings
    monkeypatch.setenv("MVS_BOOTSTRAP_SERVERS", settings.bootstrap_servers)
    monkeypatch.setenv("MVS_NAMESPACE", settings.namespace)
    monkeypatch.setenv("MVS_WAREHOUSE", settings.warehouse)
    capsys.readouterr()
    assert main(["history", "pairs"]) == 0
    out = capsys.readouterr().out
    line = next(row for row in out.splitlines() if slow["run_id"] in row)
    timed_out = rf"\bmv:pairs\b.*\bERROR\b.*exceeded its timeout of {TIMEOUT_S:g}s and was cancelled"
    assert re.search(timed_out, line), line
    assert "CREATE_MV" in out and "small_copy" not in out
