"""Reading the task catalog (a compacted topic keyed by task id) back into memory."""

from __future__ import annotations

from collections.abc import Iterable

from workers.config import Settings
from workers.kafka.typed import Message, read_to_end
from workers.records import Record


def live_tasks(messages: Iterable[Message]) -> dict[str, Record]:
    """What compaction keeps of catalog records: the last record per key; a tombstone removes it."""
    latest: dict[str, Record | None] = {}
    for message in messages:
        if message.key is not None:
            latest[message.key] = message.value
    return {key: value for key, value in latest.items() if value is not None}


def restore_catalog(settings: Settings, partitions: list[int] | None = None) -> dict[str, Record]:
    """The live tasks in the compacted catalog (all partitions, or those given)."""
    return live_tasks(read_to_end(settings, "catalog", partitions))
