"""Reading the task catalog (a compacted topic keyed by task id) back into memory."""

from __future__ import annotations

from typing import Any

from workers.config import Settings
from workers.kafka.typed import read_to_end

Record = dict[str, Any]


def restore_catalog(settings: Settings, partitions: list[int] | None = None) -> dict[str, Record]:
    """The live tasks in the compacted catalog (the last record per key wins; a tombstone removes)."""
    latest: dict[str, Record | None] = {}
    for message in read_to_end(settings, "catalog", partitions):
        if message.key is not None:
            latest[message.key] = message.value
    return {key: value for key, value in latest.items() if value is not None}
