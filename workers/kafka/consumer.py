"""TypedConsumer: decoded records out, undecodable ones to the dlq, explicit synchronous commits.

Both wire forms are read (single-object; Confluent with ``Settings.schema_registry_url``): a topic
may hold both while a fleet switches. A writer schema the registry cannot give now is not the
record's fault: the record is read again on the next poll, never dead-lettered.

Offsets: every record ``poll`` hands out (or dead-letters) is *stored* by librdkafka;
``commit()`` commits what is stored, ``commit(message)`` commits up to that message, and a
transaction (``workers.kafka.transaction``) commits the positions. A dead-lettered
record is committed at once when no handed-out record before it awaits a commit (so a
commit can never skip unprocessed work); otherwise the next commit covers it.

Like librdkafka's consumer, one instance is used from one thread at a time.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from confluent_kafka import (
    OFFSET_BEGINNING,
    OFFSET_STORED,
    TIMESTAMP_NOT_AVAILABLE,
    KafkaError,
    KafkaException,
    TopicPartition,
)
from confluent_kafka import Consumer as RawConsumer
from confluent_kafka import Message as RawMessage

from workers.codec import Codec, DecodeError, Record, get_codec
from workers.config import Settings
from workers.kafka.clients import lazy_consumer
from workers.kafka.deadletter import DeadLetterQueue, DeadLetterSink, undecodable
from workers.kafka.errors import BusError
from workers.kafka.messages import Message, header_text, raw_headers
from workers.kafka.registry import SchemaRegistry, registry_for
from workers.kafka.retry import WATERMARK_RETRY, RetryPolicy
from workers.topics import TopicSpec, logical_name, topic_spec

log = logging.getLogger(__name__)
Partitions = list[tuple[str, int]]  # (logical topic, partition)
# An end-offset query goes to the partition leader this client knows and waits there: while that broker is
# down, until this timeout or until metadata without the broker drops its handle (_DESTROY_BROKER); and
# after a kill the live brokers name the dead one leader until it is fenced (broker.session.timeout.ms).
# So attempts are short (a live leader answers in milliseconds), each failed one refreshing the metadata
# (measured: a reader's end offsets ~20 s after a broker kill with 10 s attempts; see issue 11).
WATERMARK_ATTEMPT_S = 2.0
RebalanceCallback = Callable[[Partitions], None]
_TP = tuple[str, int]  # (physical topic, partition)
_RawCallback = Callable[[RawConsumer, list[TopicPartition]], None]

__all__ = ["Partitions", "RebalanceCallback", "TypedConsumer"]


class TypedConsumer:
    """A consumer of logical topics. ``group_id=None`` makes a reader that never commits
    (librdkafka still needs a group id: a throwaway one is used)."""

    def __init__(
        self,
        settings: Settings,
        group_id: str | None = None,
        *,
        dead_letters: bool = True,
        config: Mapping[str, str] | None = None,
        codec: Codec | None = None,
        dlq_producer: DeadLetterSink | None = None,
        registry: SchemaRegistry | None = None,
    ) -> None:
        self.settings = settings
        self.group_id = group_id
        self._dead_letters = dead_letters
        throwaway = f"{settings.namespace}.reader.{uuid.uuid4().hex}"
        self._client = lazy_consumer(settings, group_id or throwaway, config)
        self._codec = codec
        registry = registry or registry_for(settings)
        self._schemas = None if registry is None else registry.schema_for
        self._dlq = DeadLetterQueue(settings, dlq_producer)
        self._pending: dict[_TP, int] = {}  # next offset after the last handed-out, uncommitted record
        self._consumed: dict[_TP, int] = {}  # next offset after the last record polled (incl. dead-lettered)
        self._eof: dict[_TP, int] = {}  # end offsets reported by enable.partition.eof
        self._specs: dict[str, TopicSpec] = {}  # physical topic -> its declaration

    @property
    def codec(self) -> Codec:
        if self._codec is None:
            self._codec = get_codec()
        return self._codec

    def _logical(self, physical: str) -> str:
        return logical_name(self.settings, physical)

    def _spec(self, physical: str) -> TopicSpec:
        """The declaration of a physical topic, looked up once (the poll path is hot)."""
        spec = self._specs.get(physical)
        if spec is None:
            spec = self._specs[physical] = topic_spec(logical_name(self.settings, physical))
        return spec

    def _to_logical(self, partitions: Sequence[TopicPartition]) -> Partitions:
        return [(self._logical(tp.topic), tp.partition) for tp in partitions]

    def _forget(self, partitions: Sequence[TopicPartition]) -> None:
        for tp in partitions:
            for state in (self._pending, self._consumed, self._eof):
                state.pop((tp.topic, tp.partition), None)

    # -- assignment ----------------------------------------------------------------------

    def subscribe(
        self,
        topics: Sequence[str],
        on_assign: RebalanceCallback | None = None,
        on_revoke: RebalanceCallback | None = None,
        on_lost: RebalanceCallback | None = None,
    ) -> None:
        """Join the group for ``topics``. Callbacks run inside ``poll`` with the partitions
        gained or lost (incremental with both group protocols); the library (un)assigns them
        after the callback returns. ``on_lost`` defaults to ``on_revoke``."""

        def wrap(callback: RebalanceCallback | None, leaving: bool) -> _RawCallback:
            def handler(_: RawConsumer, partitions: list[TopicPartition]) -> None:
                if callback is not None:
                    callback(self._to_logical(partitions))
                if leaving:
                    self._forget(partitions)

            return handler

        physical = [self.settings.topic(topic_spec(t).name) for t in topics]
        self._client.get().subscribe(
            physical,
            on_assign=wrap(on_assign, False),
            on_revoke=wrap(on_revoke, True),
            on_lost=wrap(on_lost or on_revoke, True),
        )

    def assign(self, topic: str, partitions: Sequence[int], from_beginning: bool = False) -> None:
        """Add partitions by hand. Start: the beginning if asked, else the group's committed
        offset (``auto.offset.reset`` when there is none), else (no group) the end as of now:
        taken before returning, so a record produced after ``assign`` returns is never missed."""
        if from_beginning:
            self.assign_at(topic, {p: OFFSET_BEGINNING for p in partitions})
        elif self.group_id:
            self.assign_at(topic, {p: OFFSET_STORED for p in partitions})
        else:
            ends = self.end_offsets(topic, partitions)
            self.assign_at(topic, {p: high for p, (_, high) in ends.items()})

    def assign_at(self, topic: str, offsets: Mapping[int, int]) -> None:
        """Add partitions starting at the given offsets (or OFFSET_BEGINNING / OFFSET_END / ...)."""
        physical = self.settings.topic(topic_spec(topic).name)
        self._client.get().incremental_assign([TopicPartition(physical, p, o) for p, o in offsets.items()])

    def unassign(self, topic: str, partitions: Sequence[int] | None = None) -> None:
        """Drop hand-assigned partitions of ``topic`` (all of them by default)."""
        consumer = self._client.get()
        physical = self.settings.topic(topic)
        drop = [
            TopicPartition(tp.topic, tp.partition)
            for tp in consumer.assignment()
            if tp.topic == physical and (partitions is None or tp.partition in partitions)
        ]
        if drop:
            consumer.incremental_unassign(drop)
            self._forget(drop)

    def assignment(self) -> Partitions:
        return self._to_logical(self._client.get().assignment())

    # -- consuming -----------------------------------------------------------------------

    def poll(self, timeout_s: float = 1.0) -> Message | None:
        """The next record, or None when none came within ``timeout_s``. Rebalance callbacks
        run in here; undecodable records go to the dlq and are skipped."""
        consumer = self._client.get()
        deadline = time.monotonic() + max(0.0, timeout_s)
        while True:
            raw = consumer.poll(max(0.0, deadline - time.monotonic()))
            if raw is not None:
                error = raw.error()
                if error is not None:
                    self._on_error(raw, error)
                else:
                    message = self._accept(raw)
                    if message is not None:
                        return message
            if time.monotonic() >= deadline:
                return None

    def _on_error(self, raw: RawMessage, error: KafkaError) -> None:
        if error.code() == KafkaError._PARTITION_EOF:
            self._eof[(str(raw.topic()), int(raw.partition() or 0))] = int(raw.offset() or 0)
            return
        if error.fatal():
            raise BusError.from_kafka("consumer", error)
        # Broker down, topic not there yet...: librdkafka keeps retrying by itself.
        log.warning("consumer: %s", BusError.from_kafka(str(raw.topic() or ""), error))

    def _accept(self, raw: RawMessage) -> Message | None:
        tp = (str(raw.topic()), int(raw.partition() or 0))
        offset = int(raw.offset() or 0)
        self._consumed[tp] = offset + 1
        try:
            decoded = self._decode(raw)
        except BusError:
            self._read_again(tp, offset)  # the registry is away: not lost, not dead-lettered
            raise
        if isinstance(decoded, Message):
            self._pending[tp] = offset + 1
            return decoded
        if not self._dead_letters:
            self._pending[tp] = offset + 1
            return self._message(raw, value=None, record_type=None, raw_value=raw.value(), error=decoded)
        self._dead_letter(raw, decoded)
        return None

    def _message(
        self,
        raw: RawMessage,
        *,
        value: Record | None,
        record_type: str | None,
        raw_value: bytes | None = None,
        error: str | None = None,
    ) -> Message:
        key = raw.key()
        ts_type, ts = raw.timestamp()
        return Message(
            topic=self._logical(str(raw.topic())),
            partition=int(raw.partition() or 0),
            offset=int(raw.offset() or 0),
            key=None if key is None else key.decode(errors="replace"),
            value=value,
            record_type=record_type,
            headers=tuple((k, header_text(v)) for k, v in raw_headers(raw)),
            timestamp=None if ts_type == TIMESTAMP_NOT_AVAILABLE else ts,
            raw=raw_value,
            error=error,
        )

    def _decode(self, raw: RawMessage) -> Message | str:
        """The message, or why it cannot be handed to role code."""
        key = raw.key()
        if key is not None:
            try:
                key.decode()
            except UnicodeDecodeError:
                return "key is not UTF-8"
        spec = self._spec(str(raw.topic()))
        value = raw.value()
        if value is None:
            return self._message(raw, value=None, record_type=None)  # tombstone
        if spec.value_schema is None:
            return self._message(raw, value=None, record_type=None, raw_value=value)
        try:
            record_type, record = self.codec.decode(value, self._schemas)
        except DecodeError as exc:
            return exc.reason
        if record_type != spec.value_schema:
            return f"{record_type} does not belong on topic {spec.name} (expects {spec.value_schema})"
        return self._message(raw, value=record, record_type=record_type)

    def _read_again(self, tp: _TP, offset: int) -> None:
        """Not lost: the next poll reads the record at ``offset`` again."""
        self._client.get().seek(TopicPartition(tp[0], tp[1], offset))
        self._consumed[tp] = offset

    def _dead_letter(self, raw: RawMessage, reason: str) -> None:
        topic, partition, offset = str(raw.topic()), int(raw.partition() or 0), int(raw.offset() or 0)
        try:
            self._dlq.put(undecodable(raw, reason))
        except BusError:
            self._read_again((topic, partition), offset)
            raise
        log.warning("dead-lettered %s[%d]@%d: %s", topic, partition, offset, reason)
        if self.group_id and (topic, partition) not in self._pending:
            try:
                self._commit([TopicPartition(topic, partition, offset + 1)])
            except BusError as exc:
                # Still stored: the next commit covers it (or it is dead-lettered once more).
                log.warning("could not commit past the dead letter: %s", exc)

    # -- offsets -------------------------------------------------------------------------

    def _commit(self, offsets: list[TopicPartition] | None) -> None:
        if not self.group_id:
            raise BusError("this consumer has no group id: there is nothing to commit to")
        consumer = self._client.get()
        try:
            if offsets is None:
                result = consumer.commit(asynchronous=False)
            else:
                result = consumer.commit(offsets=offsets, asynchronous=False)
        except KafkaException as exc:
            error = BusError.from_kafka("commit", exc)
            if error.code == "_NO_OFFSET":
                return  # nothing new since the last commit
            raise error from exc
        for tp in result or []:
            if tp.error is not None:
                raise BusError.from_kafka(f"commit {tp.topic}[{tp.partition}]", tp.error)

    def commit(self, message: Message | None = None) -> None:
        """Synchronously commit everything polled so far, or up to and including ``message``."""
        if message is None:
            self._commit(None)
            self._pending.clear()
            return
        tp = (self.settings.topic(message.topic), message.partition)
        offset = message.offset + 1
        if self._pending.get(tp) == offset:
            offset = max(offset, self._consumed.get(tp, offset))  # also covers dead letters after it
        self._commit([TopicPartition(tp[0], tp[1], offset)])
        if self._pending.get(tp, 0) <= offset:
            self._pending.pop(tp, None)

    def raw_positions(self) -> list[TopicPartition]:
        """Positions of the assigned partitions that have one (for transactional commits)."""
        consumer = self._client.get()
        return [tp for tp in consumer.position(consumer.assignment()) if tp.offset >= 0]

    def group_metadata(self) -> Any:
        return self._client.get().consumer_group_metadata()

    def mark_committed(self) -> None:
        """Called by a transaction that committed this consumer's positions."""
        self._pending.clear()

    def uncommitted(self) -> Partitions:
        """Partitions with records handed out since their last commit."""
        return [(self._logical(topic), partition) for topic, partition in sorted(self._pending)]

    def committed(
        self, topic: str, partitions: Sequence[int], timeout_s: float = 10.0
    ) -> dict[int, int | None]:
        """The group's committed offset per partition of ``topic`` (None: nothing committed)."""
        physical = self.settings.topic(topic_spec(topic).name)
        try:
            found = self._client.get().committed([TopicPartition(physical, p) for p in partitions], timeout_s)
        except KafkaException as exc:
            raise BusError.from_kafka("committed offsets", exc) from exc
        return {tp.partition: tp.offset if tp.offset >= 0 else None for tp in found}

    def seek_to_committed(self, timeout_s: float = 10.0) -> None:
        """Rewind every assigned partition to its committed offset (after an aborted transaction)."""
        consumer = self._client.get()
        try:
            committed = consumer.committed(consumer.assignment(), timeout_s)
        except KafkaException as exc:
            raise BusError.from_kafka("committed offsets", exc) from exc
        for tp in committed:
            offset = tp.offset if tp.offset >= 0 else OFFSET_BEGINNING  # none committed: reset policy
            consumer.seek(TopicPartition(tp.topic, tp.partition, offset))
        self._pending.clear()

    def end_offsets(
        self, topic: str, partitions: Sequence[int] | None = None, *, retry: RetryPolicy = WATERMARK_RETRY
    ) -> dict[int, tuple[int, int]]:
        """(low, high) per partition; high is the last stable offset (read_committed)."""
        consumer = self._client.get()
        physical = self.settings.topic(topic_spec(topic).name)
        if partitions is None:
            partitions = sorted(retry.call(lambda: self._partitions(physical)))

        def watermarks(partition: int) -> tuple[int, int]:
            tp = TopicPartition(physical, partition)
            try:
                return consumer.get_watermark_offsets(tp, WATERMARK_ATTEMPT_S, False)
            except KafkaException as exc:
                # The leader may have died: the next attempt asks the one fresh metadata names
                # (see WATERMARK_ATTEMPT_S; librdkafka#2535).
                with contextlib.suppress(KafkaException):
                    consumer.list_topics(physical, 5.0)
                error = BusError.from_kafka(f"watermarks of {physical}[{partition}]", exc)
                # A partition the metadata listed, unknown to this client's own cache for a moment
                # (CI, session 28: `mvs history` right after a topic's metadata was read): it catches up.
                error.retriable = error.retriable or error.code == "_UNKNOWN_PARTITION"
                raise error from exc

        return {p: retry.call(functools.partial(watermarks, p)) for p in partitions}

    def _partitions(self, physical: str) -> list[int]:
        metadata = self._client.get().list_topics(physical, 10.0)
        topic = metadata.topics.get(physical)
        if topic is None:
            raise BusError(f"no topic {physical}", retriable=True)
        if topic.error is not None:
            raise BusError.from_kafka(f"metadata of {physical}", topic.error)
        return list(topic.partitions)

    def eof_offset(self, topic: str, partition: int) -> int | None:
        """Where the last end-of-partition event (``enable.partition.eof``) was seen."""
        return self._eof.get((self.settings.topic(topic), partition))

    # -- lifecycle -----------------------------------------------------------------------

    def close(self) -> None:
        """Leave the group (revoke callbacks run) and release the clients."""
        consumer = self._client.reset()
        if consumer is not None:
            consumer.close()
        self._dlq.close()

    def __enter__(self) -> TypedConsumer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
