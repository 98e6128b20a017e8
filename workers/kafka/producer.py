"""TypedProducer: records in, Avro single-object bytes out, optionally in Kafka transactions."""

from __future__ import annotations

import logging
import threading
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from confluent_kafka import KafkaError, KafkaException
from confluent_kafka import Message as RawMessage

from workers.codec import Codec, get_codec
from workers.config import Settings
from workers.kafka.clients import lazy_producer
from workers.kafka.errors import BusError
from workers.kafka.retry import TXN_RETRY, RetryPolicy
from workers.topics import topic_spec

if TYPE_CHECKING:
    from workers.kafka.consumer import TypedConsumer

log = logging.getLogger(__name__)
RawHeaders = list[tuple[str, str | bytes | None]]


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
    ) -> None:
        self.settings = settings
        self.transactional_id = transactional_id
        self._client = lazy_producer(settings, transactional_id=transactional_id, extra=config)
        self._codec = codec
        self._txn_retry = txn_retry
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
    ) -> None:
        """Encode ``record`` as the topic's value schema and queue it (``flush`` waits for it).

        ``partition`` overrides the key's partition (a command broadcast to every owner)."""
        schema = topic_spec(topic).value_schema
        if schema is None:
            raise TypeError(f"topic {topic!r} has no value schema; it takes raw bytes only")
        value = self.codec.encode(schema, record)
        raw_headers: RawHeaders = [(k, v.encode()) for k, v in (headers or {}).items()]
        self.produce_raw(
            topic, None if key is None else key.encode(), value, raw_headers, partition=partition
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
    ) -> None:
        """Queue bytes as they are (the dlq, tombstones); role code uses ``send``."""
        producer = self._client.get()
        physical = self.settings.topic(topic_spec(topic).name)
        while True:
            try:
                if partition is None:
                    producer.produce(
                        physical, value=value, key=key, headers=headers or None, on_delivery=self._delivered
                    )
                else:
                    producer.produce(
                        physical,
                        value=value,
                        key=key,
                        headers=headers or None,
                        on_delivery=self._delivered,
                        partition=partition,
                    )
                break
            except BufferError:
                producer.poll(0.1)  # local queue full: serve deliveries, then try again
            except KafkaException as exc:
                raise BusError.from_kafka(f"produce to {physical}", exc) from exc
        producer.poll(0)

    def _delivered(self, err: KafkaError | None, msg: RawMessage) -> None:
        if err is not None:
            error = BusError.from_kafka(f"delivery to {msg.topic()}[{msg.partition()}]", err)
            log.error("%s", error)
            with self._errors_lock:
                self._errors.append(error)

    def flush(self, timeout_s: float = 30.0) -> None:
        """Wait until every queued record is acknowledged; raise if any was not."""
        producer = self._client.peek()
        if producer is None:
            return
        remaining = producer.flush(timeout_s)
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

    def init_transactions(self, timeout_s: float = 30.0) -> None:
        """Register the transactional id, fencing any older producer that used it."""
        producer = self._client.get()
        self._txn_retry.call(lambda: self._txn("init_transactions", producer.init_transactions, timeout_s))

    def begin(self) -> None:
        self._offsets_sent.clear()
        self._txn("begin_transaction", self._client.get().begin_transaction)

    def send_offsets(self, consumer: TypedConsumer, timeout_s: float = 30.0) -> None:
        """Commit ``consumer``'s current positions as part of this transaction."""
        positions = consumer.raw_positions()
        if not positions:
            return
        metadata = consumer.group_metadata()
        producer = self._client.get()
        send = producer.send_offsets_to_transaction
        self._txn("send_offsets_to_transaction", send, positions, metadata, timeout_s)
        self._offsets_sent.append(consumer)

    def commit(self, timeout_s: float = 30.0) -> None:
        """Commit the transaction; ``BusError.abort_required`` means: ``abort()`` and redo it."""
        producer = self._client.get()
        self._txn_retry.call(lambda: self._txn("commit_transaction", producer.commit_transaction, timeout_s))
        with self._errors_lock:
            self._errors.clear()  # deliveries of a committed transaction all succeeded
        for consumer in self._offsets_sent:
            consumer.mark_committed()
        self._offsets_sent.clear()

    def abort(self, timeout_s: float = 30.0) -> None:
        """Abort the transaction: its records are never seen by read_committed consumers."""
        producer = self._client.get()
        self._txn_retry.call(lambda: self._txn("abort_transaction", producer.abort_transaction, timeout_s))
        with self._errors_lock:
            self._errors.clear()
        self._offsets_sent.clear()

    # -- lifecycle -----------------------------------------------------------------------

    def close(self, timeout_s: float = 30.0) -> None:
        """Deliver what is queued (best effort) and drop the client."""
        producer = self._client.reset()
        if producer is not None:
            left = producer.flush(timeout_s)
            if left:
                log.warning("producer closed with %d undelivered record(s)", left)

    def __enter__(self) -> TypedProducer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
