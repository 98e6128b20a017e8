"""TypedProducer: records in, Avro single-object bytes out, optionally in Kafka transactions."""

from __future__ import annotations

import functools
import logging
import threading
import time
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from confluent_kafka import KafkaError, KafkaException
from confluent_kafka import Message as RawMessage

from workers.codec import Codec, get_codec
from workers.config import Settings
from workers.kafka.clients import lazy_producer
from workers.kafka.errors import BusError
from workers.kafka.messages import DLQ_TOPIC, Message, dead_letter_headers
from workers.kafka.retry import TXN_RETRY, RetryPolicy
from workers.topics import topic_spec

if TYPE_CHECKING:
    from workers.kafka.consumer import TypedConsumer

log = logging.getLogger(__name__)
RawHeaders = list[tuple[str, str | bytes | None]]
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
    ) -> None:
        self.settings = settings
        self.transactional_id = transactional_id
        self._client = lazy_producer(settings, transactional_id=transactional_id, extra=config)
        self._codec = codec
        self._txn_retry = txn_retry
        self._txn_timeout_s = txn_timeout_s
        self._errors: list[BusError] = []
        self._errors_lock = threading.Lock()
        self._offsets_sent: list[TypedConsumer] = []

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
        schema = topic_spec(topic).value_schema
        if schema is None:
            raise TypeError(f"topic {topic!r} has no value schema; it takes raw bytes only")
        value = self.codec.encode(schema, record)
        raw_headers: RawHeaders = [(k, v.encode()) for k, v in (headers or {}).items()]
        self.produce_raw(
            topic,
            None if key is None else key.encode(),
            value,
            raw_headers,
            partition=partition,
            on_delivery=on_delivery,
        )

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
        producer = self._client.get()
        physical = self.settings.topic(topic_spec(topic).name)
        callback = functools.partial(self._delivered, on_delivery)
        deadline = time.monotonic() + QUEUE_FULL_WAIT_S
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
        spec = topic_spec(message.topic)
        value: bytes | None = message.raw
        if value is None and message.value is not None and spec.value_schema is not None:
            try:
                value = self.codec.encode(spec.value_schema, message.value)
            except Exception:  # the record is what could not be handled: keep what can be kept
                value = repr(message.value).encode()
        headers: RawHeaders = [(k, v.encode()) for k, v in message.headers]
        headers += dead_letter_headers(
            reason, self.settings.topic(spec.name), message.partition, message.offset
        )
        key = None if message.key is None else message.key.encode()
        self.produce_raw(DLQ_TOPIC, key, value, headers)

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

    # -- transactions --------------------------------------------------------------------

    def _txn(self, what: str, call: Any, *args: Any) -> None:
        if not self.transactional_id:
            raise BusError(f"{what}: producer has no transactional.id")
        try:
            call(*args)
        except KafkaException as exc:
            raise BusError.from_kafka(f"{what} ({self.transactional_id})", exc) from exc

    def init_transactions(self, timeout_s: float | None = None) -> None:
        """Register the transactional id, fencing any older producer that used it (and aborting
        a transaction it left open)."""
        producer = self._client.get()
        timeout = self._txn_timeout_s if timeout_s is None else timeout_s
        self._txn_retry.call(lambda: self._txn("init_transactions", producer.init_transactions, timeout))

    def begin(self) -> None:
        self._offsets_sent.clear()
        self._txn("begin_transaction", self._client.get().begin_transaction)

    def send_offsets(self, consumer: TypedConsumer, timeout_s: float | None = None) -> None:
        """Commit ``consumer``'s current positions as part of this transaction."""
        positions = consumer.raw_positions()
        if not positions:
            return
        metadata = consumer.group_metadata()
        producer = self._client.get()
        send = producer.send_offsets_to_transaction
        timeout = self._txn_timeout_s if timeout_s is None else timeout_s
        self._txn("send_offsets_to_transaction", send, positions, metadata, timeout)
        self._offsets_sent.append(consumer)

    def commit(self, timeout_s: float | None = None) -> None:
        """Commit the transaction; ``BusError.abort_required`` means: ``abort()`` and redo it."""
        producer = self._client.get()
        timeout = self._txn_timeout_s if timeout_s is None else timeout_s
        self._txn_retry.call(lambda: self._txn("commit_transaction", producer.commit_transaction, timeout))
        with self._errors_lock:
            self._errors.clear()  # deliveries of a committed transaction all succeeded
        for consumer in self._offsets_sent:
            consumer.mark_committed()
        self._offsets_sent.clear()

    def abort(self, timeout_s: float | None = None) -> None:
        """Abort the transaction: its records are never seen by read_committed consumers."""
        producer = self._client.get()
        timeout = self._txn_timeout_s if timeout_s is None else timeout_s
        self._txn_retry.call(lambda: self._txn("abort_transaction", producer.abort_transaction, timeout))
        with self._errors_lock:
            self._errors.clear()
        self._offsets_sent.clear()

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
