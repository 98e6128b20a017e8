"""Complete refresh on real Spark + Delta: content and watermark in one commit, Delta's idempotent
writes (replays and stale epochs are skipped), concurrent runs, and cancelling a run."""

from __future__ import annotations

import json
import threading
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from tests.support.cluster import wait_until
from tests.support.run_requests import run_request
from workers import demo_tables as tables
from workers import warehouse
from workers.catalog.errors import ErrorCode, MvsError
from workers.config import Settings
from workers.ddl import QueryPlan, plan_record
from workers.jobs import complete as refresh
from workers.jobs.delta.metadata import decode_user_metadata, txn_version
from workers.jobs.errors import RunCancelled
from workers.worker.runner import SparkRunner

pytestmark = pytest.mark.integration

SCHEMA = "id long, amount long"
QUERY = "SELECT id, amount * 10 AS amount10 FROM sales WHERE amount > 1"


def _refresh(
    spark: Any,
    settings: Settings,
    mv: str,
    *,
    epoch: int = 1,
    run: str,
    query: str = QUERY,
) -> refresh.RefreshResult:
    request = run_request(settings, mv, query, epoch=epoch, run=run, job_group=f"{mv}-{run}", bases=["sales"])
    return refresh.refresh_complete(spark, settings, request)


def _rows(spark: Any, settings: Settings, name: str) -> list[tuple[Any, ...]]:
    return sorted(tuple(r.values()) for r in tables.read_table(spark, settings, name))


def test_warehouse_reads_the_log_without_spark(spark: Any, local_settings: Settings) -> None:
    assert warehouse.latest_version(local_settings, "sales") is None
    assert not warehouse.table_exists(local_settings, "sales")
    tables.create_table(spark, local_settings, "sales", [{"id": 1, "amount": 1}], SCHEMA)
    tables.append(spark, local_settings, "sales", [{"id": 2, "amount": 2}])
    assert warehouse.latest_version(local_settings, "sales") == 1  # no SparkSession argument at all
    assert warehouse.table_exists(local_settings, "sales")
    assert warehouse.table_path(local_settings, "sales") == f"{local_settings.warehouse}/sales"
    assert warehouse.mlog_table_name("sales") == "sales__mlog"
    with pytest.raises(ValueError):
        warehouse.table_path(local_settings, "../etc")


def test_refresh_writes_query_rows_and_watermark_in_one_commit(spark: Any, local_settings: Settings) -> None:
    s = local_settings
    tables.create_table(spark, s, "sales", [{"id": 1, "amount": 5}, {"id": 2, "amount": 1}], SCHEMA)

    first = _refresh(spark, s, "mv_a", run="r1")
    assert first.applied and first.rows_written == 1 and first.delta_version == 0
    assert first.watermark_before == {} and first.watermark_after == {"sales": 0}
    assert _rows(spark, s, "mv_a") == [(1, 50)]
    commit = tables.delta_history(spark, s, "mv_a")[0]
    assert commit["version"] == 0
    assert json.loads(commit["userMetadata"]) == {
        "mvs": {
            "task_id": "mv:mv_a",
            "epoch": 1,
            "run_id": "r1",
            "watermark": {"sales": 0},
            "technique": "COMPLETE",
        }
    }
    assert commit["txn"] == [{"appId": "mv:mv_a", "version": 2**32 + 0}]

    # The base moves on: the next refresh sees the new rows and advances the watermark.
    tables.append(spark, s, "sales", [{"id": 3, "amount": 7}])
    second = _refresh(spark, s, "mv_a", run="r2")
    assert second.applied and second.rows_written == 2 and second.delta_version == 1
    assert (second.watermark_before, second.watermark_after) == ({"sales": 0}, {"sales": 1})
    assert _rows(spark, s, "mv_a") == [(1, 50), (3, 70)]
    watermark = refresh.read_watermark(spark, s, "mv_a")
    assert watermark is not None and watermark.watermark == {"sales": 1} and watermark.delta_version == 1

    # Same epoch, same watermark: Delta skips the write, no new version.
    replay = _refresh(spark, s, "mv_a", run="r3")
    assert not replay.applied and replay.rows_written == 0
    assert replay.delta_version == 1 and warehouse.latest_version(s, "mv_a") == 1
    assert replay.watermark_after == {"sales": 1} and "already applied" in replay.message


def test_a_refresh_counts_its_spark_jobs_and_runs_few(spark: Any, local_settings: Settings) -> None:
    """Every job of a run is in its job group, and a one-base refresh over an existing MV is at most 3
    (without adaptive execution Delta's snapshot loads are one job each, not one per stage: 10 before)."""
    s = local_settings
    tables.create_table(spark, s, "sales", [{"id": 1, "amount": 5}, {"id": 2, "amount": 7}], SCHEMA)
    query = "SELECT amount > 5 AS big, count(*) AS n FROM sales GROUP BY amount > 5"
    first = _refresh(spark, s, "mv_jobs", run="r1", query=query)
    tables.append(spark, s, "sales", [{"id": 3, "amount": 9}])
    second = _refresh(spark, s, "mv_jobs", run="r2", query=query)
    assert first.applied and second.applied and _rows(spark, s, "mv_jobs") == [(False, 1), (True, 2)]
    assert first.spark_jobs is not None and second.spark_jobs is not None
    tracker = spark.sparkContext.statusTracker()
    # Over an existing small MV the result is collected and written by delta-rs (``rs_commit``): the
    # base's snapshot, its file skipping and the query; the first build is Spark's write (5 jobs).
    assert 1 <= second.spark_jobs <= len(tracker.getJobIdsForGroup("mv_jobs-r2")) <= 3
    assert second.spark_jobs <= first.spark_jobs <= 5


def test_stale_epoch_commit_is_skipped(spark: Any, local_settings: Settings) -> None:
    s = local_settings
    tables.create_table(spark, s, "sales", [{"id": 1, "amount": 5}], SCHEMA)
    newer = _refresh(spark, s, "mv_b", epoch=3, run="new-owner")
    # The old owner (epoch 2) even saw a more advanced base: its commit must still be skipped.
    tables.append(spark, s, "sales", [{"id": 2, "amount": 6}])
    stale = _refresh(spark, s, "mv_b", epoch=2, run="old-owner")
    assert newer.applied and not stale.applied
    assert "stale epoch 2" in stale.message
    history = tables.delta_history(spark, s, "mv_b")
    assert [h["version"] for h in history] == [0]
    assert history[0]["txn"] == [{"appId": "mv:mv_b", "version": txn_version(3, {"sales": 0})}]
    metas = [decode_user_metadata(h["userMetadata"]) for h in history]
    assert [(m.epoch, m.run_id) for m in metas if m] == [(3, "new-owner")]
    assert _rows(spark, s, "mv_b") == [(1, 50)]


def test_missing_base_table_is_reported(spark: Any, local_settings: Settings) -> None:
    """The runner pins the bases before any job: a missing one is a coded error naming it."""
    runner = SparkRunner(local_settings, lambda _: spark)  # the session the tests share
    plan = plan_record(QueryPlan(None, "not analysed"))
    spec = {"query": "SELECT * FROM nope", "refresh_mode": "COMPLETE", "base_tables": ["nope"], "plan": plan}
    task = {"task_id": "mv:mv_c", "name": "mv_c", "kind": "MV", "epoch": 1, "mv": spec}
    with pytest.raises(MvsError, match="base table nope does not exist") as raised:
        runner.refresh(task, run_id="r1", job_group="mv_c-r1")
    assert raised.value.code is ErrorCode.NOT_FOUND
    assert not warehouse.table_exists(local_settings, "mv_c")


def test_concurrent_refreshes_of_two_mvs_do_not_clash(spark: Any, local_settings: Settings) -> None:
    s = local_settings
    tables.create_table(spark, s, "sales", [{"id": i, "amount": i} for i in range(10)], SCHEMA)
    queries = {
        "mv_even": "SELECT id FROM sales WHERE id % 2 = 0",
        "mv_sum": "SELECT sum(amount) AS total FROM sales",
    }
    barrier = threading.Barrier(len(queries))
    results: dict[str, refresh.RefreshResult | BaseException] = {}

    def run(mv: str) -> None:
        barrier.wait(timeout=10)
        try:
            # Same run id on purpose: temp view names must still be unique per run.
            results[mv] = _refresh(spark, s, mv, run="same-run", query=queries[mv])
        except BaseException as exc:  # reported by the assertions below
            results[mv] = exc

    threads = [threading.Thread(target=run, args=(mv,)) for mv in queries]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert all(isinstance(r, refresh.RefreshResult) and r.applied for r in results.values()), results
    assert _rows(spark, s, "mv_even") == [(0,), (2,), (4,), (6,), (8,)]
    assert _rows(spark, s, "mv_sum") == [(45,)]
    assert not [t.name for t in spark.catalog.listTables() if t.name.startswith("__mvs_")]


def _blocking_udf(started: Path) -> Any:
    """A UDF that signals it runs (a file; it runs in a Python worker process) and then blocks for
    up to 120 s, so only a cancel (which kills the Python worker) can stop it in time."""

    def block(value: int) -> int:
        started.touch()
        threading.Event().wait(120)
        return value

    return block


def test_cancel_run_stops_the_running_job(spark: Any, local_settings: Settings, tmp_path: Path) -> None:
    s = replace(local_settings, allowed_functions=("mvs_test_block",))  # the operator allows the UDF
    tables.create_table(spark, s, "sales", [{"id": 1, "amount": 1}], SCHEMA)
    started = tmp_path / "started"
    spark.udf.register("mvs_test_block", _blocking_udf(started), "long")
    outcome: list[BaseException | refresh.RefreshResult] = []

    def run() -> None:
        try:
            outcome.append(
                _refresh(spark, s, "mv_slow", run="slow", query="SELECT mvs_test_block(id) AS id FROM sales")
            )
        except BaseException as exc:
            outcome.append(exc)

    worker = threading.Thread(target=run)
    worker.start()
    wait_until(started.exists, timeout_s=30, what="the blocking UDF to start")  # its own signal

    assert refresh.cancel_run(spark, "mv_slow-slow")
    worker.join(timeout=20)
    assert not worker.is_alive(), "refresh did not return after cancel_run"
    assert len(outcome) == 1 and isinstance(outcome[0], RunCancelled), outcome

    tracker = spark.sparkContext.statusTracker()
    jobs = [tracker.getJobInfo(j) for j in tracker.getJobIdsForGroup("mv_slow-slow")]
    assert jobs and all(j is not None and j.status != "RUNNING" for j in jobs)
    assert any(j is not None and j.status == "FAILED" for j in jobs)
    stages = {stage for j in jobs if j is not None for stage in j.stageIds}
    wait_until(
        lambda: not stages & set(tracker.getActiveStageIds()), timeout_s=20, what="the cancelled stage to end"
    )
    assert not warehouse.table_exists(s, "mv_slow")


def test_drop_mv_table_then_recreate(spark: Any, local_settings: Settings) -> None:
    s = local_settings
    tables.create_table(spark, s, "sales", [{"id": 1, "amount": 5}], SCHEMA)
    assert _refresh(spark, s, "mv_d", run="r1").applied
    refresh.drop_mv_table(s, "mv_d")
    assert not warehouse.table_exists(s, "mv_d")
    assert refresh.read_watermark(spark, s, "mv_d") is None
    # A fresh table: the old txn record went with it, so the same watermark applies again.
    again = _refresh(spark, s, "mv_d", run="r2")
    assert again.applied and again.delta_version == 0 and _rows(spark, s, "mv_d") == [(1, 50)]
