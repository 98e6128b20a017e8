"""docker-compose.yml run for real: images built here from Debian's packages (infra/setup_containers.sh,
started in the background when the session collects this test: tests/support/image_build.py),
the project's own Docker daemon without a bridge, every container on the host network
(infra/compose.host-network.yml). Kafka, the topics, the object store, a coordinator and a standby,
two workers and the API come up with ``docker compose up``; DDL goes through
``docker compose run --rm cli sql``; a worker is killed (SIGKILL), the other is stopped by compose
(SIGTERM, a handoff), the active coordinator is stopped, and after each the MVs are current again.
The base table ``sales`` is written from here, as any producer writes the warehouse. Each fault's
figure (seconds from the fault until both MVs hold their query over the newest ``sales``) is printed;
``docker compose down -v`` leaves nothing of the project behind."""

from __future__ import annotations

import json
import re
import time
import urllib.request
from collections.abc import Iterator
from functools import partial
from typing import Any

import pytest

from tests.support.cluster import wait_until
from tests.support.containers import ComposeFleet, Container, project_engine
from tests.support.fleet import assert_applied_once, refresh_commits, step, unended_runs
from tests.support.image_build import engine_unavailable
from tests.support.sales import SCHEMA, mv_rows, query_rows, rows
from tests.support.two_mvs import BIG, BY_REGION
from workers.client import MvsClient
from workers.config import Settings
from workers.kafka.admin import group_owners
from workers.kafka.messages import partition_for
from workers.topics import topic_spec
from workers.warehouse import latest_version

pytestmark = [pytest.mark.integration, pytest.mark.containers]

PARTITIONS = topic_spec("manager").partitions
SPARK_READY = "Spark session ready"  # a worker's log line once its Spark session is up (worker/runner.py)
# JVM starts in containers on a shared 2-core machine: the first build of both MVs includes them.
START_S = 420
CURRENT_S = 180
# Each poll reads the catalog topic from its start (and, once the checkpoint is there, both MVs with
# Spark): every half second leaves the CPU to the containers, at half a second of resolution.
POLL_S = 0.5
# The images (infra/setup_containers.sh, started with the session): from nothing 305 s at load 20, and
# 550 s when pip and Maven still fetched from the registries at load 30-40; twice the worst.
BUILD_S = 1200


@pytest.fixture(scope="module")
def engine() -> Iterator[str]:
    reason = engine_unavailable()
    if reason:
        pytest.skip(reason)
    yield from project_engine(BUILD_S)


class Scenario:
    """The fleet, a client on the host, and the two MVs (name → query) once created."""

    def __init__(self, fleet: ComposeFleet, spark: Any) -> None:
        self.fleet = fleet
        self.spark = spark
        self.settings: Settings = fleet.settings()
        self.client = MvsClient(self.settings, issued_by="test-containers")
        self.queries: dict[str, str] = {}
        self.next_row = 0
        self.figures: dict[str, float] = {}

    # the warehouse, from the host
    def append(self, count: int) -> None:
        from workers.demo_tables import append, create_table

        new = rows(self.next_row, count)
        if self.next_row == 0:
            create_table(self.spark, self.settings, "sales", new, SCHEMA)
        else:
            append(self.spark, self.settings, "sales", new)
        self.next_row += count

    def current(self, name: str) -> bool:
        task = self.client.tasks().get(f"mv:{name}")
        if not task or task["checkpoint"].get("sales") != latest_version(self.settings, "sales"):
            return False
        return mv_rows(self.spark, self.settings, name) == query_rows(
            self.spark, self.settings, self.queries[name]
        )

    def wait_current(self, what: str, since: float, timeout_s: float = CURRENT_S) -> float:
        for name in self.queries:
            wait_until(
                partial(self.current, name),
                timeout_s=timeout_s,
                what=f"{name} current {what}",
                every_s=POLL_S,
            )
        seconds = time.monotonic() - since
        self.figures[what] = round(seconds, 1)
        step(f"both MVs current {what}: {seconds:.1f} s")
        return seconds

    # roles
    def owners(self, role: str) -> dict[str, list[int]]:
        return group_owners(self.settings, self.settings.group(role))

    def workers_settled(self, count: int) -> dict[str, list[int]]:
        def settled() -> dict[str, list[int]] | None:
            owners = self.owners("workers")
            spread = len(owners) == count and all(owners.values())
            return owners if spread and sum(map(len, owners.values())) == PARTITIONS else None

        return wait_until(
            settled, timeout_s=START_S, what=f"{count} workers sharing every partition", every_s=POLL_S
        )

    def worker_ids(self, count: int) -> dict[str, str]:
        """Container id → worker id of the running workers, once each has logged its id with the
        partitions it was assigned (a moment after the group shows them)."""

        def found() -> dict[str, str] | None:
            members = self.workers_settled(count)
            running = [c for c in self.fleet.containers("worker") if c.running]
            assert len(running) == count, running
            ids = {}
            for container in running:
                logs = self.fleet.logs(container)
                named = [m for m in members if f"{m} assigned partitions" in logs]
                if len(named) != 1:
                    return None
                ids[container.id] = named[0]
            return ids

        return wait_until(
            found, timeout_s=START_S, what=f"{count} worker containers with their ids", every_s=POLL_S
        )

    def task_owner(self, name: str) -> str | None:
        task = self.client.tasks().get(f"mv:{name}")
        return task.get("owner") if task else None

    def active_coordinator(self) -> str:
        owners = self.owners("coordinator")
        return next(name for name, parts in owners.items() if 0 in parts)

    def close(self) -> None:
        self.client.close()


def name_on(prefix: str, partitions: list[int]) -> str:
    """An MV name whose task lands on one of ``partitions``."""
    return next(
        f"{prefix}{i}" for i in range(1000) if partition_for(f"mv:{prefix}{i}", PARTITIONS) in partitions
    )


def test_the_compose_fleet_keeps_mvs_current_through_a_kill_a_stop_and_a_coordinator_failover(
    engine: str, spark: Any
) -> None:
    fleet = ComposeFleet(engine)
    began = time.monotonic()
    try:
        run_scenario(fleet, spark)
    except BaseException:
        for container in fleet.containers():
            step(f"--- {container.name} (running: {container.running})\n{fleet.logs(container)[-4000:]}")
        raise
    finally:
        fleet.compose("down", "-v", "--timeout", "30")
        step(f"container test: {time.monotonic() - began:.0f} s in all")
    assert fleet.leftovers() == {"containers": [], "networks": [], "volumes": []}


def run_scenario(fleet: ComposeFleet, spark: Any) -> None:
    from workers.jobs.spark.session import get_spark

    started = time.monotonic()
    fleet.compose("up", "-d", "--no-build", "--scale", "worker=2")
    step(f"docker compose up: {time.monotonic() - started:.0f} s; {[c.name for c in fleet.containers()]}")
    s = Scenario(fleet, spark)
    try:
        get_spark(s.settings)  # the session's S3A options now point at the fleet's object store
        s.append(12)
        ids = s.worker_ids(2)
        first, second = sorted(fleet.containers("worker"), key=lambda c: c.number)
        owners = s.owners("workers")
        # One MV on each worker, so the kill below has tasks to move.
        by_region = name_on("by_region_", owners[ids[first.id]])
        big = name_on("big_", owners[ids[second.id]])
        s.queries = {by_region: BY_REGION, big: BIG}
        for statement in (
            "CREATE MATERIALIZED VIEW LOG ON sales",
            f"CREATE MATERIALIZED VIEW {by_region} REFRESH COMPLETE EVERY 3 SECONDS AS {BY_REGION}",
            f"CREATE MATERIALIZED VIEW {big} REFRESH FAST ON CHANGE AS {BIG}",
        ):
            out = fleet.sql(statement)
            assert re.search(r"^OK ", out, re.M), (statement, out)
        s.wait_current("built", started, timeout_s=START_S)
        mark = time.monotonic()
        s.append(6)
        s.wait_current("after an append", mark)

        kill_a_worker(s, first, second, ids, by_region)
        stop_a_worker(s, first, second, ids)
        stop_the_active_coordinator(s)
        read_the_status_page(s)
        for name in s.queries:
            assert_applied_once(refresh_commits(spark, s.settings, name))
        step(f"figures: {json.dumps(s.figures)}")
    finally:
        s.close()


def kill_a_worker(s: Scenario, victim: Container, survivor: Container, ids: dict[str, str], mv: str) -> None:
    """docker kill (SIGKILL): the victim's task moves to the survivor after the group session."""
    assert s.task_owner(mv) == ids[victim.id]
    mark = time.monotonic()
    s.fleet.docker("kill", victim.id)
    s.append(6)
    s.wait_current("after docker kill of a worker", mark)
    assert s.task_owner(mv) == ids[survivor.id], "the killed worker's task moved"
    assert set(s.owners("workers")) == {ids[survivor.id]}
    assert s.fleet.exit_code(victim) == 137


def stop_a_worker(s: Scenario, restarted: Container, leaving: Container, ids: dict[str, str]) -> None:
    """The killed worker starts again; then compose scales the fleet down to one worker, which stops the
    other (SIGTERM within its stop_grace_period): it hands its tasks over and exits 0."""
    starts = s.fleet.logs(restarted).count(SPARK_READY)
    s.fleet.docker("start", restarted.id)
    ids.update(s.worker_ids(2))
    # The handoff's figure, not a JVM start's: the restarted worker's Spark is up before the other stops.
    wait_until(
        lambda: s.fleet.logs(restarted).count(SPARK_READY) > starts,
        timeout_s=START_S,
        what="the restarted worker's Spark session",
        every_s=POLL_S,
    )
    logs = s.fleet.follow_logs(leaving)
    exit_watch = s.fleet.watch_exit(leaving)
    before_ms = int(time.time() * 1000)
    mark = time.monotonic()
    s.fleet.compose("up", "-d", "--no-build", "--scale", "worker=1")
    step(f"docker compose stopped a worker in {time.monotonic() - mark:.1f} s")
    s.append(6)
    s.wait_current("after docker compose stopped a worker", mark)
    remaining = [c.id for c in s.fleet.containers("worker")]
    assert remaining == [restarted.id], "compose stopped and removed the other worker"
    assert "revoked partitions" in logs.read(), "the stopped worker handed its partitions over"
    assert exit_watch.communicate(timeout=60)[0].strip() == "0", "a clean exit on SIGTERM"
    assert set(s.owners("workers")) == {ids[restarted.id]}
    assert all(s.task_owner(name) == ids[restarted.id] for name in s.queries)
    # The stopped worker's only: a run the killed worker had under way when it died stays RUNNING.
    assert unended_runs(s.settings, before_ms, ids[leaving.id]) == [], "every run of the stopped worker ended"


def stop_the_active_coordinator(s: Scenario) -> None:
    """docker compose stop of the active coordinator's service: the standby takes over."""
    active = s.active_coordinator()
    services = {c.service: c for c in s.fleet.containers() if c.service.startswith("coordinator")}
    (service,) = [name for name, c in services.items() if "coordinator active" in s.fleet.logs(c)]
    mark = time.monotonic()
    s.fleet.compose("stop", service)
    s.append(6)
    s.wait_current("after docker compose stopped the active coordinator", mark)
    taken_over = s.active_coordinator()
    assert taken_over != active
    (standby,) = [c for name, c in services.items() if name != service]
    assert "coordinator active" in s.fleet.logs(standby)


def read_the_status_page(s: Scenario) -> None:
    """The api container serves the status page and the tasks it shows."""
    base = f"http://127.0.0.1:{s.fleet.ports['API_PORT']}"
    with urllib.request.urlopen(f"{base}/", timeout=30) as page:
        assert page.status == 200 and "text/html" in page.headers["Content-Type"]
        assert "mvs" in page.read().decode()
    with urllib.request.urlopen(f"{base}/mvs", timeout=30) as answer:
        shown = json.loads(answer.read())
    text = json.dumps(shown)
    for name in s.queries:
        assert name in text, f"{name} not on the status API: {text[:500]}"
