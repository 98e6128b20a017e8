"""``Record``: one decoded Avro record as role code sees it — a plain dict with the schema's field
names (``schemas/*.avsc``; enums are strings, times epoch milliseconds). The codec turns bytes into
these and back; nothing outside ``workers/codec`` sees the bytes."""

from __future__ import annotations

from typing import Any

Record = dict[str, Any]
# The RunSummary (a task's ``last_run``, a status's) is these fields of a RunRecord.
_SUMMARY_FIELDS = ("run_id", "trigger", "state", "started_at", "ended_at", "rows_written", "message")


def run_summary(record: Record) -> Record:
    """The RunSummary of a RunRecord."""
    return {key: record[key] for key in _SUMMARY_FIELDS}
