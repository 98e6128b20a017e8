"""The task host's outbox: records that must not be lost (run records) on their way to the bus.

Maintainers put records in from any thread; the manager's loop hands them to the producer. A record
leaves the outbox only once librdkafka has taken it (a full local queue keeps it here), and comes
back if its delivery fails — so nothing is dropped while the broker is away. The producer keeps
taken records until the broker acknowledges them (``NEVER_TIME_OUT``), so a delivery fails only when
the broker refuses it (e.g. an ACL); the record is then sent again after those queued meanwhile, and
may arrive after a later record of its run.
"""

from __future__ import annotations

import functools
import logging
import threading
from collections import deque
from collections.abc import Callable

from workers.bus import BusProducer
from workers.kafka.errors import BusError
from workers.records import Record

log = logging.getLogger(__name__)


class Outbox:
    def __init__(self, owner: str) -> None:
        self.owner = owner  # for the log
        self._records: deque[tuple[str, str, Record]] = deque()
        self._lock = threading.Lock()

    def __len__(self) -> int:
        with self._lock:
            return len(self._records)

    def put(self, topic: str, key: str, record: Record) -> None:
        """Queue a record for ``topic`` (any thread)."""
        with self._lock:
            self._records.append((topic, key, record))

    def queued(self) -> list[Record]:
        """The records waiting, oldest first."""
        with self._lock:
            return [record for _, _, record in self._records]

    def clear(self) -> None:
        """Forget every queued record (a bench without a broker)."""
        with self._lock:
            self._records.clear()

    def publish(self, producer: BusProducer, *, on_fatal: Callable[[], None]) -> None:
        """Hand every queued record to ``producer``, oldest first, until it refuses one (loop thread).
        ``on_fatal``: a delivery failed because the producer is unusable (the manager rebuilds it)."""
        while True:
            with self._lock:
                if not self._records:
                    return
                topic, key, record = self._records[0]  # other threads only append
            try:
                delivered = functools.partial(self._delivered, on_fatal, topic, key, record)
                producer.send(topic, key, record, on_delivery=delivered)
            except BusError as exc:
                log.warning("%s: outbox kept (%d records): %s", self.owner, len(self), exc)
                return
            except Exception:  # a record that cannot be encoded is a bug: it must not block the rest
                log.exception(
                    "%s: dropping a record that cannot be sent to %s: %r", self.owner, topic, record
                )
            with self._lock:
                self._records.popleft()

    def _delivered(
        self, on_fatal: Callable[[], None], topic: str, key: str, record: Record, error: BusError | None
    ) -> None:
        if error is None:
            return
        log.warning("%s: delivery to %s failed, re-queued: %s", self.owner, topic, error)
        self.put(topic, key, record)
        if error.fatal:
            on_fatal()
