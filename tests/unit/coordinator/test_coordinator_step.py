"""``Coordinator.step()`` over the in-memory bus, driven by ManualClock: election, DDL in one
transaction, heartbeat claims, poison DDL. The same flows run on a real broker in
tests/integration/test_walking_skeleton.py, test_poison_ddl.py and test_coordinator_hardening.py."""

from __future__ import annotations

from collections.abc import Iterator, Mapping

import pytest

from tests.support.memory_bus import MemoryBus, MemoryProducer
from workers.config import Settings
from workers.coordinator.handlers import Context, Effects, handle_ddl
from workers.coordinator.health import HEALTH_EVERY_S
from workers.coordinator.service import Coordinator, DdlHandler
from workers.ddl.parser import parse_statement
from workers.kafka.deadletter import H_ERROR
from workers.records import Record
from workers.role import LoopError
from workers.sched.clock import ManualClock
from workers.topics import topic_spec
from workers.worker.host import claim

SETTINGS = Settings(bootstrap_servers="127.0.0.1:1", namespace="unit")
GROUP = SETTINGS.group("coordinator")
WALL_START_MS = 1_700_000_000_000


class World:
    def __init__(self, handler: DdlHandler = handle_ddl) -> None:
        self.bus = MemoryBus()
        self.clock = ManualClock(start=0.0, wall_start_ms=WALL_START_MS)
        self.coordinator = Coordinator(
            SETTINGS,
            bus=self.bus,
            clock=self.clock,
            table_exists_fn=lambda name: name == "sales",
            ddl_handler=handler,
        )
        self.coordinator.start()

    def activate(self) -> None:
        self.bus.assign(GROUP, "ddl", [0])
        self.coordinator.step(0)

    def ddl(self, sql: str) -> Record:
        event = parse_statement(sql, issued_by="User:alice")
        self.bus.publish("ddl", event["event_id"], event)
        return event

    @property
    def producer(self) -> MemoryProducer:
        producer = self.coordinator._producer
        assert isinstance(producer, MemoryProducer)
        return producer

    def results(self) -> dict[str, Record]:
        return {r["event_id"]: r for r in self.bus.records("ddl.results")}


@pytest.fixture
def w() -> Iterator[World]:
    world = World()
    yield world
    world.coordinator.close()


CREATE = "CREATE MATERIALIZED VIEW by_region REFRESH COMPLETE ON DEMAND AS SELECT region FROM sales"


def test_activation_publishes_bootstrap_to_every_manager_partition(w: World) -> None:
    assert not w.coordinator.active
    w.activate()
    assert w.coordinator.active and w.bus.configured_groups == [GROUP]
    commands = w.bus.messages("manager")
    partitions = topic_spec("manager").partitions
    assert sorted(m.partition for m in commands) == list(range(partitions)), "one per partition"
    assert {m.value["kind"] for m in commands if m.value} == {"BOOTSTRAP"}
    assert {m.value["coordinator_epoch"] for m in commands if m.value} == {WALL_START_MS}
    assert len(w.producer.transactions) == 1


def test_a_create_is_applied_in_one_transaction_with_its_offset(w: World) -> None:
    w.activate()
    event = w.ddl(CREATE)
    w.coordinator.step(0)
    applied = w.producer.transactions[-1]
    assert [topic for topic, _ in applied] == ["catalog", "manager", "ddl.results"]
    task = applied[0][1]
    assert task is not None and task["task_id"] == "mv:by_region" and task["owner"] is None
    command = applied[1][1]
    assert command is not None and command["kind"] == "ADD_MAINTAINER" and command["task"] == task
    assert w.results()[event["event_id"]]["accepted"]
    assert w.bus.committed[(GROUP, "ddl", 0)] == 1, "the DDL offset committed with its effects"
    assert w.bus.read_catalog() == {"mv:by_region": task} == w.coordinator.tasks


def test_a_claim_in_a_heartbeat_raises_the_epoch_for_the_claiming_worker(w: World) -> None:
    w.activate()
    w.ddl(CREATE)
    w.coordinator.step(0)
    task = w.coordinator.tasks["mv:by_region"]
    heartbeat = {
        "worker_id": "w2",
        "sent_at": w.clock.wall_ms(),
        "coordinator_epoch": w.coordinator.coordinator_epoch,
        "full": False,
        "statuses": [claim(task)],
        "removed": [],
        "loop_error": None,
    }
    w.bus.publish("coordinator", "w2", heartbeat)
    w.coordinator.step(0)
    raised = w.coordinator.tasks["mv:by_region"]
    assert (raised["owner"], raised["epoch"]) == ("w2", task["epoch"] + 1)
    sent = dict(w.producer.transactions[-1])  # sent at once: a claim waits for it (failover latency)
    assert sent["manager"] is not None and sent["manager"]["kind"] == "ADD_MAINTAINER"
    assert sent["manager"]["task"] == raised and sent["catalog"] == raised
    assert w.bus.read_catalog()["mv:by_region"] == raised


def test_a_silent_owner_s_task_is_restarted_after_the_heartbeat_timeout(w: World) -> None:
    w.activate()
    w.ddl(CREATE)
    w.coordinator.step(0)
    task = w.coordinator.tasks["mv:by_region"]
    w.bus.publish(
        "coordinator",
        "w2",
        {
            "worker_id": "w2",
            "sent_at": w.clock.wall_ms(),
            "coordinator_epoch": w.coordinator.coordinator_epoch,
            "full": True,
            "statuses": [claim(task)],
            "removed": [],
            "loop_error": None,
        },
    )
    w.coordinator.step(0)
    epoch = w.coordinator.tasks["mv:by_region"]["epoch"]
    w.clock.advance(SETTINGS.heartbeat_timeout_s + 1)
    w.coordinator.step(0)
    restarted = w.coordinator.tasks["mv:by_region"]
    assert restarted["epoch"] > epoch and restarted["owner"] is None
    assert w.bus.read_catalog()["mv:by_region"] == restarted


def test_a_handler_that_raises_is_dead_lettered_answered_and_committed_past() -> None:
    def poisoned(event: Record, tasks: Mapping[str, Record], ctx: Context) -> Effects:
        if "poison" in event["name"]:
            raise RuntimeError("a bug in the handler")
        return handle_ddl(event, tasks, ctx)

    w = World(poisoned)
    try:
        w.activate()
        poison = w.ddl(CREATE.replace("by_region", "poison"))
        fine = w.ddl(CREATE)
        w.coordinator.step(0)
        w.coordinator.step(0)
        (dead,) = w.bus.messages("dlq")
        assert dead.header(H_ERROR) == "RuntimeError: a bug in the handler" and dead.raw is not None
        answers = w.results()
        assert not answers[poison["event_id"]]["accepted"]
        assert "a bug in the handler" in answers[poison["event_id"]]["error"]["message"]
        assert answers[fine["event_id"]]["accepted"] and "mv:by_region" in w.coordinator.tasks
        assert w.bus.committed[(GROUP, "ddl", 0)] == 2, "committed past the poison record"
    finally:
        w.coordinator.close()


def test_a_newer_coordinator_fences_the_old_one_which_stands_by(w: World) -> None:
    w.activate()
    newer = w.bus.producer(transactional_id=GROUP)
    newer.init_transactions()  # another coordinator activated with the same transactional id
    w.ddl(CREATE)
    w.coordinator.step(0)
    assert not w.coordinator.active and w.coordinator._producer is None
    assert w.bus.records("catalog") == [], "nothing of the fenced transaction was applied"
    assert w.bus.committed.get((GROUP, "ddl", 0), 0) == 0


def _own_heartbeats(w: World) -> list[Record]:
    return [h for h in w.bus.records("coordinator") if h.get("coordinator_active") is not None]


def test_a_coordinator_heartbeats_its_health_standing_by_or_active_and_skips_its_own(w: World) -> None:
    w.coordinator.step(0)
    (standby,) = _own_heartbeats(w)
    assert (standby["worker_id"], standby["coordinator_active"], standby["statuses"]) == (
        SETTINGS.worker_id,
        False,
        [],
    )
    w.activate()
    w.coordinator.step(0)
    active = _own_heartbeats(w)[-1]
    assert active["coordinator_active"] is True and active["coordinator_epoch"] == WALL_START_MS
    count = len(_own_heartbeats(w))
    w.coordinator.step(0)
    assert len(_own_heartbeats(w)) == count, "nothing changed: not before HEALTH_EVERY_S"
    w.clock.advance(HEALTH_EVERY_S)
    w.coordinator.step(0)
    assert len(_own_heartbeats(w)) == count + 1
    assert w.coordinator._last_seen == {}, "its own heartbeat is no worker's"
    w.coordinator.last_error = LoopError(
        at_ms=WALL_START_MS, message="BusError: away", traceback="", consecutive=2
    )
    w.coordinator.step(0)
    assert "BusError: away (2 in a row)" in _own_heartbeats(w)[-1]["loop_error"], "a new error: at once"


def test_a_task_state_change_in_a_heartbeat_is_published_at_once(w: World) -> None:
    w.activate()
    w.ddl(CREATE)
    w.coordinator.step(0)
    task = w.coordinator.tasks["mv:by_region"]
    owned = {**task, "owner": "w1"}
    w.coordinator.tasks["mv:by_region"] = owned
    error = {"code": 2001, "message": "storage unavailable", "severity": "WARN", "retryable": True, "at": 1}
    status = {**claim(owned), "state": "WARNING", "error": error}
    heartbeat = {"worker_id": "w1", "sent_at": 1, "coordinator_epoch": 0, "full": False}
    w.bus.publish("coordinator", "w1", {**heartbeat, "statuses": [status], "removed": [], "loop_error": None})
    w.coordinator.step(0)  # well within the heartbeat interval of the last flush
    assert w.bus.read_catalog()["mv:by_region"]["state"] == "WARNING"
