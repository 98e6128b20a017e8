"""Issue 8, class 4: the fleet rides out a broker outage — real processes, a broker of the test's own.

A coordinator and two workers (real ``mvs`` processes, each worker with its Spark JVM) keep two MVs
over ``sales``: one COMPLETE EVERY 3 SECONDS, one FAST ON CHANGE. The broker is killed (kill -9: no
controlled shutdown, its log not flushed; with one broker a SIGTERM adds nothing a client can tell)
for longer than the heartbeat timeout (and the group session), base rows are appended meanwhile, and
the broker comes back on the same ports and data. Then every role
process is still alive, each MV catches up to the new base version and equals its query, and every
run that started has an end record (nothing lost). The recovery time (broker back → every MV
current) is printed, not asserted.

The broker is this test's own (``EmbeddedKafka`` on free ports): the session broker other tests use
is never stopped.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.cluster import wait_until
from tests.support.fleet import step, unended_runs
from tests.support.processes import Fleet
from tests.support.sales import SCHEMA, rows
from tests.support.state_watch import assert_never_failed, trace, watch
from tests.support.two_mvs import MVS, create_two_mvs, mv_current
from workers.client import MvsClient
from workers.demo_tables import append, create_table
from workers.embedded.broker import EmbeddedKafka, free_port, one_broker_settings
from workers.worker.runner import SPARK_READY

pytestmark = pytest.mark.integration

HEARTBEAT_TIMEOUT_S = 8.0
OUTAGE_S = 12.0  # > the heartbeat timeout and the group session (3 s): both expire


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[EmbeddedKafka]:
    kafka = EmbeddedKafka(tmp_path / "kafka", port=free_port(), controller_port=free_port())
    kafka.start()
    yield kafka
    kafka.stop()


def test_the_fleet_rides_out_a_broker_outage(broker: EmbeddedKafka, spark: Any, tmp_path: Path) -> None:
    settings = one_broker_settings(
        broker.bootstrap_servers, "outage", tmp_path, heartbeat_timeout_s=HEARTBEAT_TIMEOUT_S
    )
    fleet = Fleet(settings, tmp_path / "logs")
    client = MvsClient(settings, issued_by="test-outage")
    try:
        roles = [fleet.coordinator("c1"), fleet.worker("w1"), fleet.worker("w2")]
        create_table(spark, settings, "sales", rows(0, 12), SCHEMA)
        for worker in roles[1:]:
            wait_until(lambda w=worker: SPARK_READY in w.log(), timeout_s=240, what=f"{worker.name}'s Spark")
        create_two_mvs(client, spark, settings)
        step("outage: fleet up, both MVs built")

        down_at = time.monotonic()
        broker.kill()
        step("outage: broker killed (kill -9)")
        append(spark, settings, "sales", rows(100, 5))  # the base moves on while the bus is away
        down_ms = int(time.time() * 1000)
        during = watch(client, [], since_ms=down_ms, until=lambda _: time.monotonic() - down_at >= OUTAGE_S)
        step(f"outage: status at every poll while the broker is away:\n{trace(during)}")
        # Nothing to read while the broker is away: every poll says so (the client's own error).
        assert all(p.unreadable is not None for p in during[1:]), trace(during)
        broker.start()
        back_at = time.monotonic()
        step(f"outage: broker back after {back_at - down_at:.1f}s")
        dead = [(r.name, r.process.returncode) for r in roles if not r.alive]
        assert not dead, f"role processes died during the outage: {dead}\n{fleet.logs()}"
        after = watch(
            client,
            [],
            since_ms=down_ms,
            until=lambda _: all(mv_current(client, spark, settings, name) for name in MVS),
            timeout_s=240,
        )
        step(f"outage: status at every poll until caught up:\n{trace(after)}")
        # No run failed for a broker outage; the silent workers' tasks may have been restarted (WARNING,
        # 4002), but no task is given up on at any poll.
        assert_never_failed(during + after)
        step(
            f"outage: RECOVERY: every MV current, equal to its query, {time.monotonic() - back_at:.1f}s after"
        )
        dead = [(r.name, r.process.returncode) for r in roles if not r.alive]
        assert not dead, f"role processes died after the outage: {dead}\n{fleet.logs()}"

        # No run record lost: every run that started has its end record (runs go on: a deadline).
        now_ms = int(time.time() * 1000)
        wait_until(lambda: not unended_runs(settings, now_ms), timeout_s=120, what="every started run ended")
        for role in roles:  # what the loops survived (figures for the report, not assertions)
            text = role.log()
            survived = text.count("bus unavailable") + text.count("loop error")
            step(f"outage: {role.name} survived {survived} failed loop turns; exit code so far: none (alive)")
    except BaseException:
        print(fleet.logs())
        raise
    finally:
        client.close()
        fleet.close()
