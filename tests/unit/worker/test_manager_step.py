"""``Manager.step()`` over the in-memory bus, driven by ManualClock: what goes in and out of the bus.
The same flows run on a real broker in tests/integration/test_ownership.py and test_fleet.py."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from prometheus_client import CollectorRegistry

from tests.support.maintainer_harness import CTX, WAIT, FakeRunner, mv
from tests.support.memory_bus import MemoryBus
from workers.config import Settings
from workers.coordinator.effects import bootstrap_commands, maintainer_command, manager_command
from workers.records import Record
from workers.sched.clock import ManualClock
from workers.sched.metrics import SchedMetrics
from workers.worker.host import MAX_CLOCK_SKEW_MS
from workers.worker.manager import Manager

SETTINGS = Settings(bootstrap_servers="127.0.0.1:1", worker_id="w1", namespace="unit")
GROUP = SETTINGS.group("workers")
COORDINATOR_EPOCH = 1_700_000_000_000  # a coordinator active since the clock's start


class World:
    def __init__(self) -> None:
        self.bus = MemoryBus()
        self.clock = ManualClock(start=1000.0, wall_start_ms=1_700_000_000_000)
        self.runner = FakeRunner(self.clock)
        self.manager = Manager(
            SETTINGS,
            bus=self.bus,
            runner=self.runner,
            clock=self.clock,
            metrics=SchedMetrics(CollectorRegistry()),
        )

    def step(self) -> None:
        self.manager.step(0)

    def settle(self) -> None:
        """Steps until every run ended and its records went out."""
        assert self.manager.host.executor.wait_idle(timeout_s=WAIT)
        self.step()

    def heartbeats(self) -> list[Record]:
        return self.bus.records("coordinator")

    def removed(self) -> list[str]:
        """Tasks the heartbeats sent so far said this worker let go of."""
        self.clock.advance(SETTINGS.heartbeat_interval_s)
        self.step()  # the previous heartbeat delivered, the next one sent
        return [task_id for heartbeat in self.heartbeats() for task_id in heartbeat["removed"]]

    def command(self, kind: str, task: Record, *, coordinator_epoch: int = COORDINATOR_EPOCH) -> int:
        """A coordinator's command on the manager topic; returns its partition."""
        value = {**manager_command(kind, task, CTX), "coordinator_epoch": coordinator_epoch}
        return self.bus.publish("manager", task["task_id"], value)


@pytest.fixture
def world() -> Iterator[World]:
    w = World()
    w.manager.start()
    yield w
    w.manager.close()


def restored(w: World, name: str) -> tuple[Record, int]:
    """A task the catalog names another owner of, in a partition the group then gives this worker."""
    task = {**mv(name, "ON_DEMAND", None), "owner": "w0"}
    partition = w.bus.publish("catalog", task["task_id"], task)
    w.bus.assign(GROUP, "manager", [partition])
    w.step()
    return task, partition


def issued(w: World, name: str) -> tuple[Record, int]:
    """``restored``, then issued to this worker under a new epoch; its first run done."""
    task, partition = restored(w, name)
    owned = {**task, "epoch": 2, "owner": "w1"}
    w.command("ADD_MAINTAINER", owned)
    w.step()
    w.settle()
    return owned, partition


def test_assignment_restores_claims_and_runs_only_under_the_new_epoch(world: World) -> None:
    w = world
    assert w.bus.configured_groups == [GROUP]
    task, partition = restored(w, "a")
    assert w.bus.catalog_reads == [[partition]], "the new partition's catalog was read"
    claim = w.heartbeats()[-1]
    assert claim["full"] and [(s["task_id"], s["epoch"]) for s in claim["statuses"]] == [("mv:a", 1)]
    assert w.runner.calls == [], "no run under the old owner's epoch"
    w.command("ADD_MAINTAINER", {**task, "epoch": 2, "owner": "w1"})
    w.step()
    w.settle()
    assert [(c.task_id, c.epoch) for c in w.runner.calls] == [("mv:a", 2)]
    runs = w.bus.records("runs")
    assert [r["state"] for r in runs] == ["PENDING", "RUNNING", "COMPLETED"]
    assert {r["epoch"] for r in runs} == {2}
    w.clock.advance(SETTINGS.heartbeat_interval_s)
    w.step()
    latest = {s["task_id"]: s for h in w.heartbeats() for s in h["statuses"]}
    assert latest["mv:a"]["epoch"] == 2 and latest["mv:a"]["last_run"]["state"] == "COMPLETED"
    assert w.bus.committed[(GROUP, "manager", partition)] == w.bus.end("manager", partition)


def test_a_per_task_command_reaches_the_maintainer_through_its_partition(world: World) -> None:
    w = world
    owned, partition = issued(w, "a")
    w.runner.versions["t"] = 2
    refresh = {**maintainer_command("REFRESH_NOW", owned, CTX), "coordinator_epoch": COORDINATOR_EPOCH}
    assert w.bus.publish("maintainer", "mv:a", refresh) == partition
    w.step()
    w.settle()
    assert len(w.runner.calls) == 2 and w.bus.records("runs")[-1]["trigger"] == "MANUAL"


def test_commands_of_an_older_coordinator_or_from_the_future_are_ignored(world: World) -> None:
    w = world
    task, partition = restored(w, "a")
    bootstrap = {**bootstrap_commands(partition + 1, CTX)[partition], "coordinator_epoch": COORDINATOR_EPOCH}
    w.bus.publish("manager", bootstrap["task_id"], bootstrap, partition=partition)
    w.command("ADD_MAINTAINER", {**task, "epoch": 2, "owner": "w1"}, coordinator_epoch=COORDINATOR_EPOCH - 1)
    future = w.clock.wall_ms() + MAX_CLOCK_SKEW_MS + 1
    w.command("ADD_MAINTAINER", {**task, "epoch": 3, "owner": "w1"}, coordinator_epoch=future)
    for _ in range(3):
        w.step()
    assert not w.manager.host.owned and "mv:a" in w.manager.host.waiting
    assert w.manager.host.coordinator_epoch == COORDINATOR_EPOCH, "the forged epoch was not taken"


def test_remove_maintainer_drops_the_task_and_says_so(world: World) -> None:
    w = world
    owned, _ = issued(w, "a")
    w.command("REMOVE_MAINTAINER", {**owned, "epoch": 3, "state": "DROPPING"})
    w.step()
    assert "mv:a" not in w.manager.host.owned and w.runner.dropped == ["mv:a"]
    assert w.removed() == ["mv:a"]


def test_a_revoked_partition_stops_its_tasks_and_its_per_task_commands(world: World) -> None:
    w = world
    _, partition = issued(w, "a")
    w.bus.revoke(GROUP, "manager", [partition])
    w.step()
    assert not w.manager.host.owned and not w.manager.partitions
    assert w.removed() == ["mv:a"] and w.runner.dropped == []
    assert not w.manager._task_commands.positions, "the maintainer partition is let go"  # type: ignore[attr-defined]


def test_heartbeats_wait_for_an_undelivered_one_and_a_full_one_follows_an_outage(world: World) -> None:
    w = world
    restored(w, "a")
    w.bus.hold = True  # the broker stops acknowledging
    sent = len(w.heartbeats())
    for _ in range(5):
        w.clock.advance(1.0)
        w.step()
    assert len(w.heartbeats()) == sent, "no heartbeat piles up behind an undelivered one"
    reads = len(w.bus.catalog_reads)
    w.clock.advance(30.0)
    w.step()
    assert len(w.bus.catalog_reads) == reads, "no catalog read (reconcile) while the bus looks away"
    w.bus.hold = False
    w.step()  # the delivery is served: an outage was seen
    w.step()
    assert w.heartbeats()[-1]["full"], "after an outage the coordinator gets the whole truth"
