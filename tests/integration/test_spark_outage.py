"""The worker rides out the loss of its Spark JVM — real processes, the worker's own JVM killed.

A coordinator and a worker (real ``mvs`` processes) keep two MVs over ``sales``: one COMPLETE EVERY 3
SECONDS, one FAST ON CHANGE. While a refresh runs, the worker's Spark JVM (the child process PySpark
launched) is killed with SIGKILL, as the kernel's out-of-memory killer would, and rows are appended.
The run in flight fails with a retryable "Spark lost"; the worker process stays up, starts a new
Spark session by itself (``workers.jobs.spark.session.get_spark``) and every MV catches up and equals
its query, each refresh applied once. At every poll meanwhile no task is FAILED, and a task whose run
failed reads WARNING until a run of it completes. The recovery time (JVM killed → every MV current) is
printed, not asserted.
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path
from typing import Any

import pytest

from tests.support.cluster import wait_until
from tests.support.fleet import step
from tests.support.processes import Fleet
from tests.support.sales import SCHEMA, rows
from tests.support.state_watch import (
    assert_never_failed,
    assert_warning_until_recovered,
    trace,
    watch,
)
from tests.support.two_mvs import MVS, assert_whole_after_outage, create_two_mvs, mv_current
from workers.client import MvsClient
from workers.demo_tables import append, create_table
from workers.embedded.broker import one_broker_settings
from workers.worker.runner import SPARK_READY

pytestmark = pytest.mark.integration

NEW_SESSION = "starting a new Spark session"  # the worker's log line (workers.jobs.spark.session)


def jvm_children(pid: int) -> list[int]:
    """The Java processes whose parent is ``pid`` (PySpark launches its JVM as a child)."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as stat:
                parent = int(stat.read().rsplit(")", 1)[1].split()[1])
            with open(f"/proc/{entry}/cmdline", "rb") as cmdline:
                command = cmdline.read().split(b"\0")[0]
        except (OSError, ValueError, IndexError):
            continue  # gone meanwhile
        if parent == pid and os.path.basename(command) == b"java":
            found.append(int(entry))
    return found


def running(client: MvsClient, task_id: str) -> bool:
    """A run of ``task_id`` has started and not ended."""
    return any(r["state"] == "RUNNING" for r in client.history(task_id, limit=5))


def test_the_worker_rides_out_the_loss_of_its_spark_jvm(
    kafka_bootstrap: str, spark: Any, tmp_path: Path
) -> None:
    settings = one_broker_settings(kafka_bootstrap, "sparkout", tmp_path)
    fleet = Fleet(settings, tmp_path / "logs")
    client = MvsClient(settings, issued_by="test-spark-outage")
    try:
        roles = [fleet.coordinator("c1"), fleet.worker("w1")]
        worker = roles[1]
        create_table(spark, settings, "sales", rows(0, 12), SCHEMA)
        wait_until(lambda: SPARK_READY in worker.log(), timeout_s=240, what="w1's Spark")
        create_two_mvs(client, spark, settings)
        (jvm,) = jvm_children(worker.pid)
        step(f"spark outage: fleet up, both MVs built; w1's JVM is pid {jvm}")

        append(spark, settings, "sales", rows(100, 5))  # work for both MVs (unchanged bases skip)
        wait_until(
            lambda: any(running(client, f"mv:{name}") for name in MVS), timeout_s=60, what="a run in flight"
        )
        killed_at = time.monotonic()
        killed_ms = int(time.time() * 1000)
        os.kill(jvm, signal.SIGKILL)
        append(spark, settings, "sales", rows(200, 5))
        step("spark outage: w1's JVM killed (SIGKILL) during a run; more rows appended")
        polls = watch(
            client,
            [f"mv:{name}" for name in MVS],
            since_ms=killed_ms,
            until=lambda _: (
                NEW_SESSION in worker.log() and all(mv_current(client, spark, settings, name) for name in MVS)
            ),
            timeout_s=180,
        )
        step(f"spark outage: states at every poll:\n{trace(polls)}")
        step(f"spark outage: RECOVERY: every MV current, {time.monotonic() - killed_at:.1f}s after the kill")
        assert_never_failed(polls)
        for name in MVS:
            assert_warning_until_recovered(polls, f"mv:{name}")
        runs = client.history(None, limit=10_000)
        failed = [r for r in runs if r["state"] == "ERROR" and r["ended_at"] > killed_ms]
        for run in failed:  # whatever failed said why, and was retried
            assert run["error"]["retryable"], run
        messages = [r["error"]["message"][:120] for r in failed]
        step(f"spark outage: {len(failed)} runs failed meanwhile: {messages}")

        assert worker.alive, f"w1 died:\n{fleet.logs()}"
        (new_jvm,) = jvm_children(worker.pid)
        assert new_jvm != jvm
        assert_whole_after_outage(spark, settings, fleet, roles)
    except BaseException:
        print(fleet.logs())
        raise
    finally:
        client.close()
        fleet.close()
