"""Client configurations and lazy construction of librdkafka handles.

Role-specific options here are mandatory for correctness and override the connection
settings from ``Settings.kafka_config()``: every producer is idempotent with acks=all and
the Java client's key hashing (murmur2), every consumer reads committed data only and
commits explicitly.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from typing import Generic, TypeVar

from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient

from workers.config import Settings

T = TypeVar("T")


class Lazy(Generic[T]):
    """Builds the wrapped client on first ``get()`` (so constructing roles never touches Kafka)."""

    def __init__(self, factory: Callable[[], T]) -> None:
        self._factory = factory
        self._value: T | None = None
        self._lock = threading.Lock()

    def get(self) -> T:
        value = self._value
        if value is not None:  # built: no lock needed to read it (the send path is hot)
            return value
        with self._lock:
            if self._value is None:
                self._value = self._factory()
            return self._value

    def peek(self) -> T | None:
        """The client if it was built, without building it."""
        return self._value

    def reset(self) -> T | None:
        """Forget the client (after closing it); returns it so the caller can close it."""
        with self._lock:
            value, self._value = self._value, None
            return value


def _client_id(settings: Settings, role: str) -> str:
    return f"{settings.namespace}.{role}.{settings.worker_id}"


def producer_config(
    settings: Settings, *, transactional_id: str | None = None, extra: Mapping[str, str] | None = None
) -> dict[str, str]:
    config = {
        **settings.kafka_config(),
        "client.id": _client_id(settings, "producer"),
        # Same key -> partition mapping as the Java client: ownership relies on it.
        "partitioner": "murmur2_random",
        "enable.idempotence": "true",
        "acks": "all",
    }
    if transactional_id:
        config["transactional.id"] = transactional_id
    return {**config, **(extra or {})}


def heartbeat_interval_ms(session_timeout_ms: int, floor_ms: int = 100) -> int:
    """Group heartbeat interval for a session timeout: a third of it, at most 500 ms."""
    return max(floor_ms, min(500, session_timeout_ms // 3))


def consumer_config(
    settings: Settings, group_id: str, *, extra: Mapping[str, str] | None = None
) -> dict[str, str]:
    config = {
        **settings.kafka_config(),
        "client.id": _client_id(settings, "consumer"),
        "group.id": group_id,
        "isolation.level": "read_committed",
        "enable.auto.commit": "false",
        "auto.offset.reset": "earliest",
        "group.protocol": settings.group_protocol,
    }
    if settings.session_timeout_ms > 0:
        # librdkafka requires it to be at least the session timeout.
        interval = max(settings.max_poll_interval_ms, settings.session_timeout_ms)
        config["max.poll.interval.ms"] = str(interval)
    if settings.group_protocol == "classic":
        # Incremental rebalances: a worker keeps its other tasks while one partition moves.
        config["partition.assignment.strategy"] = "cooperative-sticky"
        if settings.session_timeout_ms > 0:  # 0: librdkafka's defaults (45 s / 3 s)
            config["session.timeout.ms"] = str(settings.session_timeout_ms)
            # A member learns of a rebalance (a worker left: take over its tasks) from a heartbeat
            # answer, so the interval bounds a graceful handoff; heartbeats are cheap.
            config["heartbeat.interval.ms"] = str(heartbeat_interval_ms(settings.session_timeout_ms))
    # group.protocol=consumer (KIP-848): assignor, session timeout and heartbeat are broker-side.
    return {**config, **(extra or {})}


def admin_config(settings: Settings) -> dict[str, str]:
    return {**settings.kafka_config(), "client.id": _client_id(settings, "admin")}


def lazy_producer(
    settings: Settings, *, transactional_id: str | None = None, extra: Mapping[str, str] | None = None
) -> Lazy[Producer]:
    config = producer_config(settings, transactional_id=transactional_id, extra=extra)
    return Lazy(lambda: Producer(config))


def lazy_consumer(
    settings: Settings, group_id: str, extra: Mapping[str, str] | None = None
) -> Lazy[Consumer]:
    config = consumer_config(settings, group_id, extra=extra)
    return Lazy(lambda: Consumer(config))


def lazy_admin(settings: Settings) -> Lazy[AdminClient]:
    config = admin_config(settings)
    return Lazy(lambda: AdminClient(dict(config)))
