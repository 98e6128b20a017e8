"""TypedProducer: records in, Avro bytes out (single-object encoding, or the Confluent wire format
with a schema registry), optionally in Kafka transactions."""

from __future__ import annotations

import functools
import logging
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

from confluent_kafka import KafkaError, KafkaException
from confluent_kafka import Message as RawMessage

from workers.codec import Codec, get_codec
from workers.config import Settings
from workers.kafka.clients import lazy_producer
from workers.kafka.deadletter import DLQ_TOPIC, unhandled
from workers.kafka.errors import BusError
from workers.kafka.messages import Message, RawHeaders
from workers.kafka.registry import SchemaRegistry, registry_for, value_subject
from workers.kafka.retry import TXN_RETRY, RetryPolicy
from workers.kafka.transaction import OffsetSource, Transaction
from workers.topics import topic_spec

log = logging.getLogger(__name__)
# Called (from ``poll``/``flush``, on the caller's thread) with None once a record is acknowledged,
# or with the error that made librdkafka give up on it.
DeliveryCallback = Callable[[BusError | None], None]
# How long ``produce`` waits for room when librdkafka's local queue is full before giving up (the
# caller keeps the record): never long enough to hold a role's loop.
QUEUE_FULL_WAIT_S = 1.0
# For records that must not be lost (run records): librdkafka keeps them until the broker takes them,
# however long it is away (0 = no local timeout; idempotence keeps their order and sends each once).
NEVER_TIME_OUT = {"message.timeout.ms": "0"}


class TypedProducer:
    """Sends records to logical topics; the record type comes from the topic declaration.

    Not thread-safe for transactions (one transaction at a time, like librdkafka); ``send``
    and ``flush`` may be called from several threads of a non-transactional producer.
    """

    def __init__(
        self,
        settings: Settings,
        *,
        transactional_id: str | None = None,
        config: Mapping[str, str] | None = None,
        codec: Codec | None = None,
        txn_retry: RetryPolicy = TXN_RETRY,
        txn_timeout_s: float = 30.0,
        registry: SchemaRegistry | None = None,
    ) -> None:
        self.settings = settings
        self.transactional_id = transactional_id
        self._client = lazy_producer(settings, transactional_id=transactional_id, extra=config)
        self._codec = codec
        # With a registry every value is Confluent-framed; without one, single-object encoded.
        self._registry = registry or registry_for(settings)
        self.transaction = Transaction(
            self._client, transactional_id, retry=txn_retry, timeout_s=txn_timeout_s
        )
        self._errors: list[BusError] = []
        self._errors_lock = threading.Lock()
        self._routes: dict[str, tuple[str, str | None]] = {}  # logical -> (physical, value schema)
        self._collect_delivery_error = functools.partial(self._delivered, None)

    @property
    def codec(self) -> Codec:
        if self._codec is None:
            self._codec = get_codec()
        return self._codec

    # -- sending -------------------------------------------------------------------------

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
        """Encode ``record`` as the topic's value schema and queue it (``flush`` waits for it).

        ``partition`` overrides the key's partition (a command broadcast to every owner).
        ``on_delivery`` gets the record's outcome instead of ``flush`` raising its error."""
        physical = self._route(topic)[0]
        value = self.encode_value(topic, record)
        raw_headers: RawHeaders | None = [(k, v.encode()) for k, v in headers.items()] if headers else None
        encoded_key = None if key is None else key.encode()
        self._produce(physical, encoded_key, value, raw_headers, partition, on_delivery)

    def encode_value(self, topic: str, record: Mapping[str, Any]) -> bytes:
        """``record`` as the bytes ``send`` writes to ``topic``. With a registry, the schema's id is
        looked up once per process (a registry away: a retriable ``BusError`` after
        ``REGISTRY_RETRY``, nothing queued, the caller keeps the record)."""
        physical, schema = self._route(topic)
        if schema is None:
            raise TypeError(f"topic {topic!r} has no value schema; it takes raw bytes only")
        if self._registry is None:
            return self.codec.encode(schema, record)
        schema_id = self._registry.id_for(value_subject(physical), self.codec.schema_json(schema))
        return self.codec.encode(schema, record, schema_id)

    def send_tombstone(self, topic: str, key: str) -> None:
        """A null value for ``key``: deletes it from a compacted topic (the catalog)."""
        self.produce_raw(topic, key.encode(), None)

    def produce_raw(
        self,
        topic: str,
        key: bytes | None,
        value: bytes | None,
        headers: RawHeaders | None = None,
        *,
        partition: int | None = None,
        on_delivery: DeliveryCallback | None = None,
    ) -> None:
        """Queue bytes as they are (the dlq, tombstones); role code uses ``send``. Raises a
        retriable ``BusError`` if librdkafka's queue stays full for ``QUEUE_FULL_WAIT_S``."""
        self._produce(self._route(topic)[0], key, value, headers, partition, on_delivery)

    def _route(self, topic: str) -> tuple[str, str | None]:
        """(physical name, value schema) of a logical topic, looked up once (the send path is hot)."""
        route = self._routes.get(topic)
        if route is None:
            spec = topic_spec(topic)
            route = self._routes[topic] = (self.settings.topic(spec.name), spec.value_schema)
        return route

    def _produce(
        self,
        physical: str,
        key: bytes | None,
        value: bytes | None,
        headers: RawHeaders | None,
        partition: int | None,
        on_delivery: DeliveryCallback | None,
    ) -> None:
        producer = self._client.get()
        if on_delivery is None:
            callback = self._collect_delivery_error
        else:
            callback = functools.partial(self._delivered, on_delivery)
        deadline = None
        while True:
            try:
                if partition is None:
                    producer.produce(
                        physical, value=value, key=key, headers=headers or None, on_delivery=callback
                    )
                else:
                    producer.produce(
                        physical,
                        value=value,
                        key=key,
                        headers=headers or None,
                        on_delivery=callback,
                        partition=partition,
                    )
                break
            except BufferError as exc:
                deadline = deadline or time.monotonic() + QUEUE_FULL_WAIT_S
                if time.monotonic() >= deadline:
                    raise BusError(f"produce to {physical}: local queue full", retriable=True) from exc
                producer.poll(0.1)  # local queue full: serve deliveries, then try again
            except KafkaException as exc:
                raise BusError.from_kafka(f"produce to {physical}", exc) from exc
        producer.poll(0)

    def _delivered(
        self, on_delivery: DeliveryCallback | None, err: KafkaError | None, msg: RawMessage
    ) -> None:
        error = None
        if err is not None:
            error = BusError.from_kafka(f"delivery to {msg.topic()}[{msg.partition()}]", err)
        if on_delivery is not None:
            on_delivery(error)
        elif error is not None:
            log.error("%s", error)
            with self._errors_lock:
                self._errors.append(error)

    def poll(self, timeout_s: float = 0.0) -> None:
        """Serve delivery callbacks of records acknowledged (or given up on) since the last call."""
        producer = self._client.peek()
        if producer is not None:
            producer.poll(timeout_s)

    def in_flight(self) -> int:
        """Records (and librdkafka requests) not yet acknowledged."""
        producer = self._client.peek()
        return 0 if producer is None else len(producer)

    def send_dead_letter(self, message: Message, reason: str) -> None:
        """Queue ``message`` (re-encoded) on the dlq with why it could not be handled, the way
        ``TypedConsumer`` dead-letters an undecodable record; inside a transaction, if one is open."""
        letter = unhandled(message, reason, self.settings, self.encode_value)
        self.produce_raw(DLQ_TOPIC, letter.key, letter.value, letter.headers)

    def flush(self, timeout_s: float = 30.0) -> None:
        """Wait until every queued record is acknowledged; raise if any was not."""
        producer = self._client.peek()
        if producer is None:
            return
        try:
            remaining = producer.flush(timeout_s)
        except SystemError as exc:
            # librdkafka's flush on a producer that failed fatally (e.g. the broker refused an
            # idempotent producer id: no WRITE anywhere) raises SystemError; the delivery errors say why.
            with self._errors_lock:
                errors, self._errors = self._errors, []
            cause = str(errors[0]) if errors else f"{type(exc).__name__}: {exc}"
            raise BusError(f"producer failed fatally: {cause}", fatal=True) from exc
        with self._errors_lock:
            errors, self._errors = self._errors, []
        if errors:
            raise errors[0]
        if remaining:
            raise BusError(f"{remaining} record(s) not delivered within {timeout_s}s", retriable=True)

    # -- transactions (see workers.kafka.transaction) -------------------------------------

    def _forget_delivery_errors(self) -> None:
        # After a commit every delivery of the transaction succeeded; after an abort none counts.
        with self._errors_lock:
            self._errors.clear()

    def init_transactions(self, timeout_s: float | None = None) -> None:
        self.transaction.init(timeout_s)

    def begin(self) -> None:
        self.transaction.begin()

    def send_offsets(self, consumer: OffsetSource, timeout_s: float | None = None) -> None:
        """Commit ``consumer``'s current positions as part of this transaction."""
        self.transaction.send_offsets(consumer, timeout_s)

    def commit(self, timeout_s: float | None = None) -> None:
        """Commit the transaction; ``BusError.abort_required`` means: ``abort()`` and redo it."""
        self.transaction.commit(timeout_s)
        self._forget_delivery_errors()

    def abort(self, timeout_s: float | None = None) -> None:
        """Abort the transaction: its records are never seen by read_committed consumers."""
        self.transaction.abort(timeout_s)
        self._forget_delivery_errors()

    # -- lifecycle -----------------------------------------------------------------------

    def close(self, timeout_s: float = 30.0) -> None:
        """Deliver what is queued (best effort, at most ``timeout_s``) and drop the client."""
        producer = self._client.reset()
        if producer is not None:
            try:
                left = producer.flush(timeout_s)
            except Exception as exc:  # a fatally failed producer's flush raises: nothing to deliver
                log.warning("producer closed without flushing: %s", exc)
                return
            if left:
                log.warning("producer closed with %d undelivered record(s)", left)

    def __enter__(self) -> TypedProducer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
