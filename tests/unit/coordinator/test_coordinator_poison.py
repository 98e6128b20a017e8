"""A DDL record whose handling raises (a bug, an effect that cannot be encoded) is dead-lettered,
answered with an error and committed past in one transaction; the next DDL is applied. No broker:
the coordinator's transactional producer and DDL consumer are fakes that record the transactions."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pytest

from tests.support.memory_bus import MemoryBus
from workers.config import Settings
from workers.coordinator.handlers import Context, Effects, handle_ddl
from workers.coordinator.service import Coordinator
from workers.kafka.errors import BusError
from workers.kafka.messages import Message
from workers.records import Record
from workers.sched.clock import ManualClock


class FakeTxnProducer:
    """Keeps what each transaction sent; ``committed`` holds the transactions that committed."""

    def __init__(self) -> None:
        self.open: list[tuple[str, Any]] | None = None
        self.committed: list[list[tuple[str, Any]]] = []
        self.aborted = 0
        self.unencodable: set[str] = set()  # event ids whose DdlResult "cannot be encoded"

    def begin(self) -> None:
        assert self.open is None, "a transaction is already open"
        self.open = []

    def send(self, topic: str, key: str | None, record: Record, **_: Any) -> None:
        assert self.open is not None
        if topic == "ddl.results" and record["event_id"] in self.unencodable and record["accepted"]:
            raise TypeError("cannot encode")
        self.open.append((topic, record))

    def send_tombstone(self, topic: str, key: str) -> None:
        assert self.open is not None
        self.open.append((topic, None))

    def send_dead_letter(self, message: Message, reason: str) -> None:
        assert self.open is not None
        self.open.append(("dlq", (message.offset, reason)))

    def send_offsets(self, consumer: Any) -> None:
        assert self.open is not None
        self.open.append(("offsets", consumer.position))

    def commit(self) -> None:
        assert self.open is not None
        self.committed.append(self.open)
        self.open = None

    def abort(self) -> None:
        self.open = None
        self.aborted += 1

    def close(self, timeout_s: float = 30.0) -> None:
        pass


class FakeDdl:
    def __init__(self) -> None:
        self.position = 0

    def close(self) -> None:
        pass


def ddl(offset: int, event_id: Any, sql: str) -> Message:
    value = {
        "schema_version": 1,
        "event_id": event_id,
        "action": "CREATE_MV",
        "name": f"mv{offset}",
        "sql": sql,
        "issued_by": "test",
        "issued_at": 0,
        "mv": {
            "query": "SELECT id FROM t",
            "refresh_mode": "COMPLETE",
            "trigger": {"kind": "ON_DEMAND", "interval_ms": None},
            "base_tables": ["t"],
        },
        "mv_log": None,
    }
    return Message(
        "ddl", 0, offset, event_id if isinstance(event_id, str) else None, value, "io.mvs.DdlEvent"
    )


def coordinator(handler: Any) -> tuple[Coordinator, FakeTxnProducer, FakeDdl]:
    settings = Settings(bootstrap_servers="127.0.0.1:1", namespace="unit")
    c = Coordinator(
        settings,
        bus=MemoryBus(),  # no real client: what the tests read is the fakes below
        clock=ManualClock(start=0.0, wall_start_ms=1_700_000_000_000),
        table_exists_fn=lambda name: name == "t",  # the base table; MV names must not be tables
        ddl_handler=handler,
    )
    producer, consumer = FakeTxnProducer(), FakeDdl()
    c._producer = producer  # type: ignore[assignment]
    c._ddl = consumer  # type: ignore[assignment]
    c.active = True
    return c, producer, consumer


def apply(c: Coordinator, consumer: FakeDdl, message: Message) -> None:
    consumer.position = message.offset + 1  # what the real consumer's position is after polling it
    c._apply_ddl(message)


def test_a_handler_that_raises_is_dead_lettered_answered_and_committed_past() -> None:
    def handler(event: Record, tasks: Mapping[str, Record], ctx: Context) -> Effects:
        if event["name"] == "mv0":
            raise RuntimeError("a bug in the handler")
        return handle_ddl(event, tasks, ctx)

    c, producer, consumer = coordinator(handler)
    apply(c, consumer, ddl(0, "e0", "CREATE poison"))
    apply(c, consumer, ddl(1, "e1", "CREATE fine"))
    poison, fine = producer.committed
    topics = [topic for topic, _ in poison]
    assert topics == ["dlq", "ddl.results", "offsets"], "one transaction: dead letter, answer, offset"
    assert poison[0][1] == (0, "RuntimeError: a bug in the handler")
    result = poison[1][1]
    assert result["event_id"] == "e0" and not result["accepted"]
    assert result["error"]["code"] == 1001 and "a bug in the handler" in result["error"]["message"]
    assert poison[2][1] == 1, "committed past the poison record"
    assert ("offsets", 2) in fine and "mv:mv1" in c.tasks, "the next DDL is applied"
    assert [r for t, r in fine if t == "ddl.results"][0]["accepted"]


def test_an_effect_that_cannot_be_encoded_is_aborted_then_dead_lettered() -> None:
    c, producer, consumer = coordinator(handle_ddl)
    producer.unencodable.add("e0")
    apply(c, consumer, ddl(0, "e0", "CREATE unencodable"))
    assert producer.aborted == 1 and "mv:mv0" not in c.tasks, "nothing of the failed transaction applied"
    (dead,) = producer.committed
    assert [t for t, _ in dead] == ["dlq", "ddl.results", "offsets"]
    assert dead[0][1][1] == "TypeError: cannot encode"


def test_an_event_id_that_cannot_be_read_is_still_dead_lettered_and_committed() -> None:
    def handler(event: Record, tasks: Mapping[str, Record], ctx: Context) -> Effects:
        raise KeyError("event_id")

    c, producer, consumer = coordinator(handler)
    apply(c, consumer, ddl(0, None, "no id"))
    (dead,) = producer.committed
    assert [t for t, _ in dead] == ["dlq", "offsets"]


def test_a_bus_error_is_not_a_poison_record() -> None:
    def handler(event: Record, tasks: Mapping[str, Record], ctx: Context) -> Effects:
        raise BusError("broker away", retriable=True)

    c, producer, consumer = coordinator(handler)
    with pytest.raises(BusError):
        apply(c, consumer, ddl(0, "e0", "CREATE"))
    assert producer.committed == [], "redone from the committed offset, not dead-lettered"


class PollingDdl(FakeDdl):
    """A DDL consumer whose poll hands out ``messages`` and then raises ``error`` (if set)."""

    def __init__(self, messages: list[Message], error: BusError | None = None) -> None:
        super().__init__()
        self.messages = messages
        self.error = error

    def poll(self, timeout_s: float = 0.0) -> Message | None:
        if self.messages:
            message = self.messages.pop(0)
            self.position = message.offset + 1
            return message
        if self.error is not None:
            raise self.error
        return None


def test_a_failed_transaction_makes_the_coordinator_start_over_while_it_owns_the_ddl_partition() -> None:
    def handler(event: Record, tasks: Mapping[str, Record], ctx: Context) -> Effects:
        raise BusError("commit_transaction: _TIMED_OUT", retriable=True)

    c, producer, _ = coordinator(handler)
    c._owns_ddl = True
    c._ddl = PollingDdl([ddl(0, "e0", "CREATE")])  # type: ignore[assignment]
    with pytest.raises(BusError):  # LoopRole.run logs it and backs off
        c.step(0)
    assert not c.active and c._producer is None, "the producer is dropped (a new one aborts its transaction)"
    assert c._owns_ddl, "still ours: the next step activates again from the committed offset"
    assert producer.committed == []


def test_a_fenced_coordinator_stands_by_until_the_group_assigns_it_again() -> None:
    c, _, _ = coordinator(handle_ddl)
    c._owns_ddl = True
    c._ddl = PollingDdl([], BusError("PRODUCER_FENCED", fatal=True, fenced=True))  # type: ignore[assignment]
    c.step(0)  # does not raise
    assert not c.active and c._producer is None and not c._owns_ddl


def test_a_resume_starts_the_crash_count_over() -> None:
    """A task FAILED after its owners went silent again and again, brought back by the user's RESUME,
    is not failed again by the next single silent owner (only restarts in a row count)."""
    c, _, consumer = coordinator(handle_ddl)
    apply(c, consumer, ddl(0, "e0", "CREATE"))
    c.tasks["mv:mv0"] = {**c.tasks["mv:mv0"], "state": "FAILED"}
    c._restarts["mv:mv0"], c._restarted_at["mv:mv0"] = 3, 1
    resume = ddl(1, "e1", "RESUME")
    resume.value.update(action="RESUME", name="mv0", mv=None)  # type: ignore[union-attr]
    apply(c, consumer, resume)
    assert c.tasks["mv:mv0"]["state"] == "NORMAL"
    assert "mv:mv0" not in c._restarts and "mv:mv0" not in c._restarted_at
