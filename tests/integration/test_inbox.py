"""The inbox forwarder on the session broker (no authentication needed to test the forwarding):
each DDL producer's inbox → ddl with issued_by from the inbox, exactly once across a restart,
undecodable records to the dlq, new inboxes picked up while running."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from dataclasses import replace

import pytest

from tests.support.cluster import wait_until
from workers.config import Settings
from workers.coordinator.inbox import FORWARDED_FROM, InboxForwarder, forward_inboxes_in_background
from workers.ddl.parser import parse_statement
from workers.kafka.acls import create_inboxes
from workers.kafka.admin import apply_topics
from workers.kafka.typed import Message, TypedProducer, read_to_end
from workers.sched.clock import ManualClock


@pytest.fixture
def bus(settings: Settings) -> Iterator[Settings]:
    apply_topics(settings)
    create_inboxes(settings, ["User:alice"])
    yield settings


def _forwarded(settings: Settings) -> list[Message]:
    return [m for m in read_to_end(settings, "ddl") if m.value is not None]


def _publish(settings: Settings, topic: str, statements: list[str], claim: str) -> list[str]:
    with TypedProducer(settings) as producer:
        events = [parse_statement(sql, issued_by=claim) for sql in statements]
        for event in events:
            producer.send(topic, event["name"], event)
        producer.flush()
    return [e["event_id"] for e in events]


def _drive(forwarder: InboxForwarder, until: int, *, dead_letters: int = 0) -> None:
    def stepped() -> bool:
        forwarder.step(0.2)
        done = forwarder.forwarded >= until
        return done and (not dead_letters or len(read_to_end(forwarder.settings, "dlq")) >= dead_letters)

    wait_until(stepped, what=f"{until} events forwarded, {dead_letters} dead-lettered")


def test_inbox_events_reach_ddl_once_with_the_inbox_principal(bus: Settings) -> None:
    sent = _publish(bus, "ddl.inbox.alice", [f"DROP MATERIALIZED VIEW v{i}" for i in range(3)], "User:admin")
    with TypedProducer(bus) as raw:
        raw.produce_raw("ddl.inbox.alice", b"v9", b"not avro")  # any producer can write any bytes
        raw.flush()
    forwarder = InboxForwarder(bus)
    forwarder.start()
    try:
        _drive(forwarder, 3, dead_letters=1)
    finally:
        forwarder.close()
    ddl = _forwarded(bus)
    assert [m.value["event_id"] for m in ddl if m.value] == sent  # in the order she sent them
    assert {m.value["issued_by"] for m in ddl if m.value} == {"User:alice"}
    assert ddl[0].header(FORWARDED_FROM) == "ddl.inbox.alice[0]@0"
    letters = read_to_end(bus, "dlq")
    assert [m.header("mvs.source.topic") for m in letters] == [bus.topic("ddl.inbox.alice")]

    # A forwarder that starts again (another coordinator, a restart) finds nothing left to forward:
    # the inbox offsets were committed in the same transactions as the forwarded events.
    later = _publish(bus, "ddl.inbox.alice", ["DROP MATERIALIZED VIEW last"], "User:alice")
    again = InboxForwarder(bus)
    again.start()
    try:
        _drive(again, 1)
    finally:
        again.close()
    assert [m.value["event_id"] for m in _forwarded(bus) if m.value] == sent + later


def test_a_new_inbox_is_picked_up_while_running(bus: Settings) -> None:
    clock = ManualClock()
    forwarder = InboxForwarder(bus, clock=clock, discover_every_s=5.0)
    forwarder.start()
    try:
        assert forwarder.inboxes == ["ddl.inbox.alice"]
        create_inboxes(bus, ["User:carol"])
        sent = _publish(bus, "ddl.inbox.carol", ["DROP MATERIALIZED VIEW c"], "User:alice")
        forwarder.step(0.1)
        assert forwarder.inboxes == ["ddl.inbox.alice"]  # not yet: discovery is periodic
        clock.advance(5.0)
        _drive(forwarder, 1)
        assert forwarder.inboxes == ["ddl.inbox.alice", "ddl.inbox.carol"]
    finally:
        forwarder.close()
    ddl = _forwarded(bus)
    assert [(m.value["event_id"], m.value["issued_by"]) for m in ddl if m.value] == [(sent[0], "User:carol")]


def test_mvs_coordinator_forwards_in_the_background_only_when_asked(bus: Settings) -> None:
    assert forward_inboxes_in_background(bus) is None  # MVS_DDL_INBOX unset: producers write ddl
    stop = forward_inboxes_in_background(replace(bus, ddl_inbox=True))
    assert stop is not None
    try:
        sent = _publish(bus, "ddl.inbox.alice", ["DROP MATERIALIZED VIEW v"], "someone")
        forwarded = wait_until(lambda: _forwarded(bus), what="the background forwarder")
        assert [(m.value["event_id"], m.value["issued_by"]) for m in forwarded if m.value] == [
            (sent[0], "User:alice")
        ]
    finally:
        stop()
    assert "InboxForwarder" not in {t.name for t in threading.enumerate()}
