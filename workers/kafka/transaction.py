"""The transactions of one transactional producer: records and consumed offsets committed together.

A role reads a record, publishes what follows from it and, in the same transaction, commits the
position after it (``send_offsets``): either both happen or neither. This object owns that step and
the positions it committed; the consumer only says where it is (``OffsetSource``) and hears when
its positions are committed (``mark_committed``), so producer and consumer never see each other.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Protocol

from confluent_kafka import KafkaException, Producer, TopicPartition

from workers.kafka.clients import Lazy
from workers.kafka.errors import BusError
from workers.kafka.retry import TXN_RETRY, RetryPolicy

Position = tuple[str, int]  # (physical topic, partition)


class OffsetSource(Protocol):
    """A consumer whose positions a transaction commits (``TypedConsumer`` is one)."""

    def raw_positions(self) -> list[TopicPartition]: ...

    def group_metadata(self) -> Any: ...

    def mark_committed(self) -> None: ...


class Transaction:
    """One open transaction at a time on ``client``: ``begin``, ``send_offsets``, ``commit``/``abort``.

    ``committed`` is the next offset to read per partition as of the last committed transaction
    (positions sent in an aborted one are dropped)."""

    def __init__(
        self,
        client: Lazy[Producer],
        transactional_id: str | None,
        *,
        retry: RetryPolicy = TXN_RETRY,
        timeout_s: float = 30.0,
    ) -> None:
        self.transactional_id = transactional_id
        self._client = client
        self._retry = retry
        self._timeout_s = timeout_s
        self._sent: list[tuple[OffsetSource, list[TopicPartition]]] = []
        self._committed: dict[Position, int] = {}

    @property
    def committed(self) -> Mapping[Position, int]:
        return dict(self._committed)

    def _call(self, what: str, call: Callable[..., Any], *args: Any) -> None:
        if not self.transactional_id:
            raise BusError(f"{what}: producer has no transactional.id")
        try:
            call(*args)
        except KafkaException as exc:
            raise BusError.from_kafka(f"{what} ({self.transactional_id})", exc) from exc

    def _timeout(self, timeout_s: float | None) -> float:
        return self._timeout_s if timeout_s is None else timeout_s

    def init(self, timeout_s: float | None = None) -> None:
        """Register the transactional id, fencing any older producer that used it (and aborting
        a transaction it left open)."""
        producer = self._client.get()
        timeout = self._timeout(timeout_s)
        self._retry.call(lambda: self._call("init_transactions", producer.init_transactions, timeout))

    def begin(self) -> None:
        self._sent.clear()
        self._call("begin_transaction", self._client.get().begin_transaction)

    def send_offsets(self, source: OffsetSource, timeout_s: float | None = None) -> None:
        """Commit ``source``'s current positions as part of this transaction."""
        positions = source.raw_positions()
        if not positions:
            return
        send = self._client.get().send_offsets_to_transaction
        timeout = self._timeout(timeout_s)
        self._call("send_offsets_to_transaction", send, positions, source.group_metadata(), timeout)
        self._sent.append((source, positions))

    def commit(self, timeout_s: float | None = None) -> None:
        """Commit the transaction; ``BusError.abort_required`` means: ``abort()`` and redo it."""
        producer = self._client.get()
        timeout = self._timeout(timeout_s)
        self._retry.call(lambda: self._call("commit_transaction", producer.commit_transaction, timeout))
        for source, positions in self._sent:
            self._committed.update({(tp.topic, tp.partition): tp.offset for tp in positions})
            source.mark_committed()
        self._sent.clear()

    def abort(self, timeout_s: float | None = None) -> None:
        """Abort the transaction: its records are never seen by read_committed consumers and the
        positions it sent are not committed."""
        producer = self._client.get()
        timeout = self._timeout(timeout_s)
        self._retry.call(lambda: self._call("abort_transaction", producer.abort_transaction, timeout))
        self._sent.clear()
