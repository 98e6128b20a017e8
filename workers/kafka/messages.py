"""What role code receives from the bus, and the Java client's key -> partition mapping."""

from __future__ import annotations

from dataclasses import dataclass

from confluent_kafka import Message as RawMessage

from workers.codec import Record

_MASK = 0xFFFFFFFF

# Headers as librdkafka takes and gives them.
RawHeaders = list[tuple[str, str | bytes | None]]


def raw_headers(raw: RawMessage) -> RawHeaders:
    headers = raw.headers() or []
    return list(headers.items()) if isinstance(headers, dict) else list(headers)


def header_text(value: str | bytes | None) -> str:
    if value is None:
        return ""
    return value.decode(errors="replace") if isinstance(value, bytes) else value


@dataclass(frozen=True)
class Message:
    """One consumed record. ``value`` is the decoded record, None for a tombstone.

    ``raw`` holds the bytes only for topics without a schema (the dlq) and, for readers
    that do not dead-letter (``tail``), for a record that did not decode (``error`` says why).
    """

    topic: str  # logical name
    partition: int
    offset: int
    key: str | None
    value: Record | None
    record_type: str | None
    headers: tuple[tuple[str, str], ...] = ()
    timestamp: int | None = None  # epoch milliseconds
    raw: bytes | None = None
    error: str | None = None

    @property
    def is_tombstone(self) -> bool:
        return self.value is None and self.raw is None and self.error is None

    def header(self, name: str) -> str | None:
        """Value of the last header called ``name``."""
        found = None
        for key, value in self.headers:
            if key == name:
                found = value
        return found


def murmur2(data: bytes) -> int:
    """Kafka's ``Utils.murmur2`` (32-bit, seed 0x9747b28c), as an unsigned 32-bit int."""
    m, r = 0x5BD1E995, 24
    length = len(data)
    h = (0x9747B28C ^ length) & _MASK
    for i in range(0, length - length % 4, 4):
        k = int.from_bytes(data[i : i + 4], "little")
        k = (k * m) & _MASK
        k ^= k >> r
        k = (k * m) & _MASK
        h = ((h * m) & _MASK) ^ k
    tail = length % 4
    base = length - tail
    if tail == 3:
        h ^= data[base + 2] << 16
    if tail >= 2:
        h ^= data[base + 1] << 8
    if tail >= 1:
        h ^= data[base]
        h = (h * m) & _MASK
    h ^= h >> 13
    h = (h * m) & _MASK
    h ^= h >> 15
    return h


def partition_for(key: str, partitions: int) -> int:
    """Partition the Java client (and librdkafka's murmur2_random) picks for a non-null key."""
    return (murmur2(key.encode()) & 0x7FFFFFFF) % partitions
