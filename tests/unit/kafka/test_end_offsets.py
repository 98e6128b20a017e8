"""End offsets through a stub client (pure): which librdkafka errors a watermark query retries."""

from __future__ import annotations

from dataclasses import replace
from types import SimpleNamespace
from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException

from workers.config import Settings
from workers.kafka.consumer import TypedConsumer
from workers.kafka.errors import BusError
from workers.kafka.retry import WATERMARK_RETRY


class Client:
    """Fails each partition's first watermark query with ``code``, then answers (0, 5)."""

    def __init__(self, code: int) -> None:
        self.code = code
        self.failed: set[int] = set()
        self.refreshed = 0

    def get_watermark_offsets(self, tp: Any, timeout: float, cached: bool) -> tuple[int, int]:
        if tp.partition not in self.failed:
            self.failed.add(tp.partition)
            raise KafkaException(KafkaError(self.code))
        return 0, 5

    def list_topics(self, topic: str, timeout: float) -> Any:
        self.refreshed += 1
        return SimpleNamespace(topics={})


def end_offsets(code: int) -> tuple[dict[int, tuple[int, int]], Client, list[float]]:
    consumer = TypedConsumer(Settings(embedded=False, bootstrap_servers="127.0.0.1:1"), dead_letters=False)
    client = Client(code)
    consumer._client = SimpleNamespace(get=lambda: client)  # type: ignore[assignment]
    slept: list[float] = []
    policy = replace(WATERMARK_RETRY, sleep=slept.append)
    return consumer.end_offsets("runs", [0, 1], retry=policy), client, slept


def test_a_listed_partition_unknown_to_the_clients_cache_is_asked_again() -> None:
    """CI, session 28: `mvs history` failed on "Local: Unknown partition" for a partition the metadata
    had just listed; the client's cache catches up, so the query is retried after a metadata refresh."""
    found, client, slept = end_offsets(KafkaError._UNKNOWN_PARTITION)
    assert found == {0: (0, 5), 1: (0, 5)}
    assert client.refreshed == 2 and len(slept) == 2


def test_an_error_no_retry_mends_is_raised_at_once() -> None:
    with pytest.raises(BusError) as raised:
        end_offsets(KafkaError.TOPIC_AUTHORIZATION_FAILED)
    assert raised.value.code == "TOPIC_AUTHORIZATION_FAILED" and not raised.value.retriable
