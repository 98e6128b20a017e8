"""The fleet rides out an object-store outage — real processes, an S3 server of the test's own.

A coordinator and a worker (real ``mvs`` processes; the worker's Spark reads and writes through S3A,
its no-JVM checks through delta-rs) keep two MVs over ``sales`` in a bucket: one COMPLETE EVERY 3
SECONDS, one FAST ON CHANGE. The store is killed (kill -9) while the worker refreshes; the
refreshes fail meanwhile (a retryable "storage unavailable", the task WARNING, never FAILED). The
store comes back on the same port and data, rows are appended, and with no one's help every MV
catches up and equals its query, each refresh applied once, every started run ended, every role
process alive. The recovery time (store back → every MV current) is printed, not asserted.

The store is this test's own: the session's store other tests use is never stopped.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.cluster import wait_until
from tests.support.fleet import step
from tests.support.objectstore import object_store_settings
from tests.support.processes import Fleet
from tests.support.sales import SCHEMA, rows
from tests.support.state_watch import (
    assert_never_failed,
    assert_warning_while_failing,
    failures_seen,
    trace,
    watch,
)
from tests.support.two_mvs import assert_whole_after_outage, create_two_mvs, wait_until_current
from workers.client import MvsClient
from workers.demo_tables import append, create_table
from workers.embedded.broker import free_port, one_broker_settings
from workers.embedded.objectstore import EmbeddedObjectStore
from workers.worker.runner import SPARK_READY

pytestmark = pytest.mark.integration

# Not the session store's bucket: a process's S3A keeps one endpoint per bucket for its life, and
# the test's Spark may have opened that bucket on the session store already.
OUTAGE_BUCKET = "outage"
OUTAGE_S = 20.0  # several failed attempts (the refresh retry waits 5 s, then 10 s…)


@pytest.fixture
def store(tmp_path: Path) -> Iterator[EmbeddedObjectStore]:
    with EmbeddedObjectStore(tmp_path / "store", port=free_port()) as s3:
        s3.create_bucket(OUTAGE_BUCKET)
        yield s3


def test_the_fleet_rides_out_an_object_store_outage(
    kafka_bootstrap: str, store: EmbeddedObjectStore, spark: Any, tmp_path: Path
) -> None:
    from workers.jobs.spark.session import get_spark

    settings = object_store_settings(
        store, one_broker_settings(kafka_bootstrap, "s3out", tmp_path), OUTAGE_BUCKET
    )
    get_spark(settings)  # the test's own Spark session reads and writes this store
    fleet = Fleet(settings, tmp_path / "logs")
    client = MvsClient(settings, issued_by="test-store-outage")
    try:
        roles = [fleet.coordinator("c1"), fleet.worker("w1")]
        create_table(spark, settings, "sales", rows(0, 12), SCHEMA)
        wait_until(lambda: SPARK_READY in roles[1].log(), timeout_s=240, what="w1's Spark")
        create_two_mvs(client, spark, settings)
        step("store outage: fleet up on the object store, both MVs built")

        down_at = time.monotonic()
        down_ms = int(time.time() * 1000)
        store.kill()
        step("store outage: object store killed (kill -9)")
        # At least OUTAGE_S, and until each MV has failed a run (the first failure can take a
        # while on a busy machine: the storage client retries ~6 s before it gives up).
        failing = ["mv:by_region", "mv:big"]
        polls = watch(
            client,
            failing,
            since_ms=down_ms,
            until=lambda seen: time.monotonic() - down_at >= OUTAGE_S and failures_seen(seen, failing),
            timeout_s=120,
        )
        step(f"store outage: states at every poll:\n{trace(polls)}")
        # From the first failed attempt on, every poll reads WARNING (retrying), none FAILED.
        for task_id in failing:
            assert_warning_while_failing(polls, task_id)
        assert_never_failed(polls)
        failed = [
            r for r in client.history("mv:by_region") if r["state"] == "ERROR" and r["ended_at"] > down_ms
        ]
        assert failed[0]["error"]["retryable"], failed[0]
        step(f"store outage: a refresh failed as expected: {failed[0]['error']['message'][:160]}")
        store.start()
        back_at = time.monotonic()
        step(f"store outage: store back after {back_at - down_at:.1f}s")
        append(spark, settings, "sales", rows(100, 5))
        wait_until_current(client, spark, settings, "caught up after the store came back", timeout_s=180)
        step(f"store outage: RECOVERY: every MV current, {time.monotonic() - back_at:.1f}s after")
        assert {t["state"] for t in client.tasks().values()} <= {"NORMAL", "WARNING"}
        assert_whole_after_outage(spark, settings, fleet, roles)
    except BaseException:
        print(fleet.logs())
        raise
    finally:
        client.close()
        fleet.close()
