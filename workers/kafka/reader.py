"""Reading a topic without joining a group: restore (``read_to_end``) and ``mvs tail``."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterable, Iterator, Sequence

from workers.codec import Codec
from workers.config import Settings
from workers.kafka.consumer import TypedConsumer
from workers.kafka.errors import BusError
from workers.kafka.messages import Message

log = logging.getLogger(__name__)
# The end of a partition is only known from a fetch that comes back empty at the end offset, and the
# broker holds such a fetch for fetch.wait.max.ms (500 ms by default) hoping for data. A restore is on
# the failover path and wants the end now: measured, a new owner's restore took ~610 ms with the
# default and is mostly that wait.
_EOF = {"enable.partition.eof": "true", "fetch.wait.max.ms": "10"}


def read_to_end(
    settings: Settings,
    topic: str,
    partitions: Sequence[int] | None = None,
    *,
    timeout_s: float = 60.0,
    include_errors: bool = False,
    codec: Codec | None = None,
    last: int | None = None,
) -> list[Message]:
    """Every committed record of ``topic`` (all partitions, or those given) from the beginning
    (or only the ``last`` offsets of each partition) up to the end offsets taken when called, in
    partition order. Undecodable records are logged and skipped (kept, with ``error`` set, if
    ``include_errors``); nothing is dead-lettered or committed."""
    with TypedConsumer(settings, dead_letters=False, config=_EOF, codec=codec) as consumer:
        bounds = consumer.end_offsets(topic, partitions)
        ends = {p: high for p, (low, high) in bounds.items() if high > low}
        if not ends:
            return []
        if last is None:
            consumer.assign(topic, sorted(ends), from_beginning=True)
        else:
            consumer.assign_at(topic, {p: max(bounds[p][0], high - last) for p, high in ends.items()})
        todo = dict(ends)
        out: list[Message] = []
        deadline = time.monotonic() + timeout_s
        while todo:
            if time.monotonic() > deadline:
                late = f"read_to_end({topic}): partitions {sorted(todo)} not read within {timeout_s}s"
                raise BusError(late, retriable=True)
            message = consumer.poll(0.2)
            if message is not None and message.offset < ends[message.partition]:
                if message.error is None or include_errors:
                    out.append(message)
                else:
                    where = f"{topic}[{message.partition}]@{message.offset}"
                    log.warning("skipping undecodable %s: %s", where, message.error)
                if message.offset + 1 >= ends[message.partition]:
                    todo.pop(message.partition, None)
            for p in list(todo):
                eof = consumer.eof_offset(topic, p)  # also passes trailing transaction markers
                if eof is not None and eof >= todo[p]:
                    todo.pop(p)
        return out


def latest_by_key(messages: Iterable[Message]) -> dict[str, Message]:
    """Compacted view: the last record per key, keys whose last record is a tombstone dropped."""
    latest: dict[str, Message] = {}
    for message in messages:
        if message.key is None:
            continue
        if message.is_tombstone:
            latest.pop(message.key, None)
        else:
            latest[message.key] = message
    return latest


def tail(
    settings: Settings,
    topic: str,
    *,
    from_beginning: bool = False,
    follow: bool = True,
    poll_timeout_s: float = 0.5,
    stop: threading.Event | None = None,
    codec: Codec | None = None,
) -> Iterator[Message]:
    """Records of ``topic`` as they come (``mvs tail``) until ``stop`` is set; undecodable
    ones are yielded with ``error`` set. ``follow=False`` reads from the beginning to the
    current end and stops. Closing the generator closes the consumer."""
    if not follow:
        yield from read_to_end(settings, topic, include_errors=True, codec=codec)
        return
    with TypedConsumer(settings, dead_letters=False, codec=codec) as consumer:
        consumer.assign(topic, sorted(consumer.end_offsets(topic)), from_beginning=from_beginning)
        while stop is None or not stop.is_set():
            message = consumer.poll(poll_timeout_s)
            if message is not None:
                yield message
