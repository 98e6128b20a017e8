"""The manager rides out the broker and bad commands, and a DROP never holds its loop (no broker:
the manager's bus hands out fakes that record what it sends and deliver on demand, or refuse; runs
go through the real executor with the fake runner of the maintainer tests)."""

from __future__ import annotations

from typing import Any

from prometheus_client import CollectorRegistry

from tests.support.maintainer_harness import WAIT, FakeRunner, mv
from workers.config import Settings
from workers.kafka.errors import BusError
from workers.kafka.messages import Message
from workers.records import Record
from workers.role import LoopError
from workers.sched.clock import ManualClock
from workers.sched.metrics import SchedMetrics
from workers.worker.manager import BUS_SUSPECT_S, Manager


class FakeProducer:
    """Records sends; deliveries happen when the test says (``deliver``); ``refuse`` makes sends raise."""

    def __init__(self) -> None:
        self.sent: list[tuple[str, Record]] = []
        self.undelivered: list[Any] = []
        self.refuse: BusError | None = None
        self.instant = False  # deliver inside send (a delivery report served before send returns)

    def send(self, topic: str, key: str | None, record: Record, **kwargs: Any) -> None:
        if self.refuse is not None:
            raise self.refuse
        self.sent.append((topic, record))
        if kwargs.get("on_delivery") is not None:
            self.undelivered.append(kwargs["on_delivery"])
        if self.instant:
            self.deliver()

    def deliver(self, error: BusError | None = None) -> None:
        callbacks, self.undelivered = self.undelivered, []
        for callback in callbacks:
            callback(error)

    def poll(self, timeout_s: float = 0.0) -> None:
        pass

    def close(self, timeout_s: float = 30.0) -> None:
        pass

    def of(self, topic: str) -> list[Record]:
        return [record for t, record in self.sent if t == topic]


class FakeConsumer:
    def __init__(self) -> None:
        self.messages: list[Message] = []

    def poll(self, timeout_s: float = 0.0) -> Message | None:
        return self.messages.pop(0) if self.messages else None

    def commit(self, message: Message | None = None) -> None:
        pass

    def unassign(self, topic: str, partitions: list[int] | None = None) -> None:
        pass

    def subscribe(self, topics: list[str], **callbacks: Any) -> None:
        pass

    def close(self) -> None:
        pass


class FakeBus:
    """Hands out the fakes above: the producer, then a new consumer for each one asked for."""

    def __init__(self, producer: FakeProducer) -> None:
        self._producer = producer
        self.consumers: list[FakeConsumer] = []

    def consumer(self, group_id: str | None) -> FakeConsumer:
        self.consumers.append(FakeConsumer())
        return self.consumers[-1]

    def producer(self, **options: Any) -> FakeProducer:
        return self._producer


def manager() -> tuple[Manager, FakeProducer, FakeConsumer, FakeRunner]:
    clock = ManualClock(start=1000.0, wall_start_ms=1_700_000_000_000)
    runner = FakeRunner(clock)
    settings = Settings(bootstrap_servers="127.0.0.1:1", worker_id="w1", namespace="unit")
    producer = FakeProducer()
    bus = FakeBus(producer)
    metrics = SchedMetrics(CollectorRegistry())
    m = Manager(settings, bus=bus, runner=runner, clock=clock, metrics=metrics)  # type: ignore[arg-type]
    return m, producer, bus.consumers[0], runner


def own(m: Manager, name: str) -> Record:
    task = {**mv(name, "ON_DEMAND", None), "owner": m.worker_id}
    m.host.add_task(task, 0)
    return task


def test_heartbeats_are_skipped_while_one_is_undelivered_and_a_full_one_follows_an_outage() -> None:
    m, producer, _, _ = manager()
    own(m, "a")
    m.step(0)
    assert [h["full"] for h in producer.of("coordinator")] == [True]
    for _ in range(5):  # the broker is away: the first heartbeat is never acknowledged
        m.clock.advance(1.0)  # type: ignore[attr-defined]
        m.step(0)
    assert len(producer.of("coordinator")) == 1, "no heartbeat piles up behind an undelivered one"
    assert m._bus_away()
    m.clock.advance(BUS_SUSPECT_S)  # type: ignore[attr-defined]
    producer.deliver()  # the broker is back
    assert not m._bus_away()
    m.step(0)
    beats = producer.of("coordinator")
    assert len(beats) == 2 and beats[1]["full"], "after an outage the coordinator gets the whole truth"
    assert [s["task_id"] for s in beats[1]["statuses"]] == ["mv:a"]


def test_a_heartbeat_acknowledged_before_send_returns_does_not_stop_the_next_ones() -> None:
    m, producer, _, _ = manager()
    producer.instant = True
    for _ in range(3):
        m.clock.advance(m._full_every_s + 0.1)  # type: ignore[attr-defined]
        m.step(0)
    assert len(producer.of("coordinator")) == 3 and not m._bus_away()


def test_a_lost_heartbeat_is_followed_by_a_full_one() -> None:
    m, producer, _, _ = manager()
    m.step(0)
    m.host.full_requested = False
    producer.deliver(BusError("delivery failed: _MSG_TIMED_OUT", retriable=True))
    m.step(0)
    assert [h["full"] for h in producer.of("coordinator")] == [True, True]


def test_run_records_are_kept_while_the_producer_refuses_and_requeued_when_a_delivery_fails() -> None:
    m, producer, _, runner = manager()
    task = own(m, "a")
    producer.refuse = BusError("produce: local queue full", retriable=True)
    m.step(0)  # a new task runs at once; its PENDING record cannot be handed over
    assert m.host.executor.wait_idle(timeout_s=WAIT)
    m.step(0)
    assert producer.of("runs") == [] and len(m.host.outbox) >= 2, "nothing sent, nothing lost"
    producer.refuse = None
    m.step(0)
    states = [r["state"] for r in producer.of("runs")]
    assert states[0] == "PENDING" and "COMPLETED" in states and not m.host.outbox
    producer.deliver(BusError("delivery to runs[0]: UNKNOWN_TOPIC", retriable=True))
    assert len(m.host.outbox) == len(states), "every failed delivery is back in the outbox"
    m.step(0)
    assert [r["state"] for r in producer.of("runs")] == states * 2
    assert [c.task_id for c in runner.calls] == [task["task_id"]]


def test_commands_with_unexpected_content_are_skipped() -> None:
    m, producer, commands, _ = manager()
    own(m, "a")

    def manager_command(**fields: Any) -> Message:
        value = {
            "kind": "ADD_MAINTAINER",
            "task_id": "mv:x",
            "epoch": 2,
            "coordinator_epoch": 1,
            "task": None,
            **fields,
        }
        return Message("manager", 0, 0, value["task_id"], value, "io.mvs.ManagerCommand")

    commands.messages = [
        manager_command(
            task={"task_id": "mv:x", "epoch": 2, "owner": "w1"}
        ),  # a task record the maintainer cannot use
        manager_command(kind="REMOVE_MAINTAINER", task_id="mv:unknown"),
        manager_command(kind="REMOVE_MAINTAINER", task_id="no shape at all/\x00"),
        manager_command(kind="NO_SUCH_KIND"),
        manager_command(coordinator_epoch="not a number"),
    ]
    for _ in range(len(commands.messages)):
        m.step(0)
    assert not commands.messages and set(m.host.owned) == {"mv:a"}


def test_a_command_from_the_future_cannot_silence_the_real_coordinator() -> None:
    m, _, commands, _ = manager()
    task = own(m, "a")
    forged = {"kind": "BOOTSTRAP", "task_id": "__bootstrap__/0", "epoch": 0, "task": None}
    real_remove = {"kind": "REMOVE_MAINTAINER", "task_id": "mv:a", "epoch": task["epoch"] + 1, "task": None}
    commands.messages = [
        Message("manager", 0, 0, "k", {**forged, "coordinator_epoch": 2**62}, "io.mvs.ManagerCommand"),
        Message("manager", 0, 1, "mv:a", {**real_remove, "coordinator_epoch": 2}, "io.mvs.ManagerCommand"),
    ]
    m.step(0)
    m.step(0)
    assert m.host.coordinator_epoch == 2, "the forged epoch was not taken"
    assert "mv:a" not in m.host.owned, "the real coordinator's command still applies"


def test_drop_of_a_running_mv_never_holds_the_loop() -> None:
    m, producer, commands, runner = manager()
    task = own(m, "slow")
    gate = runner.gate("mv:slow", stubborn=True)  # ignores the cancel until released
    m.step(0)
    assert gate.started.wait(WAIT)
    remove = {
        "kind": "REMOVE_MAINTAINER",
        "task_id": "mv:slow",
        "epoch": task["epoch"] + 1,
        "coordinator_epoch": 1,
        "task": None,
    }
    commands.messages = [Message("manager", 0, 0, "mv:slow", remove, "io.mvs.ManagerCommand")]
    m.step(0)  # returns although the cancelled run goes on
    assert "mv:slow" not in m.host.owned and "mv:slow" in m.host.draining
    assert runner.cancelled, "the run was cancelled"
    for _ in range(20):  # the loop keeps turning (heartbeats, other tasks) while the run drains
        m.clock.advance(1.0)  # type: ignore[attr-defined]
        m.step(0)
    assert not gate.release.is_set() and "mv:slow" in m.host.draining
    assert runner.dropped == [], "the table is not dropped under a run that may still write it"
    gate.release.set()
    assert m.host.executor.wait_idle(timeout_s=WAIT)
    m.step(0)
    assert "mv:slow" not in m.host.draining and "mv:slow" not in m.host.mailboxes
    assert runner.dropped == ["mv:slow"], "dropped once the run ended"
    assert [r["state"] for r in producer.of("runs")][-1] in ("CANCELED", "COMPLETED")


def test_a_fatally_failed_consumer_is_rebuilt_and_its_partitions_let_go() -> None:
    m, _, commands, _ = manager()
    m.partitions = {0}
    own(m, "a")

    def fatal(timeout_s: float = 0.0) -> Message | None:
        raise BusError("consumer: _FATAL", fatal=True)

    commands.poll = fatal  # type: ignore[method-assign]
    m.step(0)  # does not raise
    assert m._commands is not commands and not m.partitions and not m.host.owned
    m._commands.close()
    m._task_commands.close()


def test_a_fenced_consumer_is_not_rebuilt_the_loop_decides() -> None:
    m, _, commands, _ = manager()

    def fenced(timeout_s: float = 0.0) -> Message | None:
        raise BusError("consumer: FENCED_INSTANCE_ID", fatal=True, fenced=True)

    commands.poll = fenced  # type: ignore[method-assign]
    try:
        m.step(0)
    except BusError as exc:
        assert exc.fenced
    else:
        raise AssertionError("a fence must reach LoopRole.run (exit 75)")
    assert m._commands is commands


def test_the_last_error_the_loop_survived_travels_in_every_heartbeat() -> None:
    m, producer, _, _ = manager()
    own(m, "a")
    m.step(0)
    assert producer.of("coordinator")[-1]["loop_error"] is None
    m.last_error = LoopError(
        at_ms=1_700_000_000_000, message="TypeError: boom\nmore", traceback="", consecutive=2
    )
    producer.deliver()
    m.clock.advance(20.0)  # type: ignore[attr-defined]
    m.step(0)
    assert (
        producer.of("coordinator")[-1]["loop_error"]
        == "2023-11-14 22:13:20Z: TypeError: boom more (2 in a row)"
    )
