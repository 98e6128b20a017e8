"""The inbox forwarder: who issued a DDL event is the principal Kafka authenticated, not a field.

Kafka does not stamp a record with its producer's principal, but it does decide who may write a
topic. So each DDL producer ``User:alice`` gets its own inbox topic ``<ns>.ddl.inbox.alice`` that
only she may write (``mvs acls apply --ddl-producer User:alice``), and only the coordinator's
principal may write ``<ns>.ddl``. This loop consumes every inbox and re-publishes each event to
``<ns>.ddl`` with ``issued_by`` set to the principal the inbox belongs to — whatever the client
put there — in one Kafka transaction with the inbox offsets (consume-transform-produce, exactly
once). Undecodable inbox records go to the dlq (``TypedConsumer``).

It runs in ``mvs coordinator`` when ``MVS_DDL_INBOX=1``, in its own consumer group, so every
coordinator (active or standby) shares the inboxes. Each process has its own transactional id;
a process that lost its inbox partitions is fenced by the group generation its offsets carry
(KIP-447). New inboxes are discovered by listing topics every ``discover_every_s``.
"""

from __future__ import annotations

import atexit
import logging
import threading
from collections.abc import Callable

from workers.config import Settings
from workers.kafka.acls import forwarder_group, forwarder_transactional_id, list_inboxes
from workers.kafka.typed import BusError, Message, TypedConsumer, TypedProducer
from workers.role import LoopRole
from workers.sched.clock import Clock, SystemClock
from workers.topics import INBOX_TEMPLATE

log = logging.getLogger(__name__)
FORWARDED_FROM = "mvs.inbox"  # header on the forwarded event: <inbox topic>[partition]@offset


def inbox_principal(logical_topic: str) -> str:
    """``ddl.inbox.alice`` → ``User:alice``."""
    return "User:" + logical_topic.removeprefix(INBOX_TEMPLATE + ".")


class InboxForwarder(LoopRole):
    def __init__(
        self, settings: Settings, *, clock: Clock | None = None, discover_every_s: float = 5.0
    ) -> None:
        self.settings = settings
        self.clock = clock or SystemClock()
        self.discover_every_s = discover_every_s
        self.inboxes: list[str] = []
        self.forwarded = 0
        self._consumer = TypedConsumer(settings, group_id=forwarder_group(settings))
        self._producer: TypedProducer | None = None  # opened (init_transactions) by step
        self._discovered_at: float | None = None
        self._rewind = False  # a transaction failed: go back to the committed offsets before polling
        self._idle = threading.Event()  # never set: a wait that is not a sleep

    def _open_producer(self) -> TypedProducer:
        if self._producer is None:
            producer = TypedProducer(
                self.settings, transactional_id=forwarder_transactional_id(self.settings)
            )
            producer.init_transactions()
            self._producer = producer
        return self._producer

    def start(self) -> None:
        self.discover()

    def discover(self) -> None:
        """Subscribe to the inboxes that exist now (a change re-subscribes: one rebalance)."""
        self._discovered_at = self.clock.monotonic()
        try:
            found = list_inboxes(self.settings)
        except BusError as exc:
            log.warning("inbox forwarder: cannot list inboxes, keeping %s: %s", self.inboxes, exc)
            return
        if found != self.inboxes and found:
            log.info("inbox forwarder: forwarding %s", found)
            self._consumer.subscribe(found)
        self.inboxes = found

    def step(self, timeout_s: float = 0.2) -> None:
        due = (
            self._discovered_at is None
            or self.clock.monotonic() - self._discovered_at >= self.discover_every_s
        )
        if due:
            self.discover()
        if not self.inboxes:
            self._idle.wait(timeout_s)
            return
        try:
            producer = self._open_producer()
            if self._rewind:
                self._consumer.seek_to_committed()
                self._rewind = False
            message = self._consumer.poll(timeout_s)
            if message is not None:
                self._forward(producer, message)
        except BusError as exc:
            self._recover(exc)

    def _forward(self, producer: TypedProducer, message: Message) -> None:
        producer.begin()
        try:
            if message.value is not None:  # a tombstone in an inbox carries no DDL: just move past it
                event = {**message.value, "issued_by": inbox_principal(message.topic)}
                where = f"{message.topic}[{message.partition}]@{message.offset}"
                producer.send("ddl", event["name"], event, headers={FORWARDED_FROM: where})
            producer.send_offsets(self._consumer)
            producer.commit()
        except BaseException:
            try:
                producer.abort()
            except BusError as exc:
                log.warning("inbox forwarder: abort failed: %s", exc)
            raise
        self.forwarded += message.value is not None

    def _recover(self, exc: BusError) -> None:
        """Nothing of the failed transaction is visible: redo from the committed inbox offsets
        (from the next step on, which retries until it can; a fenced or failed producer is replaced)."""
        log.warning("inbox forwarder: transaction failed, redoing from the committed offsets: %s", exc)
        if exc.fatal or exc.fenced:
            # Dropped unflushed: its transaction is void, and flushing a fatally failed producer raises.
            self._producer = None
        self._rewind = True

    def close(self) -> None:
        self._consumer.close()
        if self._producer is not None:
            self._producer.close()


def forward_inboxes_in_background(settings: Settings) -> Callable[[], None] | None:
    """With ``MVS_DDL_INBOX=1``: run an ``InboxForwarder`` in a thread of this process (``mvs
    coordinator``) until the returned function is called or the process exits; None otherwise."""
    if not settings.ddl_inbox:
        return None
    forwarder = InboxForwarder(settings)
    stop = threading.Event()
    thread = threading.Thread(target=forwarder.run, args=(stop,), name="InboxForwarder", daemon=True)
    thread.start()

    def stop_forwarding() -> None:
        stop.set()
        thread.join(30)

    atexit.register(stop_forwarding)
    return stop_forwarding
