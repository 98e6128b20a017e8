"""The typed bus on a real broker: topics, round trips, dead letters, transactions, restore."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import replace
from types import MappingProxyType
from typing import Any

import pytest

from workers.codec import get_codec
from workers.config import Settings
from workers.kafka import admin
from workers.kafka.admin import apply_topics, configure_group, describe
from workers.kafka.typed import (
    Message,
    TypedConsumer,
    TypedProducer,
    latest_by_key,
    partition_for,
    read_to_end,
    tail,
)
from workers.topics import topics

pytestmark = pytest.mark.integration
T0 = 1_767_225_600_000


@pytest.fixture
def bus(settings: Settings) -> Settings:
    apply_topics(settings)
    return settings


@pytest.fixture
def producer(bus: Settings) -> Iterator[TypedProducer]:
    with TypedProducer(bus) as p:
        yield p


def maintainer_command(task_id: str, command_id: str = "c1") -> dict[str, Any]:
    return {
        "command_id": command_id,
        "coordinator_epoch": 1,
        "kind": "REFRESH_NOW",
        "task_id": task_id,
        "epoch": 1,
        "safepoint": None,
    }


def ddl_result(event_id: str) -> dict[str, Any]:
    return {"event_id": event_id, "task_id": None, "accepted": True, "error": None, "at": T0}


def task_record(task_id: str, epoch: int = 1) -> dict[str, Any]:
    return {
        "task_id": task_id,
        "kind": "MV",
        "name": task_id.removeprefix("mv:"),
        "mv": None,
        "mv_log": None,
        "state": "NORMAL",
        "epoch": epoch,
        "error": None,
        "checkpoint": {"t": epoch},
        "safepoint": None,
        "owner": None,
        "last_run": None,
        "next_run_at": None,
        "created_at": T0,
        "updated_at": T0,
        "created_by": None,
    }


def poll_until(
    consumer: TypedConsumer, done: Callable[[list[Message]], bool], timeout_s: float = 30.0
) -> list[Message]:
    """Poll until ``done(messages so far)``; fail at the deadline."""
    got: list[Message] = []
    deadline = time.monotonic() + timeout_s
    while not done(got):
        assert time.monotonic() < deadline, f"condition not met within {timeout_s}s; got {got}"
        message = consumer.poll(0.2)
        if message is not None:
            got.append(message)
    return got


def test_apply_topics_creates_all_then_has_nothing_to_do(settings: Settings) -> None:
    first = apply_topics(settings)
    assert set(first.created) == set(topics())
    assert not first.drift
    second = apply_topics(settings)
    assert second.nothing_to_do and set(second.unchanged) == set(topics())
    assert str(second).startswith("nothing to do")
    status = {s.topic: s for s in describe(settings)}
    assert status["catalog"].exists and status["catalog"].partitions == 12 and not status["catalog"].drift
    assert status["runs"].offsets == {0: (0, 0), 1: (0, 0), 2: (0, 0)}


def test_apply_topics_reports_drift(bus: Settings, monkeypatch: pytest.MonkeyPatch) -> None:
    runs = topics()["runs"]
    changed = replace(runs, partitions=4, config=MappingProxyType({**runs.config, "retention.ms": "1000"}))
    monkeypatch.setattr(admin, "topics", lambda: {**topics(), "runs": changed})
    report = apply_topics(bus)
    assert not report.created
    drift = {(d.topic, d.item): (d.declared, d.actual) for d in report.drift}
    assert drift == {("runs", "partitions"): ("4", "3"), ("runs", "retention.ms"): ("1000", "604800000")}
    assert "runs: partitions is 3 on the broker but declared 4" in str(report)


def test_typed_round_trip_with_group_and_callbacks(bus: Settings, producer: TypedProducer) -> None:
    keys = [f"mv:view{i}" for i in range(6)]
    for key in keys:
        producer.send("maintainer", key, maintainer_command(key, f"cmd-{key}"))
    producer.send(
        "runs",
        "mv:view0",
        {
            "run_id": "r1",
            "task_id": "mv:view0",
            "epoch": 1,
            "worker_id": "w",
            "trigger": "t",
            "state": "RUNNING",
            "started_at": T0,
            "watermark_before": {},
            "watermark_after": {},
        },
    )
    producer.flush()
    assigned: list[tuple[str, int]] = []
    with TypedConsumer(bus, group_id=bus.group("test")) as consumer:
        consumer.subscribe(["maintainer"], on_assign=assigned.extend)
        got = poll_until(consumer, lambda got: len(got) == len(keys))
        consumer.commit()
    assert sorted(assigned) == [("maintainer", p) for p in range(12)]
    for message in got:
        assert message.topic == "maintainer" and message.record_type == "io.mvs.MaintainerCommand"
        assert message.key is not None and message.value == maintainer_command(
            message.key, f"cmd-{message.key}"
        )
        # librdkafka's murmur2_random puts a key where the Java client would.
        assert message.partition == partition_for(message.key, 12)
        assert message.timestamp is not None and message.timestamp > T0
    run = read_to_end(bus, "runs")
    assert [m.value["state"] for m in run if m.value] == ["RUNNING"]
    assert run[0].value is not None and run[0].value["ended_at"] is None  # omitted optional → null


def test_cooperative_rebalance_moves_some_partitions(bus: Settings) -> None:
    owned: dict[str, set[int]] = {"a": set(), "b": set()}

    def track(
        name: str,
    ) -> tuple[Callable[[list[tuple[str, int]]], None], Callable[[list[tuple[str, int]]], None]]:
        return (
            lambda ps: owned[name].update(p for _, p in ps),
            lambda ps: owned[name].difference_update(p for _, p in ps),
        )

    with (
        TypedConsumer(bus, group_id=bus.group("workers")) as a,
        TypedConsumer(bus, group_id=bus.group("workers")) as b,
    ):
        a.subscribe(["manager"], *track("a"))
        deadline = time.monotonic() + 30
        while len(owned["a"]) < 12:
            assert time.monotonic() < deadline
            a.poll(0.1)
        b.subscribe(["manager"], *track("b"))
        while not (
            owned["a"]
            and owned["b"]
            and owned["a"] | owned["b"] == set(range(12))
            and not owned["a"] & owned["b"]
        ):
            assert time.monotonic() < deadline, owned
            a.poll(0.1)
            b.poll(0.1)
        assert {p for _, p in a.assignment()} == owned["a"]


def test_undecodable_record_goes_to_the_dlq_and_consumption_goes_on(
    bus: Settings, producer: TypedProducer
) -> None:
    key = "mv:sales"
    partition = partition_for(key, 12)
    producer.produce_raw("maintainer", key.encode(), b"not avro at all", [("trace", b"abc")])
    wrong_type = get_codec().encode("DdlResult", ddl_result("e1"))
    producer.produce_raw("maintainer", key.encode(), wrong_type)
    producer.flush()
    group = bus.group("maintainers")
    with TypedConsumer(bus, group_id=group) as consumer:
        consumer.assign("maintainer", [partition])
        deadline = time.monotonic() + 30
        while len(read_to_end(bus, "dlq")) < 2:
            assert consumer.poll(0.2) is None and time.monotonic() < deadline
    producer.send("maintainer", key, maintainer_command(key, "good"))
    producer.flush()
    # A new member of the group starts after the dead letters: they were committed as handled.
    with TypedConsumer(bus, group_id=group) as consumer:
        consumer.assign("maintainer", [partition])
        (good,) = poll_until(consumer, lambda got: len(got) == 1)
        assert good.value is not None and good.value["command_id"] == "good" and good.offset == 2
        consumer.commit(good)
    letters = read_to_end(bus, "dlq")
    assert [m.raw for m in letters] == [b"not avro at all", wrong_type]
    first, second = letters
    assert first.key == key and first.header("trace") == "abc"
    assert first.header("mvs.error") == "bad magic 6e6f: not Avro single-object encoding (c301)"
    assert first.header("mvs.source.topic") == bus.topic("maintainer")
    assert (first.header("mvs.source.partition"), first.header("mvs.source.offset")) == (str(partition), "0")
    assert (
        second.header("mvs.error") == "io.mvs.DdlResult does not belong on topic maintainer "
        "(expects io.mvs.MaintainerCommand)"
    )
    assert second.header("mvs.source.offset") == "1"


def test_dead_letter_after_an_uncommitted_record_waits_for_its_commit(
    bus: Settings, producer: TypedProducer
) -> None:
    key = "mv:x"
    producer.send("maintainer", key, maintainer_command(key, "first"))
    producer.produce_raw("maintainer", key.encode(), b"\xc3\x01garbage!")
    producer.send("maintainer", key, maintainer_command(key, "third"))
    producer.flush()
    group = bus.group("maintainers")
    with TypedConsumer(bus, group_id=group) as consumer:
        consumer.assign("maintainer", [partition_for(key, 12)])
        first, third = poll_until(consumer, lambda got: len(got) == 2)
        # Nothing was committed past "first" by the dead letter: "first" was not committed yet.
        assert (first.offset, third.offset) == (0, 2)
        consumer.commit(first)
    with TypedConsumer(bus, group_id=group) as consumer:
        consumer.assign("maintainer", [partition_for(key, 12)])
        (again,) = poll_until(consumer, lambda got: len(got) == 1)
        assert again.value is not None and again.value["command_id"] == "third"
    assert "unknown schema fingerprint" in str(read_to_end(bus, "dlq")[0].header("mvs.error"))


def test_transactions_commit_records_and_offsets_atomically(bus: Settings, producer: TypedProducer) -> None:
    for event in ("e1", "e2"):
        producer.send("ddl.results", event, ddl_result(event))  # the "input" of this test
    producer.flush()
    group = bus.group("coordinator")
    txn = TypedProducer(bus, transactional_id=f"{bus.namespace}.txn")
    txn.init_transactions()
    with TypedConsumer(bus, group_id=group) as consumer:
        consumer.subscribe(["ddl.results"])
        (e1,) = poll_until(consumer, lambda got: len(got) == 1)
        txn.begin()
        txn.send("catalog", "mv:committed", task_record("mv:committed"))
        txn.send_offsets(consumer)
        txn.commit()
        (e2,) = poll_until(consumer, lambda got: len(got) == 1)
        txn.begin()
        txn.send("catalog", "mv:aborted", task_record("mv:aborted"))
        txn.send_offsets(consumer)
        txn.flush()
        txn.abort()
        consumer.seek_to_committed()
        (again,) = poll_until(consumer, lambda got: len(got) == 1)
        assert again.offset == e2.offset  # the aborted transaction's offsets did not commit
        txn.begin()
        txn.send("catalog", "mv:after", task_record("mv:after"))
        txn.commit()
    txn.close()
    keys = [m.key for m in read_to_end(bus, "catalog")]
    assert sorted(k for k in keys if k) == ["mv:after", "mv:committed"]
    # The group's committed offset is the one the first transaction sent: e2 comes next.
    with TypedConsumer(bus, group_id=group) as consumer:
        consumer.assign("ddl.results", [0])
        (next_up,) = poll_until(consumer, lambda got: len(got) == 1)
        assert next_up.offset == e2.offset and e1.offset < e2.offset


def test_transaction_commits_positions_only_when_it_commits(bus: Settings, producer: TypedProducer) -> None:
    for event in ("e1", "e2"):
        producer.send("ddl.results", event, ddl_result(event))
    producer.flush()
    group = bus.group("coordinator")
    physical = (bus.topic("ddl.results"), 0)
    txn = TypedProducer(bus, transactional_id=f"{bus.namespace}.txn")
    transaction = txn.transaction
    txn.init_transactions()
    with (
        TypedConsumer(bus, group_id=group) as consumer,
        TypedConsumer(bus, group_id=group) as observer,  # assigned nothing: reads the group's offsets only
    ):
        consumer.subscribe(["ddl.results"])
        (e1,) = poll_until(consumer, lambda got: len(got) == 1)
        txn.begin()
        txn.send_offsets(consumer)
        # Sent, not committed (the broker holds the group's offsets as unstable until the end).
        assert transaction.committed == {} and consumer.uncommitted() == [("ddl.results", 0)]
        txn.commit()
        assert transaction.committed == {physical: e1.offset + 1}
        assert consumer.uncommitted() == []  # the transaction marked the consumer's positions committed
        assert observer.committed("ddl.results", [0]) == {0: e1.offset + 1}

        (e2,) = poll_until(consumer, lambda got: len(got) == 1)
        txn.begin()
        txn.send("catalog", "mv:aborted", task_record("mv:aborted"))
        txn.send_offsets(consumer)
        txn.abort()
        assert transaction.committed == {physical: e1.offset + 1}  # nothing of the aborted one
        assert consumer.uncommitted() == [("ddl.results", 0)]
        assert observer.committed("ddl.results", [0]) == {0: e1.offset + 1}

        txn.begin()  # a transaction without offsets commits records only
        txn.send("catalog", "mv:records-only", task_record("mv:records-only"))
        txn.commit()
        assert consumer.uncommitted() == [("ddl.results", 0)]
        assert observer.committed("ddl.results", [0]) == {0: e1.offset + 1}
        assert e2.offset == e1.offset + 1
    txn.close()
    assert [m.key for m in read_to_end(bus, "catalog")] == ["mv:records-only"]


def test_dead_letters_go_through_a_given_producer(bus: Settings, producer: TypedProducer) -> None:
    producer.produce_raw("maintainer", b"mv:d", b"junk")
    producer.flush()
    with (
        TypedProducer(bus) as dlq,
        TypedConsumer(bus, group_id=bus.group("maintainers"), dlq_producer=dlq) as consumer,
    ):
        consumer.assign("maintainer", [partition_for("mv:d", 12)])
        deadline = time.monotonic() + 30
        while not read_to_end(bus, "dlq"):
            assert consumer.poll(0.2) is None and time.monotonic() < deadline
        assert consumer.committed("maintainer", [partition_for("mv:d", 12)]) == {partition_for("mv:d", 12): 1}
    (letter,) = read_to_end(bus, "dlq")
    assert letter.raw == b"junk" and letter.key == "mv:d" and letter.header("mvs.source.offset") == "0"


def test_read_to_end_of_compacted_catalog(bus: Settings, producer: TypedProducer) -> None:
    producer.send("catalog", "mv:a", task_record("mv:a", 1))
    producer.send("catalog", "mv:b", task_record("mv:b", 1))
    producer.send("catalog", "mv:a", task_record("mv:a", 2))
    producer.send_tombstone("catalog", "mv:b")
    producer.flush()
    messages = read_to_end(bus, "catalog")
    assert len(messages) == 4
    tombstone = next(m for m in messages if m.value is None)
    assert tombstone.key == "mv:b" and tombstone.is_tombstone
    latest = latest_by_key(messages)
    assert list(latest) == ["mv:a"] and latest["mv:a"].value == task_record("mv:a", 2)
    assert partition_for("mv:a", 12) != partition_for("mv:b", 12)
    only_a = read_to_end(bus, "catalog", [partition_for("mv:a", 12)])
    assert [m.value["epoch"] for m in only_a if m.value] == [1, 2] and {m.key for m in only_a} == {"mv:a"}
    assert read_to_end(bus, "ddl") == []


def test_tail_follows_new_records(bus: Settings, producer: TypedProducer) -> None:
    producer.send("ddl.results", "old", ddl_result("old"))
    producer.flush()
    stop = threading.Event()
    stream = tail(bus, "ddl.results", stop=stop, poll_timeout_s=0.1)
    seen: list[str] = []

    def reader() -> None:
        for message in stream:
            assert message.value is not None
            seen.append(message.value["event_id"])
            stop.set()

    thread = threading.Thread(target=reader)
    thread.start()
    deadline = time.monotonic() + 30
    while not stop.is_set():  # keep producing: tail starts at the end once assigned
        assert time.monotonic() < deadline
        producer.send("ddl.results", "new", ddl_result("new"))
        producer.flush()
        stop.wait(0.2)
    thread.join(10)
    assert seen and seen[0] == "new"
    assert [m.value["event_id"] for m in tail(bus, "ddl.results", follow=False) if m.value][0] == "old"


def test_group_protocol_consumer(bus: Settings, producer: TypedProducer) -> None:
    settings = replace(bus, group_protocol="consumer")
    configure_group(settings, settings.group("kip848"))
    producer.send(
        "manager",
        "mv:k",
        {
            "command_id": "c",
            "coordinator_epoch": 1,
            "kind": "BOOTSTRAP",
            "task_id": "mv:k",
            "epoch": 1,
            "task": None,
        },
    )
    producer.flush()
    assigned: list[tuple[str, int]] = []
    with TypedConsumer(settings, group_id=settings.group("kip848")) as consumer:
        consumer.subscribe(["manager"], on_assign=assigned.extend)
        (message,) = poll_until(consumer, lambda got: len(got) == 1)
        consumer.commit(message)
    assert message.partition == partition_for("mv:k", 12)
    assert sorted(assigned) == [("manager", p) for p in range(12)]
