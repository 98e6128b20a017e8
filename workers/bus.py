"""What a role uses of the bus: a consumer, a producer, a catalog read — as interfaces.

The roles (``Manager``, ``Coordinator``) get a ``Bus`` and ask it for their clients, so a unit test
drives their ``step()`` over an in-memory bus (tests/support/memory_bus.py) while the integration tests
run them on a real broker. ``KafkaBus``, the default, hands out the typed Kafka clients, which
satisfy these protocols as they are (mypy checks it in ``KafkaBus``'s return types).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol

from workers.catalog.store import restore_catalog
from workers.config import Settings
from workers.kafka.admin import configure_group
from workers.kafka.producer import NEVER_TIME_OUT
from workers.kafka.typed import BusError, Message, TypedConsumer, TypedProducer
from workers.records import Record

Partitions = list[tuple[str, int]]  # (logical topic, partition)
RebalanceCallback = Callable[[Partitions], None]
# Called (from the producer's ``poll``) with None once a record is acknowledged, or with the error
# the bus gave up on it with.
DeliveryCallback = Callable[[BusError | None], None]


class BusConsumer(Protocol):
    """A consumer of logical topics, used from one thread."""

    def subscribe(
        self,
        topics: Sequence[str],
        on_assign: RebalanceCallback | None = None,
        on_revoke: RebalanceCallback | None = None,
    ) -> None:
        """Join the group; the callbacks run inside ``poll`` with the partitions gained or lost."""
        ...

    def assign(self, topic: str, partitions: Sequence[int], from_beginning: bool = False) -> None:
        """Read partitions by hand: from the beginning, the committed offset, or (no group) the end."""
        ...

    def unassign(self, topic: str, partitions: Sequence[int] | None = None) -> None: ...

    def poll(self, timeout_s: float = 1.0) -> Message | None: ...

    def commit(self, message: Message | None = None) -> None:
        """Commit everything polled so far, or up to and including ``message``."""
        ...

    def seek_to_committed(self, timeout_s: float = 10.0) -> None:
        """Rewind every assigned partition to its committed offset (a transaction was lost)."""
        ...

    def close(self) -> None: ...


class BusProducer(Protocol):
    """Sends records to logical topics, optionally in transactions (one at a time)."""

    def send(
        self,
        topic: str,
        key: str | None,
        record: Mapping[str, Any],
        *,
        headers: Mapping[str, str] | None = None,
        partition: int | None = None,
        on_delivery: DeliveryCallback | None = None,
    ) -> None: ...

    def send_tombstone(self, topic: str, key: str) -> None: ...

    def send_dead_letter(self, message: Message, reason: str) -> None: ...

    def poll(self, timeout_s: float = 0.0) -> None:
        """Serve the delivery callbacks of records acknowledged (or given up on) since the last call."""
        ...

    def init_transactions(self, timeout_s: float | None = None) -> None:
        """Fence any older producer of this transactional id, aborting what it left open."""
        ...

    def begin(self) -> None: ...

    # ``consumer`` is one this bus handed out (its positions are committed with the transaction).
    def send_offsets(self, consumer: Any, timeout_s: float | None = None) -> None: ...

    def commit(self, timeout_s: float | None = None) -> None: ...

    def abort(self, timeout_s: float | None = None) -> None: ...

    def close(self, timeout_s: float = 30.0) -> None: ...


class Bus(Protocol):
    """The clients a role may open."""

    def consumer(self, group_id: str | None) -> BusConsumer:
        """A consumer in group ``group_id`` (None: a reader that never commits)."""
        ...

    def producer(
        self,
        *,
        transactional_id: str | None = None,
        txn_timeout_s: float = 30.0,
        keep_until_delivered: bool = False,
    ) -> BusProducer:
        """``keep_until_delivered``: records wait for the broker however long it is away (run records)."""
        ...

    def read_catalog(self, partitions: list[int] | None = None) -> dict[str, Record]:
        """The live tasks of the compacted catalog (all partitions, or those given)."""
        ...

    def configure_group(self, group_id: str) -> None:
        """Apply the group's broker-side settings (its session timeout) before joining it."""
        ...


class KafkaBus:
    """The real bus: typed Kafka clients for ``settings``."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings

    def consumer(self, group_id: str | None) -> BusConsumer:
        consumer: TypedConsumer = TypedConsumer(self.settings, group_id=group_id)
        return consumer

    def producer(
        self,
        *,
        transactional_id: str | None = None,
        txn_timeout_s: float = 30.0,
        keep_until_delivered: bool = False,
    ) -> BusProducer:
        producer: TypedProducer = TypedProducer(
            self.settings,
            transactional_id=transactional_id,
            config=NEVER_TIME_OUT if keep_until_delivered else None,
            txn_timeout_s=txn_timeout_s,
        )
        return producer

    def read_catalog(self, partitions: list[int] | None = None) -> dict[str, Record]:
        return restore_catalog(self.settings, partitions)

    def configure_group(self, group_id: str) -> None:
        configure_group(self.settings, group_id)
