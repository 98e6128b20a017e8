"""An in-memory bus (workers.bus.Bus) for unit tests of a role's ``step()``; the integration tests run
the same roles on a real broker.

What it keeps of Kafka: topics are partitions of records (encoded with the real codec, so a record
that would not encode fails here too), keys map to partitions as the Java client does, a record of a
transaction becomes visible only when it commits (read_committed), committed offsets are per group,
delivery callbacks run in the producer's ``poll``, ``init_transactions`` fences the previous producer
of a transactional id. What the test drives: group assignment (``assign`` / ``revoke``: the member's
callbacks run inside its next ``poll``, as librdkafka's do), and outages (``refuse``, ``hold``).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from workers.bus import DeliveryCallback, Partitions, RebalanceCallback
from workers.catalog.store import live_tasks
from workers.codec import get_codec
from workers.kafka.deadletter import DLQ_TOPIC, provenance
from workers.kafka.errors import BusError
from workers.kafka.messages import Message, partition_for
from workers.records import Record
from workers.topics import topic_spec

_TP = tuple[str, int]  # (logical topic, partition)


@dataclass(frozen=True)
class _Entry:
    key: str | None
    value: bytes | None
    headers: tuple[tuple[str, str], ...]


class MemoryBus:
    def __init__(self) -> None:
        self.codec = get_codec()
        self._logs: dict[str, list[list[_Entry]]] = {}
        self.committed: dict[tuple[str, str, int], int] = {}  # (group, topic, partition) → next offset
        self.members: dict[str, list[MemoryConsumer]] = {}  # group → subscribed consumers
        self._transactional: dict[str, MemoryProducer] = {}  # transactional id → its current producer
        self.configured_groups: list[str] = []
        self.catalog_reads: list[list[int] | None] = []
        self.refuse: BusError | None = None  # set: every send and catalog read raises it (broker away)
        self.hold = False  # set: delivery callbacks wait (the broker does not acknowledge)

    # -- the Bus protocol ----------------------------------------------------------------------------
    def consumer(self, group_id: str | None) -> MemoryConsumer:
        return MemoryConsumer(self, group_id)

    def producer(
        self,
        *,
        transactional_id: str | None = None,
        txn_timeout_s: float = 30.0,
        keep_until_delivered: bool = False,
    ) -> MemoryProducer:
        return MemoryProducer(self, transactional_id)

    def read_catalog(self, partitions: list[int] | None = None) -> dict[str, Record]:
        if self.refuse is not None:
            raise self.refuse
        self.catalog_reads.append(partitions)
        wanted = range(self.partitions("catalog")) if partitions is None else partitions
        return live_tasks(
            self.message("catalog", p, o) for p in wanted for o in range(self.end("catalog", p))
        )

    def configure_group(self, group_id: str) -> None:
        self.configured_groups.append(group_id)

    # -- topics --------------------------------------------------------------------------------------
    def partitions(self, topic: str) -> int:
        return topic_spec(topic).partitions

    def _log(self, topic: str) -> list[list[_Entry]]:
        if topic not in self._logs:
            self._logs[topic] = [[] for _ in range(self.partitions(topic))]
        return self._logs[topic]

    def end(self, topic: str, partition: int) -> int:
        return len(self._log(topic)[partition])

    def partition_of(self, topic: str, key: str | None, partition: int | None) -> int:
        if partition is not None:
            return partition
        return 0 if key is None else partition_for(key, self.partitions(topic))

    def append(self, topic: str, partition: int, entry: _Entry) -> None:
        self._log(topic)[partition].append(entry)

    def encode(self, topic: str, record: Mapping[str, Any]) -> bytes:
        schema = topic_spec(topic).value_schema
        if schema is None:
            raise TypeError(f"topic {topic!r} has no value schema; it takes raw bytes only")
        return self.codec.encode(schema, record)

    def message(self, topic: str, partition: int, offset: int) -> Message:
        entry = self._log(topic)[partition][offset]
        value, record_type, raw = None, None, None
        if entry.value is not None and topic_spec(topic).value_schema is None:
            raw = entry.value
        elif entry.value is not None:
            record_type, value = self.codec.decode(entry.value)
        return Message(topic, partition, offset, entry.key, value, record_type, entry.headers, None, raw)

    def messages(self, topic: str) -> list[Message]:
        """Every visible record of ``topic``, partition by partition."""
        log = self._log(topic)
        return [self.message(topic, p, o) for p in range(len(log)) for o in range(len(log[p]))]

    def records(self, topic: str) -> list[Record]:
        """The values of ``topic``'s visible records (tombstones left out)."""
        return [m.value for m in self.messages(topic) if m.value is not None]

    def publish(self, topic: str, key: str | None, record: Record, *, partition: int | None = None) -> int:
        """Another client's record (a user's DDL, an old coordinator's command); returns its partition."""
        p = self.partition_of(topic, key, partition)
        self.append(topic, p, _Entry(key, self.encode(topic, record), ()))
        return p

    # -- groups --------------------------------------------------------------------------------------
    def _member(self, group_id: str) -> MemoryConsumer:
        members = self.members.get(group_id, [])
        assert len(members) == 1, f"group {group_id}: expected one member, found {len(members)}"
        return members[0]

    def assign(self, group_id: str, topic: str, partitions: Sequence[int]) -> None:
        """The group gives the member ``partitions`` (its on_assign runs in its next poll)."""
        self._member(group_id).rebalances.append((True, [(topic, p) for p in partitions]))

    def revoke(self, group_id: str, topic: str, partitions: Sequence[int]) -> None:
        self._member(group_id).rebalances.append((False, [(topic, p) for p in partitions]))


class MemoryConsumer:
    def __init__(self, bus: MemoryBus, group_id: str | None) -> None:
        self.bus = bus
        self.group_id = group_id
        self.positions: dict[_TP, int] = {}  # assigned partitions → next offset to read
        self.rebalances: deque[tuple[bool, Partitions]] = deque()  # (gained?, partitions), served in poll
        self._on_assign: RebalanceCallback | None = None
        self._on_revoke: RebalanceCallback | None = None
        self._subscribed: list[_TP] = []
        self.closed = False

    def subscribe(
        self,
        topics: Sequence[str],
        on_assign: RebalanceCallback | None = None,
        on_revoke: RebalanceCallback | None = None,
    ) -> None:
        assert self.group_id is not None, "only a group member subscribes"
        self._on_assign, self._on_revoke = on_assign, on_revoke
        self.bus.members.setdefault(self.group_id, []).append(self)

    def _committed(self, tp: _TP) -> int:
        assert self.group_id is not None
        return self.bus.committed.get((self.group_id, *tp), 0)  # auto.offset.reset=earliest

    def assign(self, topic: str, partitions: Sequence[int], from_beginning: bool = False) -> None:
        for p in partitions:
            if from_beginning:
                self.positions[(topic, p)] = 0
            elif self.group_id is not None:
                self.positions[(topic, p)] = self._committed((topic, p))
            else:
                self.positions[(topic, p)] = self.bus.end(topic, p)

    def unassign(self, topic: str, partitions: Sequence[int] | None = None) -> None:
        for tp in [tp for tp in self.positions if tp[0] == topic]:
            if partitions is None or tp[1] in partitions:
                del self.positions[tp]

    def _rebalance(self) -> None:
        while self.rebalances:
            gained, partitions = self.rebalances.popleft()
            callback = self._on_assign if gained else self._on_revoke
            if callback is not None:
                callback(partitions)  # then the library (un)assigns, as librdkafka does
            for tp in partitions:
                if gained:
                    self._subscribed.append(tp)
                    self.positions[tp] = self._committed(tp)
                elif tp in self._subscribed:
                    self._subscribed.remove(tp)
                    self.positions.pop(tp, None)

    def poll(self, timeout_s: float = 1.0) -> Message | None:
        assert not self.closed, "poll after close"
        self._rebalance()
        for tp in sorted(self.positions):
            if self.positions[tp] < self.bus.end(*tp):
                offset = self.positions[tp]
                self.positions[tp] = offset + 1
                return self.bus.message(tp[0], tp[1], offset)
        return None

    def commit(self, message: Message | None = None) -> None:
        if self.group_id is None:
            raise BusError("this consumer has no group id: there is nothing to commit to")
        if message is not None:
            self.bus.committed[(self.group_id, message.topic, message.partition)] = message.offset + 1
            return
        for tp, offset in self.positions.items():
            self.bus.committed[(self.group_id, *tp)] = offset

    def seek_to_committed(self, timeout_s: float = 10.0) -> None:
        for tp in self.positions:
            self.positions[tp] = self._committed(tp)

    def close(self) -> None:
        if self.closed:
            return
        if self._subscribed and self._on_revoke is not None:
            self._on_revoke(list(self._subscribed))  # leaving the group revokes everything
        if self.group_id is not None and self in self.bus.members.get(self.group_id, []):
            self.bus.members[self.group_id].remove(self)
        self.positions.clear()
        self._subscribed.clear()
        self.closed = True


@dataclass
class _Pending:
    topic: str
    partition: int
    entry: _Entry
    on_delivery: DeliveryCallback | None


class MemoryProducer:
    def __init__(self, bus: MemoryBus, transactional_id: str | None) -> None:
        self.bus = bus
        self.transactional_id = transactional_id
        self.transactions: list[list[tuple[str, Record | None]]] = []  # committed ones, what each sent
        self.aborted = 0
        self._open: list[_Pending] | None = None
        self._offsets: list[tuple[str, dict[_TP, int]]] = []  # (group, positions) sent in the transaction
        self._deliveries: list[tuple[DeliveryCallback, BusError | None]] = []
        self.fenced = False
        self.closed = False

    def _check(self, what: str) -> None:
        if self.fenced:
            raise BusError(f"{what}: PRODUCER_FENCED", fatal=True, fenced=True)
        if self.bus.refuse is not None:
            raise self.bus.refuse

    def _produce(self, topic: str, pending: _Pending) -> None:
        self._check(f"produce to {topic}")
        if self.transactional_id is not None:
            assert self._open is not None, "a transactional producer sends inside a transaction"
            self._open.append(pending)
            return
        self.bus.append(topic, pending.partition, pending.entry)
        if pending.on_delivery is not None:
            self._deliveries.append((pending.on_delivery, None))

    def send(
        self,
        topic: str,
        key: str | None,
        record: Mapping[str, Any],
        *,
        headers: Mapping[str, str] | None = None,
        partition: int | None = None,
        on_delivery: DeliveryCallback | None = None,
    ) -> None:
        entry = _Entry(key, self.bus.encode(topic, record), tuple((headers or {}).items()))
        self._produce(
            topic, _Pending(topic, self.bus.partition_of(topic, key, partition), entry, on_delivery)
        )

    def send_tombstone(self, topic: str, key: str) -> None:
        entry = _Entry(key, None, ())
        self._produce(topic, _Pending(topic, self.bus.partition_of(topic, key, None), entry, None))

    def send_dead_letter(self, message: Message, reason: str) -> None:
        value = message.raw
        if value is None and message.value is not None:
            value = self.bus.encode(message.topic, message.value)
        headers = tuple(message.headers) + tuple(
            (k, v.decode()) for k, v in provenance(reason, message.topic, message.partition, message.offset)
        )
        entry = _Entry(message.key, value, headers)
        self._produce(
            DLQ_TOPIC, _Pending(DLQ_TOPIC, self.bus.partition_of(DLQ_TOPIC, message.key, None), entry, None)
        )

    def poll(self, timeout_s: float = 0.0) -> None:
        if self.bus.hold:
            return
        deliveries, self._deliveries = self._deliveries, []
        for callback, error in deliveries:
            callback(error)

    def fail_deliveries(self, error: BusError) -> None:
        """The broker gave up on every record not acknowledged yet: their callbacks get ``error``."""
        self._deliveries = [(callback, error) for callback, _ in self._deliveries]

    def init_transactions(self, timeout_s: float | None = None) -> None:
        assert self.transactional_id is not None
        self._check("init_transactions")
        previous = self.bus._transactional.get(self.transactional_id)
        if previous is not None and previous is not self:
            previous.fenced, previous._open = True, None  # its open transaction is aborted
        self.bus._transactional[self.transactional_id] = self

    def begin(self) -> None:
        self._check("begin_transaction")
        assert self._open is None, "a transaction is already open"
        self._open, self._offsets = [], []

    def send_offsets(self, consumer: Any, timeout_s: float | None = None) -> None:
        assert self._open is not None and isinstance(consumer, MemoryConsumer)
        assert consumer.group_id is not None, "only a group's positions can be committed"
        self._offsets.append((consumer.group_id, dict(consumer.positions)))

    def commit(self, timeout_s: float | None = None) -> None:
        self._check("commit_transaction")
        assert self._open is not None, "no transaction to commit"
        sent: list[tuple[str, Record | None]] = []
        for pending in self._open:
            self.bus.append(pending.topic, pending.partition, pending.entry)
            value = pending.entry.value
            decoded = None if value is None or pending.topic == DLQ_TOPIC else self.bus.codec.decode(value)[1]
            sent.append((pending.topic, decoded))
            if pending.on_delivery is not None:
                self._deliveries.append((pending.on_delivery, None))
        for group_id, positions in self._offsets:
            for (topic, partition), offset in positions.items():
                self.bus.committed[(group_id, topic, partition)] = offset
        self.transactions.append(sent)
        self._open, self._offsets = None, []

    def abort(self, timeout_s: float | None = None) -> None:
        self._open, self._offsets = None, []
        self.aborted += 1

    def close(self, timeout_s: float = 30.0) -> None:
        self.closed = True
