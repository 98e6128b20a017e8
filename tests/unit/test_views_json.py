"""The machine-readable shapes (``workers.views``): the field names README "Machine-readable output"
documents, ISO-8601 UTC times beside epoch ms, enums as names; and ``mvs status|history|tail
--output json`` printing them while the text output stays as it was. Inputs are the frozen Avro
fixtures (real records), so a schema change that breaks a shape fails here."""

from __future__ import annotations

import argparse
import json
import threading
from typing import Any

import pytest

from tests.support.paths import AVRO_FIXTURES as FIXTURES
from workers.cli import command_line as cli
from workers.client import HistorySnapshot, MvsClient, StatusSnapshot
from workers.kafka.messages import Message
from workers.views import history_json, iso, statement_json, status_json, tail_json, task_json

NOW_MS = 1767225630000  # 2026-01-01T00:00:30Z, 30 s after the fixture's last run started


def fixture(name: str) -> dict[str, Any]:
    record: dict[str, Any] = json.loads((FIXTURES / f"{name}.json").read_text())
    return record


def mv_log_task() -> dict[str, Any]:
    return {
        **fixture("TaskRecord"),
        "task_id": "mvlog:sales",
        "kind": "MV_LOG",
        "name": "sales",
        "mv": None,
        "mv_log": {"base_table": "sales", "purge_interval_ms": 60000},
        "state": "NORMAL",
        "error": None,
        "last_run": None,
        "next_run_at": None,
        "owner": None,
    }


def snapshot(**changes: Any) -> StatusSnapshot:
    fields: dict[str, Any] = {
        "tasks": {"mv:sales_by_region": fixture("TaskRecord"), "mvlog:sales": mv_log_task()},
        "coordinators": {"c1": [0], "c2": []},
        "workers": {"host-1234-abcdef": [2, 0, 1]},
        "loop_errors": {"host-1234-abcdef": None},
        "versions": {"sales": 20},
        "notes": [],
        "at_ms": NOW_MS,
        **changes,
    }
    return StatusSnapshot(**fields)


# The fixtures' TaskError, as every shape shows an error.
FIXTURE_ERROR = {
    "code": 2001,
    "message": "storage unavailable",
    "severity": "ERROR",
    "retryable": True,
    "at": "2026-01-01T00:00:00.000Z",
    "at_ms": 1767225600000,
}
TASK_FIELDS = [
    "task_id", "kind", "name", "state", "owner", "epoch", "refresh_mode", "trigger", "driven_by", "query",
    "base_tables", "purge_interval_ms", "watermark", "lag_versions", "next_run_at", "next_run_at_ms",
    "last_run", "error", "created_by", "created_at", "created_at_ms", "updated_at", "updated_at_ms",
]  # fmt: skip


def test_times_are_iso_8601_utc_with_milliseconds() -> None:
    assert iso(0) == "1970-01-01T00:00:00.000Z"
    assert iso(1767225601500) == "2026-01-01T00:00:01.500Z"
    assert iso(None) is None


def test_an_mv_task_has_the_documented_fields_times_twice_and_enums_as_names() -> None:
    shape = task_json(fixture("TaskRecord"), lag_versions=3)
    assert list(shape) == TASK_FIELDS
    assert shape["state"] == "WARNING" and shape["kind"] == "MV" and shape["refresh_mode"] == "FAST"
    assert shape["trigger"] == {"kind": "EVERY", "interval_ms": 60000} and shape["driven_by"] is None
    assert shape["watermark"] == {"sales": 17} and shape["base_tables"] == ["sales"]
    assert shape["lag_versions"] == 3
    assert (shape["next_run_at"], shape["next_run_at_ms"]) == ("2026-01-01T00:01:00.000Z", 1767225660000)
    assert shape["last_run"] == {
        "run_id": "run-1",
        "trigger": "schedule",
        "state": "COMPLETED",
        "started_at": "2026-01-01T00:00:00.000Z",
        "started_at_ms": 1767225600000,
        "ended_at": "2026-01-01T00:00:01.500Z",
        "ended_at_ms": 1767225601500,
        "duration_ms": 1500,
        "rows_written": 42,
        "message": None,
    }
    assert shape["error"] == FIXTURE_ERROR


def test_an_mv_log_task_reads_its_base_table_and_has_no_lag() -> None:
    shape = task_json(mv_log_task(), lag_versions=None)
    assert list(shape) == TASK_FIELDS
    assert shape["base_tables"] == ["sales"] and shape["purge_interval_ms"] == 60000
    assert shape["refresh_mode"] is None and shape["trigger"] is None and shape["last_run"] is None


def test_status_lists_tasks_by_id_with_lag_from_the_warehouse_and_the_live_roles() -> None:
    away = "2026-01-01 00:00:20Z: BusError: broker away (1 in a row)"
    loop_errors = {"host-1234-abcdef": None, "c2": away}
    document = status_json(
        snapshot(notes=["roles: not authorized"], loop_errors=loop_errors, ddl_lag=0), "mvs"
    )
    assert list(document) == ["namespace", "generated_at", "generated_at_ms", "tasks", "roles", "notes"]
    assert document["generated_at"] == "2026-01-01T00:00:30.000Z"
    assert [t["task_id"] for t in document["tasks"]] == ["mv:sales_by_region", "mvlog:sales"]
    # sales is at v20, the MV's watermark at v17: 3 versions behind (as the text table's "3v")
    assert [t["lag_versions"] for t in document["tasks"]] == [3, None]
    assert document["roles"] == [
        {"role": "coordinator", "name": "c1", "state": "active", "partitions": [0], "tasks": None,
         "ddl_lag": 0, "last_loop_error": None},
        {"role": "coordinator", "name": "c2", "state": "standby", "partitions": [], "tasks": None,
         "ddl_lag": None, "last_loop_error": "2026-01-01 00:00:20Z: BusError: broker away (1 in a row)"},
        {"role": "worker", "name": "host-1234-abcdef", "state": "member", "partitions": [0, 1, 2],
         "tasks": 1, "ddl_lag": None, "last_loop_error": None},
    ]  # fmt: skip
    assert document["notes"] == ["roles: not authorized"]
    assert json.loads(json.dumps(document)) == document


def test_an_unreadable_base_table_is_unknown_lag_not_zero() -> None:
    document = status_json(snapshot(versions={"sales": None}), "mvs")
    assert document["tasks"][0]["lag_versions"] is None


def test_history_has_runs_and_ddl_with_their_answers_and_notes_for_what_could_not_be_read() -> None:
    run = fixture("RunRecord")
    entry = {
        "at": 1767225600000,
        "action": "CREATE_MV",
        "name": "sales_by_region",
        "sql": "CREATE MATERIALIZED VIEW ...",
        "issued_by": "alice",
        "answer": fixture("DdlResult"),
    }
    pending = {**entry, "answer": None}
    document = history_json(HistorySnapshot("mv:sales_by_region", [run], [entry, pending]))
    assert list(document) == ["task_id", "runs", "ddl", "notes"]
    (shape,) = document["runs"]
    assert list(shape) == [
        "run_id", "trigger", "state", "started_at", "started_at_ms", "ended_at", "ended_at_ms",
        "duration_ms", "rows_written", "message", "task_id", "epoch", "worker_id", "watermark_before",
        "watermark_after", "error", "planning", "rows_inserted", "rows_deleted",
    ]  # fmt: skip
    assert shape["state"] == "ERROR" and shape["duration_ms"] == 900 and shape["error"]["code"] == 2001
    assert shape["planning"] is None  # a failed run (and a record from before planning) has none
    planned = history_json(
        HistorySnapshot("mv:sales_by_region", [{**run, "planning": fixture("RunPlanning")}], [])
    )
    planning = planned["runs"][0]["planning"]
    assert planning is not None and planning["choice"] == "COMPLETE"
    assert [c["estimated_ms"] for c in planning["candidates"]] == [41_000.0, 12_000.0]
    assert planning["change_rows"] == 2_100_000 and planning["base_rows"] == 3_300_000
    answered, unanswered = document["ddl"]
    assert list(answered) == [
        "issued_at", "issued_at_ms", "action", "name", "sql", "issued_by", "accepted", "task_id", "error",
    ]  # fmt: skip
    assert answered["accepted"] is False and answered["error"]["code"] == 2001  # type: ignore[index]
    assert unanswered["accepted"] is None and unanswered["error"] is None
    unreadable = history_json(HistorySnapshot(None, None, [], runs_note="runs: not authorized"))
    assert unreadable["runs"] == [] and unreadable["notes"] == ["runs: not authorized"]


def test_a_statement_answer_carries_the_event_id_and_the_refusal_code() -> None:
    assert statement_json(fixture("DdlResult")) == {
        "event_id": "evt-2",
        "accepted": False,
        "task_id": None,
        "error": FIXTURE_ERROR,
    }


def test_a_tail_line_says_where_the_record_is_and_keeps_the_schemas_field_names() -> None:
    decoded = Message("catalog", 1, 7, "mv:v", fixture("TaskRecord"), "io.mvs.TaskRecord", (), 1767225600000)
    line = tail_json(decoded)
    assert list(line) == [
        "topic", "partition", "offset", "key", "type", "timestamp", "timestamp_ms", "value", "raw_base64",
        "error",
    ]  # fmt: skip
    assert line["value"] == fixture("TaskRecord") and line["timestamp"] == "2026-01-01T00:00:00.000Z"
    dead = tail_json(Message("dlq", 0, 3, None, None, None, raw=b"\xff\x00", error="not Avro"))
    assert (dead["value"], dead["raw_base64"], dead["error"]) == (None, "/wA=", "not Avro")
    json.dumps(line)


@pytest.fixture
def fake_reads(monkeypatch: pytest.MonkeyPatch) -> None:
    """The client's reads answer from the fixtures (no broker)."""
    monkeypatch.setenv("MVS_BOOTSTRAP_SERVERS", "127.0.0.1:1")
    monkeypatch.setattr(MvsClient, "status_snapshot", lambda self, **kw: snapshot())
    history = HistorySnapshot("mv:sales_by_region", [fixture("RunRecord")], [])
    monkeypatch.setattr(MvsClient, "history_snapshot", lambda self, *a, **kw: history)


@pytest.mark.usefixtures("fake_reads")
def test_status_output_json_is_one_document_and_text_is_the_tables(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert cli.main(["status", "--output", "json"]) == 0
    document = json.loads(capsys.readouterr().out)
    assert [t["task_id"] for t in document["tasks"]] == ["mv:sales_by_region", "mvlog:sales"]
    assert cli.main(["status"]) == 0
    text = capsys.readouterr().out
    assert text.startswith("TASK ") and "ROLE " in text and "3v" in text


@pytest.mark.usefixtures("fake_reads")
def test_history_output_json_is_one_document_and_text_is_the_tables(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert cli.main(["history", "sales_by_region", "--output", "json"]) == 0
    document = json.loads(capsys.readouterr().out)
    assert document["task_id"] == "mv:sales_by_region" and document["runs"][0]["run_id"] == "run-2"
    assert cli.main(["history", "sales_by_region"]) == 0
    text = capsys.readouterr().out
    assert text.startswith("TASK ") and "run-2" in text and "no DDL" in text


def test_tail_output_json_prints_one_flushed_line_per_record(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from workers.cli import commands as cli_commands
    from workers.kafka import typed

    records = [
        Message("catalog", 0, n, f"mv:v{n}", {"n": n}, "io.mvs.TaskRecord", (), 1000 * n) for n in (1, 2)
    ]
    monkeypatch.setattr(typed, "tail", lambda *a, **kw: iter(records))
    monkeypatch.setattr(cli_commands, "_checked", lambda settings, args: settings)
    monkeypatch.setattr(cli_commands, "_stop_event", threading.Event)  # leave pytest's signal handlers
    args = argparse.Namespace(topic="catalog", timeout=5.0, from_beginning=True, output="json", verbose=False)
    assert cli_commands.cmd_tail(cli_commands.Settings(), args) == 0
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [(line["offset"], line["key"], line["value"]) for line in lines] == [
        (1, "mv:v1", {"n": 1}),
        (2, "mv:v2", {"n": 2}),
    ]
    assert lines[1]["timestamp"] == "1970-01-01T00:00:02.000Z"
