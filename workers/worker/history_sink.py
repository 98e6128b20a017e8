"""The history sink: the runs topic and the catalog, kept as Delta tables for SQL readers.

The topics stay the source of truth; the tables are what they say, written by the fleet:
``mvs_refresh_history`` gets one row per run end (``<ns>.runs``), ``mvs_tasks`` the latest state of
each task (``<ns>.catalog``). Every ``mvs worker`` runs one sink (a loop of its own, on a thread:
its Delta writes take seconds and must not hold up the manager's heartbeats) in the consumer group
``<ns>.history``. Kafka spreads the topics' partitions over the live workers, so the work is shared
and moves with them like task ownership, and no worker is special.

Exactly once, per runs partition: a batch of partition p is appended in one Delta commit under
``txnAppId = mvs_refresh_history:runs-<p>``, ``txnVersion = its last offset``
(``workers/worker/history_table.py``), after dropping the records at or below the offset Delta
recorded for that id; the Kafka offset is committed only after the Delta commit. A crash between
the two replays the batch, whose records the recorded offset then drops; a second copy writing the
same partition at once fails Delta's conflict check and tries again from the new recorded offset
(``LoopRole`` backs off and retries). Task states are one MERGE per batch that only replaces a row
with a newer record's, so a replay changes nothing. A partition revoked with records buffered drops
them uncommitted: its new owner reads them again.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
import threading
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar, Protocol

from workers.bus import Bus, BusConsumer, KafkaBus
from workers.catalog.names import REFRESH_HISTORY_TABLE, TASKS_TABLE
from workers.config import Settings
from workers.kafka.typed import Message
from workers.role import LoopRole
from workers.sched.clock import Clock, SystemClock
from workers.sched.metrics import SchedMetrics, process_metrics
from workers.worker.history_rows import history_row, task_row

log = logging.getLogger(__name__)
SOURCES = {"runs": REFRESH_HISTORY_TABLE, "catalog": TASKS_TABLE}
# The oldest buffered record waits at most this long: a flush is up to 3 appends (the runs
# partitions) and one MERGE (the catalog changes: every checkpoint the coordinator folds in).
FLUSH_EVERY_S = 10.0
MAX_BATCH = 5_000  # records buffered before a flush whatever their age
HISTORY_SINK_STOP_S = 30.0  # a worker stopping waits this long for a flush under way
# A flush is Spark writes that can outlast a role's 30 s poll interval on a loaded machine; leaving the
# group then only makes the partitions move and the batch replay. A stuck sink delays history rows,
# nothing else, so it may hold its partitions as long as librdkafka's default allows.
HISTORY_MAX_POLL_INTERVAL_MS = 300_000


class WriteConflict(Exception):
    """Another writer committed to the table meanwhile (Delta's optimistic concurrency): try again."""


class HistoryWriter(Protocol):
    """Where the sink's rows go (``SparkHistoryWriter``; unit tests pass a fake)."""

    def recorded_offset(self, table: str, app_id: str) -> int: ...

    def append_history(self, rows: Sequence[dict[str, Any]], *, app_id: str, last_offset: int) -> None: ...

    def merge_tasks(self, rows: Sequence[dict[str, Any]], removed: Sequence[dict[str, Any]]) -> None: ...


class SparkHistoryWriter:
    """The Delta tables of ``settings.warehouse``, written through the process's SparkSession."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings

    def _spark(self) -> Any:
        from workers.jobs import get_spark

        return get_spark(self.settings)

    @contextlib.contextmanager
    def _conflicts(self) -> Iterator[None]:
        from workers.jobs import is_write_conflict

        try:
            yield
        except Exception as exc:
            if is_write_conflict(exc):  # the other workers' sinks MERGE into mvs_tasks too
                raise WriteConflict(" ".join(str(exc).split())[:300]) from exc
            raise

    def recorded_offset(self, table: str, app_id: str) -> int:
        from workers.worker.history_table import recorded_offset

        return recorded_offset(self._spark(), self.settings, table, app_id)

    def append_history(self, rows: Sequence[dict[str, Any]], *, app_id: str, last_offset: int) -> None:
        from workers.worker.history_table import append_history

        with self._conflicts():
            append_history(self._spark(), self.settings, rows, app_id=app_id, last_offset=last_offset)

    def merge_tasks(self, rows: Sequence[dict[str, Any]], removed: Sequence[dict[str, Any]]) -> None:
        from workers.worker.history_table import merge_tasks

        with self._conflicts():
            merge_tasks(self._spark(), self.settings, rows, removed)


def sink_settings(settings: Settings) -> Settings:
    """The sink's own consumer settings: the role's, with the longer poll interval its flushes need."""
    interval = max(settings.max_poll_interval_ms, HISTORY_MAX_POLL_INTERVAL_MS)
    return dataclasses.replace(settings, max_poll_interval_ms=interval)


def txn_app_id(table: str, topic: str, partition: int) -> str:
    """The idempotent-write id of one source partition's writes to ``table``."""
    return f"{table}:{topic}-{partition}"


@dataclass
class PartitionBatch:
    """Records of one source partition polled since its last flush, in offset order."""

    topic: str
    partition: int
    messages: list[Message] = field(default_factory=list)

    def after(self, recorded: int) -> list[Message]:
        """The records Delta has not got yet (offset above the recorded one)."""
        return [m for m in self.messages if m.offset > recorded]


def history_rows(messages: Sequence[Message]) -> list[dict[str, Any]]:
    """The ``mvs_refresh_history`` rows of runs-topic records (runs not ended have none)."""
    rows = (history_row(m.value, m.partition, m.offset) for m in messages if m.value is not None)
    return [row for row in rows if row is not None]


def task_changes(messages: Sequence[Message]) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Catalog records as (the newest row per live task, the tombstones): the compacted topic's
    meaning, the last record of a key wins and a tombstone removes it. A tombstone is
    ``{task_id, source_partition, source_offset}``."""
    latest: dict[str, Message] = {}
    for message in messages:
        if message.key is not None:
            latest[message.key] = message
    rows = [task_row(m.value, m.partition, m.offset) for m in latest.values() if m.value is not None]
    removed = [
        {"task_id": key, "source_partition": m.partition, "source_offset": m.offset}
        for key, m in latest.items()
        if m.value is None
    ]
    return rows, removed


class HistorySink(LoopRole):
    role_name: ClassVar[str] = "history"

    def __init__(
        self,
        settings: Settings,
        *,
        bus: Bus | None = None,
        writer: HistoryWriter | None = None,
        clock: Clock | None = None,
        flush_every_s: float = FLUSH_EVERY_S,
        metrics: SchedMetrics | None = None,
    ) -> None:
        self.settings = settings
        self.bus: Bus = bus if bus is not None else KafkaBus(sink_settings(settings))
        self.writer: HistoryWriter = writer if writer is not None else SparkHistoryWriter(settings)
        self.clock = clock or SystemClock()
        self.flush_every_s = flush_every_s
        self.metrics = metrics if metrics is not None else process_metrics()
        self._consumer: BusConsumer = self.bus.consumer(settings.group("history"))
        self._batches: dict[tuple[str, int], PartitionBatch] = {}
        self._buffered = 0
        self._oldest: float | None = None  # monotonic time the oldest buffered record was polled

    def loop_metrics(self) -> SchedMetrics:
        return self.metrics

    def start(self) -> None:
        self._consumer.subscribe(list(SOURCES), on_revoke=self._on_revoke)

    def _on_revoke(self, partitions: list[tuple[str, int]]) -> None:
        for key in partitions:
            dropped = self._batches.pop(key, None)
            if dropped is not None:
                self._buffered -= len(dropped.messages)  # uncommitted: the new owner reads them again

    def step(self, timeout_s: float = 0.2) -> None:
        message = self._consumer.poll(timeout_s)
        while message is not None:
            self._buffer(message)
            if self._buffered >= MAX_BATCH:
                break
            message = self._consumer.poll(0)
        due = self._oldest is not None and self.clock.monotonic() - self._oldest >= self.flush_every_s
        if self._buffered >= MAX_BATCH or due:
            try:
                self.flush()
            except WriteConflict as exc:
                # Expected now and then with several workers: what is left stays buffered, uncommitted.
                log.info(
                    "history sink: a concurrent commit won (%s); writing again in %.0fs",
                    exc,
                    self.flush_every_s,
                )
                self._oldest = self.clock.monotonic()

    def _buffer(self, message: Message) -> None:
        key = (message.topic, message.partition)
        self._batches.setdefault(key, PartitionBatch(message.topic, message.partition)).messages.append(
            message
        )
        self._buffered += 1
        if self._oldest is None:
            self._oldest = self.clock.monotonic()

    def flush(self) -> None:
        """Write what is buffered, then commit its Kafka offsets: each runs partition in one append,
        the catalog partitions in one MERGE. What raises stays buffered and uncommitted (the loop
        backs off and this runs again)."""
        for key in sorted(k for k in self._batches if k[0] == "runs"):
            self._append_runs(self._batches[key])
            self._done(key)
        catalog = sorted(k for k in self._batches if k[0] == "catalog")
        if catalog:
            # One partition's records are in offset order and a key lives in one partition, so the
            # partitions' records may be taken together.
            rows, removed = task_changes([m for key in catalog for m in self._batches[key].messages])
            self.writer.merge_tasks(rows, removed)
            log.info("%s: %d tasks changed, %d removed", TASKS_TABLE, len(rows), len(removed))
            for key in catalog:
                self._done(key)
        self._oldest = None

    def _done(self, key: tuple[str, int]) -> None:
        batch = self._batches.pop(key)
        self._consumer.commit(batch.messages[-1])
        self._buffered -= len(batch.messages)

    def _append_runs(self, batch: PartitionBatch) -> None:
        app_id = txn_app_id(REFRESH_HISTORY_TABLE, batch.topic, batch.partition)
        fresh = batch.after(self.writer.recorded_offset(REFRESH_HISTORY_TABLE, app_id))
        rows = history_rows(fresh)
        if rows:
            last = fresh[-1].offset
            self.writer.append_history(rows, app_id=app_id, last_offset=last)
            log.info(
                "%s: %d runs of runs[%d] (to offset %d)",
                REFRESH_HISTORY_TABLE,
                len(rows),
                batch.partition,
                last,
            )

    def close(self) -> None:
        self._consumer.close()


def history_tables_enabled(environ: Mapping[str, str] | None = None) -> bool:
    """``mvs worker`` runs the sink unless ``MVS_HISTORY_TABLES=0``: each worker's JVM then does a
    Delta append or MERGE per flush (every 10 s at most) — tests/integration/test_fleet.py took 186 s
    instead of 157 s on 2 cores, so the fleet tests' role processes turn it off (processes.role_env)
    and tests/integration/test_history_tables.py tests it."""
    value = (os.environ if environ is None else environ).get("MVS_HISTORY_TABLES", "1")
    return value.strip().lower() in ("1", "true", "yes", "on")


def start_history_sink(settings: Settings, stop: threading.Event) -> threading.Thread | None:
    """Run a ``HistorySink`` on a daemon thread until ``stop`` (None when turned off); join it after
    ``stop`` so that it leaves its group at once (its Kafka commits are then done or void)."""
    if not history_tables_enabled():
        return None
    sink = HistorySink(settings)
    thread = threading.Thread(target=sink.run, args=(stop,), name="history-sink", daemon=True)
    thread.start()
    return thread
