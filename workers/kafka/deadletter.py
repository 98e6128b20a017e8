"""Dead letters: records that cannot be handled, kept on the dlq topic with why and where from.

Two kinds: a record a consumer could not decode (its bytes as read, see ``TypedConsumer``) and a
decoded record role code could not handle (``TypedProducer.send_dead_letter``, re-encoded, inside
the role's transaction). Both carry their own headers plus the ``mvs.error`` / ``mvs.source.*`` ones.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from confluent_kafka import KafkaError
from confluent_kafka import Message as RawMessage

from workers.config import Settings
from workers.kafka.clients import lazy_producer
from workers.kafka.errors import BusError
from workers.kafka.messages import Message, RawHeaders, raw_headers
from workers.topics import topic_spec

log = logging.getLogger(__name__)
DLQ_TOPIC = "dlq"
H_ERROR = "mvs.error"
H_TOPIC, H_PARTITION, H_OFFSET = "mvs.source.topic", "mvs.source.partition", "mvs.source.offset"
# How long a consumer waits for the broker to take a dead letter before reading the record again.
PUT_TIMEOUT_S = 30.0


@dataclass(frozen=True)
class DeadLetter:
    key: bytes | None
    value: bytes | None
    headers: RawHeaders


def provenance(reason: str, physical_topic: str, partition: int, offset: int) -> RawHeaders:
    """The headers a dead letter carries besides its own: why, and where it was read."""
    return [
        (H_ERROR, reason.encode()),
        (H_TOPIC, physical_topic.encode()),
        (H_PARTITION, str(partition).encode()),
        (H_OFFSET, str(offset).encode()),
    ]


def undecodable(raw: RawMessage, reason: str) -> DeadLetter:
    """A record as read, that could not be decoded for role code."""
    where = provenance(reason, str(raw.topic()), int(raw.partition() or 0), int(raw.offset() or 0))
    return DeadLetter(raw.key(), raw.value(), raw_headers(raw) + where)


def unhandled(
    message: Message,
    reason: str,
    settings: Settings,
    encode: Callable[[str, Mapping[str, Any]], bytes],
) -> DeadLetter:
    """A decoded record role code could not handle, re-encoded as ``encode(topic, record)`` writes
    it to its topic (or its repr, if even that fails)."""
    spec = topic_spec(message.topic)
    value: bytes | None = message.raw
    if value is None and message.value is not None and spec.value_schema is not None:
        try:
            value = encode(message.topic, message.value)
        except BusError:
            raise  # the bus (or its schema registry) is away, not the record's fault: try again
        except Exception:  # the record is what could not be handled: keep what can be kept
            value = repr(message.value).encode()
    headers: RawHeaders = [(k, v.encode()) for k, v in message.headers]
    headers += provenance(reason, settings.topic(spec.name), message.partition, message.offset)
    key = None if message.key is None else message.key.encode()
    return DeadLetter(key, value, headers)


class DeadLetterSink(Protocol):
    """Where a consumer's dead letters go when it is given a producer (``TypedProducer`` is one)."""

    def produce_raw(
        self, topic: str, key: bytes | None, value: bytes | None, headers: RawHeaders | None = None
    ) -> None: ...

    def flush(self, timeout_s: float = ...) -> None: ...


class DeadLetterQueue:
    """A consumer's dlq: ``put`` returns once the broker has the letter, or raises ``BusError``.

    Without a ``sink`` it opens its own (idempotent) producer on the first letter."""

    def __init__(self, settings: Settings, sink: DeadLetterSink | None = None) -> None:
        self._settings = settings
        self._sink = sink
        self._own = lazy_producer(settings) if sink is None else None

    def put(self, letter: DeadLetter) -> None:
        if self._sink is not None:
            self._sink.produce_raw(DLQ_TOPIC, letter.key, letter.value, letter.headers)
            self._sink.flush()
            return
        assert self._own is not None
        producer = self._own.get()
        physical = self._settings.topic(DLQ_TOPIC)
        failures: list[KafkaError] = []

        def delivered(err: KafkaError | None, _: Any) -> None:
            if err is not None:
                failures.append(err)

        try:
            producer.produce(
                physical, value=letter.value, key=letter.key, headers=letter.headers, on_delivery=delivered
            )
            left = producer.flush(PUT_TIMEOUT_S)
        except Exception as exc:  # KafkaException, BufferError, SystemError of a fatally failed producer
            raise BusError.from_kafka(f"dead letter to {physical}", exc) from exc
        if failures:
            raise BusError.from_kafka(f"dead letter to {physical}", failures[0])
        if left:
            late = f"dead letter to {physical}: not delivered within {PUT_TIMEOUT_S}s"
            raise BusError(late, retriable=True)

    def close(self) -> None:
        """Release the producer this queue opened (a given sink is its owner's to close)."""
        if self._own is not None:
            producer = self._own.reset()
            try:
                if producer is not None:
                    producer.flush(PUT_TIMEOUT_S)  # each put flushed already: nothing is waiting
            except Exception as exc:  # a fatally failed producer's flush raises
                log.warning("dead-letter producer closed without flushing: %s", exc)
