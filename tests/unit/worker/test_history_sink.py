"""The history sink: run and task records as table rows (pure), and the sink's exactly-once loop over
an in-memory bus with a writer that keeps Delta's idempotent-write rule (the real Delta tables:
tests/integration/test_history_tables.py)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

import pytest

from tests.support.memory_bus import MemoryBus
from tests.support.paths import AVRO_FIXTURES as FIXTURES
from workers.catalog.names import REFRESH_HISTORY_TABLE, TASKS_TABLE
from workers.config import Settings
from workers.kafka.clients import consumer_config
from workers.sched.clock import ManualClock
from workers.sched.metrics import SchedMetrics
from workers.worker.history_rows import HISTORY_COLUMNS, TASK_COLUMNS, history_row, refresh_type, task_row
from workers.worker.history_sink import (
    FLUSH_EVERY_S,
    HistorySink,
    WriteConflict,
    history_tables_enabled,
    sink_settings,
    task_changes,
)

T0 = 1_767_225_600_000


def fixture(name: str) -> dict[str, Any]:
    return dict(json.loads((FIXTURES / f"{name}.json").read_text()))


def run(
    run_id: str, state: str, message: str | None = None, *, task: str = "mv:sales_by_region"
) -> dict[str, Any]:
    record = {**fixture("RunRecord"), "run_id": run_id, "task_id": task, "state": state, "message": message}
    return record if state == "ERROR" else {**record, "error": None}


# -- pure handlers ---------------------------------------------------------------------------------
def test_a_run_end_is_one_row_naming_its_source_record() -> None:
    row = history_row(fixture("RunRecord"), 2, 41)
    assert row is not None and tuple(row) == HISTORY_COLUMNS
    assert row["state"] == "ERROR" and row["error_code"] == 2001 and row["error_retryable"] is True
    assert (row["kind"], row["name"]) == ("MV", "sales_by_region")
    assert row["started_at"] == datetime.fromtimestamp(T0 / 1000, tz=UTC)
    assert row["duration_ms"] == 900
    assert (row["source_partition"], row["source_offset"]) == (2, 41)
    assert row["planning_reason"] is None and row["rows_inserted"] is None  # a failed run planned nothing


def test_a_refresh_row_carries_its_planning_information() -> None:
    record = {**fixture("RunRecord"), "state": "COMPLETED", "error": None, "planning": fixture("RunPlanning")}
    row = history_row({**record, "rows_inserted": 5, "rows_deleted": 2}, 0, 1)
    assert row is not None
    assert row["planning_reason"] == fixture("RunPlanning")["reason"]
    assert (row["fast_estimated_ms"], row["complete_estimated_ms"]) == (41_000.0, 12_000.0)
    assert (row["change_rows"], row["base_rows"]) == (2_100_000, 3_300_000)
    assert (row["rows_inserted"], row["rows_deleted"]) == (5, 2)


@pytest.mark.parametrize("state", ["PENDING", "RUNNING"])
def test_a_run_not_ended_has_no_row(state: str) -> None:
    assert history_row(run("r", state), 0, 0) is None


@pytest.mark.parametrize(
    ("state", "message", "expected"),
    [
        ("COMPLETED", "incremental: 3 change rows applied (v1 -> v2: append)", "INCREMENTAL"),
        ("COMPLETED", "complete: first build", "COMPLETE"),
        ("SKIPPED", "skipped: no change", "SKIP"),
        ("ERROR", "storage unavailable", None),
        ("COMPLETED", None, None),
    ],
)
def test_the_refresh_type_comes_from_the_run_message(
    state: str, message: str | None, expected: str | None
) -> None:
    assert refresh_type(state, message) == expected


def test_a_purge_run_has_no_refresh_type() -> None:
    row = history_row(run("r", "COMPLETED", "complete: x", task="mvlog:sales"), 0, 0)
    assert row is not None and (row["kind"], row["name"], row["refresh_type"]) == ("MV_LOG", "sales", None)


def test_a_task_row_flattens_spec_state_and_last_run() -> None:
    row = task_row(fixture("TaskRecord"), 5, 9)
    assert tuple(row) == TASK_COLUMNS
    assert (row["state"], row["refresh_mode"], row["trigger_kind"], row["trigger_interval_ms"]) == (
        "WARNING",
        "FAST",
        "EVERY",
        60_000,
    )
    assert row["checkpoint"] == {"sales": 17} and row["last_run_state"] == "COMPLETED"
    assert row["error_code"] == 2001 and row["base_tables"] == ["sales"]


def test_catalog_records_mean_the_newest_per_key_and_tombstones_remove() -> None:
    bus = MemoryBus()
    task = fixture("TaskRecord")
    for state in ("NORMAL", "PAUSED"):
        bus.publish("catalog", "mv:a", {**task, "task_id": "mv:a", "state": state}, partition=0)
    bus.publish("catalog", "mv:b", {**task, "task_id": "mv:b"}, partition=0)
    bus.producer().send_tombstone("catalog", "mv:b")
    rows, removed = task_changes(bus.messages("catalog"))
    assert [(r["task_id"], r["state"], r["source_offset"]) for r in rows] == [("mv:a", "PAUSED", 1)]
    assert [r["task_id"] for r in removed] == ["mv:b"]


def test_the_sink_runs_unless_turned_off() -> None:
    assert history_tables_enabled({})
    assert history_tables_enabled({"MVS_HISTORY_TABLES": "1"})
    assert not history_tables_enabled({"MVS_HISTORY_TABLES": "0"})


# -- the loop --------------------------------------------------------------------------------------
class DeltaLikeWriter:
    """Keeps rows per table and Delta's rule: a write whose txnVersion is not above the recorded one
    for its app id is skipped."""

    def __init__(self) -> None:
        self.rows: dict[str, list[dict[str, Any]]] = {REFRESH_HISTORY_TABLE: [], TASKS_TABLE: []}
        self.txns: dict[str, int] = {}
        self.fail_next = 0
        self.conflicts_next = 0
        self.merges = 0

    def recorded_offset(self, table: str, app_id: str) -> int:
        return self.txns.get(app_id, -1)

    def _commit(self, table: str, rows: Sequence[dict[str, Any]], app_id: str, last_offset: int) -> None:
        if self.fail_next:
            self.fail_next -= 1
            raise RuntimeError("storage unavailable")
        if last_offset <= self.txns.get(app_id, -1):
            return
        self.txns[app_id] = last_offset
        self.rows[table].extend(rows)

    def append_history(self, rows: Sequence[dict[str, Any]], *, app_id: str, last_offset: int) -> None:
        self._commit(REFRESH_HISTORY_TABLE, rows, app_id, last_offset)

    def merge_tasks(self, rows: Sequence[dict[str, Any]], removed: Sequence[dict[str, Any]]) -> None:
        if self.conflicts_next:
            self.conflicts_next -= 1
            raise WriteConflict("ConcurrentAppendException: files were added by a concurrent update")
        self.merges += 1
        self.rows[TASKS_TABLE].extend(rows)


class Fleet:
    def __init__(self) -> None:
        self.bus = MemoryBus()
        self.writer = DeltaLikeWriter()
        self.clock = ManualClock()
        self.settings = Settings(bootstrap_servers="memory:0", worker_id="w1")

    def sink(self) -> HistorySink:
        sink = HistorySink(
            self.settings, bus=self.bus, writer=self.writer, clock=self.clock, metrics=SchedMetrics()
        )
        sink.start()
        self.bus.assign(self.settings.group("history"), "runs", [0, 1, 2])
        return sink

    def flush(self, sink: HistorySink) -> None:
        sink.step(0)  # polls what is there
        self.clock.advance(FLUSH_EVERY_S)
        sink.step(0)

    def run_ids(self) -> list[str]:
        return [row["run_id"] for row in self.writer.rows[REFRESH_HISTORY_TABLE]]


def test_run_ends_are_written_once_and_committed_after_the_write() -> None:
    fleet = Fleet()
    for record in (
        run("r1", "PENDING"),
        run("r1", "RUNNING"),
        run("r1", "COMPLETED", "complete: first build"),
    ):
        fleet.bus.publish("runs", "mv:sales_by_region", record, partition=0)
    fleet.bus.publish("runs", "mv:sales_by_region", run("r2", "ERROR", "gave up"), partition=1)
    sink = fleet.sink()
    sink.step(0)
    sink.step(0)
    assert fleet.run_ids() == [], "nothing is written before the batch is FLUSH_EVERY_S old"
    fleet.flush(sink)
    assert sorted(fleet.run_ids()) == ["r1", "r2"]
    group = fleet.settings.group("history")
    assert fleet.bus.committed[(group, "runs", 0)] == 3 and fleet.bus.committed[(group, "runs", 1)] == 1
    fleet.flush(sink)
    assert sorted(fleet.run_ids()) == ["r1", "r2"]


def test_a_batch_replayed_after_a_lost_kafka_commit_is_not_written_again() -> None:
    fleet = Fleet()
    fleet.bus.publish("runs", "k", run("r1", "COMPLETED"), partition=0)
    first = fleet.sink()
    fleet.flush(first)
    first.close()
    fleet.bus.committed.clear()  # the Delta commit landed, the Kafka commit did not (a crash between)
    fleet.bus.publish("runs", "k", run("r2", "COMPLETED"), partition=0)
    second = fleet.sink()  # replays r1 with r2 in one larger batch
    fleet.flush(second)
    assert fleet.run_ids() == ["r1", "r2"]


def test_a_failed_write_keeps_the_batch_uncommitted_for_the_next_try() -> None:
    fleet = Fleet()
    fleet.bus.publish("runs", "k", run("r1", "ERROR", "x"), partition=2)
    sink = fleet.sink()
    fleet.writer.fail_next = 1
    sink.step(0)
    fleet.clock.advance(FLUSH_EVERY_S)
    with pytest.raises(RuntimeError):
        sink.step(0)  # the loop logs, backs off and steps again
    assert (fleet.settings.group("history"), "runs", 2) not in fleet.bus.committed
    sink.step(0)
    assert fleet.run_ids() == ["r1"]


def test_a_revoked_partition_drops_its_buffer_uncommitted() -> None:
    fleet = Fleet()
    fleet.bus.publish("runs", "k", run("r1", "COMPLETED"), partition=0)
    sink = fleet.sink()
    sink.step(0)
    fleet.bus.revoke(fleet.settings.group("history"), "runs", [0])
    fleet.flush(sink)
    assert fleet.run_ids() == [] and (fleet.settings.group("history"), "runs", 0) not in fleet.bus.committed


def test_task_states_of_every_catalog_partition_are_one_merge() -> None:
    fleet = Fleet()
    task = fixture("TaskRecord")
    fleet.bus.publish("catalog", "mv:a", {**task, "task_id": "mv:a", "state": "NORMAL"}, partition=3)
    fleet.bus.publish("catalog", "mv:a", {**task, "task_id": "mv:a", "state": "FAILED"}, partition=3)
    fleet.bus.publish("catalog", "mv:b", {**task, "task_id": "mv:b", "state": "PAUSED"}, partition=7)
    sink = fleet.sink()
    fleet.bus.assign(fleet.settings.group("history"), "catalog", [3, 7])
    fleet.flush(sink)
    tasks = sorted((r["task_id"], r["state"]) for r in fleet.writer.rows[TASKS_TABLE])
    assert tasks == [("mv:a", "FAILED"), ("mv:b", "PAUSED")] and fleet.writer.merges == 1
    group = fleet.settings.group("history")
    assert (fleet.bus.committed[(group, "catalog", 3)], fleet.bus.committed[(group, "catalog", 7)]) == (2, 1)


def test_a_concurrent_merge_is_written_again_at_the_next_flush_without_a_loop_error() -> None:
    fleet = Fleet()
    fleet.bus.publish("catalog", "mv:a", {**fixture("TaskRecord"), "task_id": "mv:a"}, partition=1)
    sink = fleet.sink()
    fleet.bus.assign(fleet.settings.group("history"), "catalog", [1])
    fleet.writer.conflicts_next = 1
    fleet.flush(sink)  # no exception: the loop is not backing off
    assert (
        fleet.writer.merges == 0
        and (fleet.settings.group("history"), "catalog", 1) not in fleet.bus.committed
    )
    sink.step(0)
    assert fleet.writer.merges == 0, "not before the next flush is due"
    fleet.clock.advance(FLUSH_EVERY_S)
    sink.step(0)
    assert [r["task_id"] for r in fleet.writer.rows[TASKS_TABLE]] == ["mv:a"]
    assert fleet.bus.committed[(fleet.settings.group("history"), "catalog", 1)] == 1


def test_the_sinks_consumer_may_spend_a_slow_flush_without_leaving_its_group() -> None:
    role = Settings(max_poll_interval_ms=30_000, session_timeout_ms=6000)
    config = consumer_config(sink_settings(role), "ns.history")
    assert config["max.poll.interval.ms"] == "300000"  # a Spark flush under load, not a hung role
    assert config["session.timeout.ms"] == "6000"  # a dead worker's partitions still move at once
    assert consumer_config(role, "ns.workers")["max.poll.interval.ms"] == "30000"  # the roles' own
