"""Issue 12 item 6a: a fleet's runs and task states as Delta tables, each run end exactly once.

Real broker, Spark and Delta: a coordinator and a worker run MVs (one refresh fails: its base table
is deleted), a ``HistorySink`` writes ``mvs_refresh_history`` / ``mvs_tasks``, and a second sink that
starts from the beginning of the topics (a crash between the Delta and the Kafka commit, or a second
copy) adds nothing but the runs that came after."""

from __future__ import annotations

import json
import shutil
import threading
from collections.abc import Iterator
from typing import Any

import pytest

from tests.support.cluster import Cluster, wait_until
from tests.support.sales import BY_REGION, SCHEMA, rows
from workers import warehouse
from workers.bus import BusConsumer, KafkaBus
from workers.catalog.names import REFRESH_HISTORY_TABLE, TASKS_TABLE
from workers.cli import main
from workers.config import Settings
from workers.demo_tables import create_table
from workers.worker.history_rows import FINAL_RUN_STATES
from workers.worker.history_sink import HistorySink


class ReplayingBus(KafkaBus):
    """A bus whose consumers join a new group: they read the topics from the beginning, as a sink
    does whose Kafka commits were lost after its Delta commits."""

    def consumer(self, group_id: str | None) -> BusConsumer:
        return super().consumer(None if group_id is None else f"{group_id}.replay")


class RunningSink:
    def __init__(self, sink: HistorySink) -> None:
        self.sink = sink
        self.stop = threading.Event()
        self.thread = threading.Thread(target=sink.run, args=(self.stop,), name="history-sink", daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.stop.set()
        self.thread.join(60)


@pytest.fixture
def sinks(settings: Settings) -> Iterator[list[RunningSink]]:
    started: list[RunningSink] = []
    yield started
    for sink in started:
        sink.close()


class Table:
    """A Delta table read with Spark only when its log has a new version (polling stays cheap)."""

    def __init__(self, spark: Any, settings: Settings, name: str) -> None:
        self.spark, self.settings, self.name = spark, settings, name
        self._version: int | None = None
        self._rows: list[dict[str, Any]] = []

    def rows(self) -> list[dict[str, Any]]:
        version = warehouse.latest_version(self.settings, self.name)
        if version is not None and version != self._version:
            self._rows, self._version = self.where("true"), version
        return self._rows

    def where(self, condition: str) -> list[dict[str, Any]]:
        path = warehouse.table_path(self.settings, self.name)
        return [
            r.asDict() for r in self.spark.sql(f"SELECT * FROM delta.`{path}` WHERE {condition}").collect()
        ]


def ended_runs(cluster: Cluster) -> dict[str, str]:
    return {
        r["run_id"]: r["state"] for r in cluster.client.history(limit=1000) if r["state"] in FINAL_RUN_STATES
    }


def refresh_and_wait(cluster: Cluster, name: str, before: set[str]) -> str:
    assert cluster.sql(f"REFRESH MATERIALIZED VIEW {name}")["accepted"]
    new = wait_until(
        lambda: {
            r["run_id"]
            for r in cluster.client.history(f"mv:{name}", limit=1000)
            if r["state"] in FINAL_RUN_STATES and r["run_id"] not in before
        },
        what=f"a run of {name} ending",
    )
    return str(next(iter(new)))


def test_runs_and_tasks_land_in_delta_exactly_once_across_a_replay(
    cluster: Cluster,
    spark: Any,
    sinks: list[RunningSink],
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    settings = cluster.settings
    create_table(spark, settings, "returns", rows(0, 3), SCHEMA)
    assert cluster.sql(f"CREATE MATERIALIZED VIEW by_region REFRESH COMPLETE ON DEMAND AS {BY_REGION}")[
        "accepted"
    ]
    doomed = BY_REGION.replace("sales", "returns")
    assert cluster.sql(f"CREATE MATERIALIZED VIEW doomed REFRESH COMPLETE ON DEMAND AS {doomed}")["accepted"]
    refresh_and_wait(cluster, "by_region", set())
    refresh_and_wait(cluster, "doomed", set())
    shutil.rmtree(warehouse.table_path(settings, "returns"))
    failed = refresh_and_wait(cluster, "doomed", set(ended_runs(cluster)))
    assert ended_runs(cluster)[failed] == "ERROR"

    sinks.append(RunningSink(HistorySink(settings, flush_every_s=1.0)))
    history, tasks = Table(spark, settings, REFRESH_HISTORY_TABLE), Table(spark, settings, TASKS_TABLE)
    expected = ended_runs(cluster)
    wait_until(lambda: len(history.rows()) >= len(expected), what="every run end in mvs_refresh_history")
    assert sorted(r["run_id"] for r in history.rows()) == sorted(expected)
    errors = history.where("state = 'ERROR'")
    assert [(r["run_id"], r["name"], r["error_code"]) for r in errors] == [(failed, "doomed", 1003)]
    assert {r["refresh_type"] for r in history.rows() if r["state"] == "COMPLETED"} == {"COMPLETE"}
    # Each refresh's planning information, in the table and in `mvs history --output json`.
    (built,) = history.where("name = 'by_region' AND state = 'COMPLETED'")
    assert built["planning_reason"] == "complete: refresh mode COMPLETE"
    assert built["complete_estimated_ms"] > 0 and built["fast_estimated_ms"] is None
    assert (built["change_rows"], built["base_rows"]) == (None, 12)  # a first build has no range
    assert (built["rows_inserted"], built["rows_deleted"]) == (3, 0)
    for name, value in (("BOOTSTRAP_SERVERS", settings.bootstrap_servers), ("NAMESPACE", settings.namespace)):
        monkeypatch.setenv(f"MVS_{name}", value)
    monkeypatch.setenv("MVS_WAREHOUSE", settings.warehouse)
    capsys.readouterr()
    assert main(["history", "by_region", "--output", "json"]) == 0
    (run,) = [r for r in json.loads(capsys.readouterr().out)["runs"] if r["state"] == "COMPLETED"]
    planning = run["planning"]
    assert (planning["choice"], planning["reason"]) == ("COMPLETE", "complete: refresh mode COMPLETE")
    fast, complete = planning["candidates"]
    assert (fast["technique"], fast["available"], fast["note"]) == ("FAST", False, "refresh mode COMPLETE")
    assert complete["technique"] == "COMPLETE" and complete["estimated_ms"] == built["complete_estimated_ms"]
    assert (planning["base_rows"], run["rows_inserted"], run["rows_deleted"]) == (12, 3, 0)
    states = wait_until(
        lambda: (
            (got := {r["task_id"]: r["state"] for r in tasks.rows()}).get("mv:doomed") == "FAILED" and got
        ),
        what="mvs_tasks showing the failed MV",
    )
    assert states == {"mv:by_region": "NORMAL", "mv:doomed": "FAILED"}

    # Restarted from the beginning of the topics: the replayed runs are dropped, the new one added.
    sinks.pop().close()
    sinks.append(RunningSink(HistorySink(settings, bus=ReplayingBus(settings), flush_every_s=1.0)))
    later = refresh_and_wait(cluster, "by_region", set(ended_runs(cluster)))
    wait_until(lambda: later in {r["run_id"] for r in history.rows()}, what="the run after the restart")
    assert sorted(r["run_id"] for r in history.rows()) == sorted([*expected, later])
