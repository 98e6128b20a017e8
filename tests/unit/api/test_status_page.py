"""The status page's pure parts: the dependency graph (columns, chains, rows), each MV's freshness
against its trigger, the ``GET /overview`` document, and the page and its files as ``mvs serve``
answers them (no broker: the client's reads are stand-ins). The browser and a real fleet:
tests/integration/test_status_page.py."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from fastapi.testclient import TestClient

from tests.unit.api.test_api_json import SETTINGS
from tests.unit.test_views_json import NOW_MS, fixture, mv_log_task, snapshot
from workers.api.app import create_app
from workers.api.freshness import REFRESH_GRACE_MS, freshness_json, goal_ms
from workers.api.graph import dependency_graph
from workers.api.overview import overview_json
from workers.client import MvsClient, NotAuthorized
from workers.freshness import WarehouseCommits, behind_since, missed_versions
from workers.views import run_json, status_json

MINUTE = 60_000


def mv(name: str, bases: list[str], **changes: Any) -> dict[str, Any]:
    """A catalog entry of MV ``name`` reading ``bases`` (the frozen fixture's other fields)."""
    record = fixture("TaskRecord")
    spec = {**record["mv"], "base_tables": bases, **changes.pop("mv", {})}
    return {**record, "task_id": f"mv:{name}", "name": name, "mv": spec, "error": None, **changes}


def by_id(*tasks: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {task["task_id"]: task for task in tasks}


def trigger(kind: str, interval_ms: int | None = None) -> dict[str, Any]:
    return {"mv": {"trigger": {"kind": kind, "interval_ms": interval_ms}}}


# ---- the graph


def test_an_mv_over_mvs_is_a_chain_of_columns() -> None:
    tasks = by_id(
        mv("daily", ["sales"]),
        mv("weekly", ["daily"]),
        mv("report", ["weekly", "regions"]),
        {**mv_log_task()},
    )
    graph = dependency_graph(tasks, {})
    columns = {node["name"]: (node["kind"], node["depth"]) for node in graph["nodes"]}
    assert columns == {
        "regions": ("table", 0),
        "sales": ("table", 0),
        "daily": ("mv", 1),
        "weekly": ("mv", 2),
        "report": ("mv", 3),
    }
    # regions → report passes columns 1 and 2 on a row of its own, above daily and weekly
    assert {(e["source"], e["target"]): e["via_rows"] for e in graph["edges"]} == {
        ("sales", "daily"): [],
        ("daily", "weekly"): [],
        ("weekly", "report"): [],
        ("regions", "report"): [0, 0],
    }
    nodes = {node["name"]: node for node in graph["nodes"]}
    assert [nodes[n]["row"] for n in ("regions", "sales", "daily", "weekly", "report")] == [0, 1, 1, 1, 0]
    assert nodes["sales"]["mv_log"] and not nodes["regions"]["mv_log"]
    assert nodes["report"]["task_id"] == "mv:report" and nodes["sales"]["task_id"] is None
    assert nodes["report"]["inputs"] == ["regions", "weekly"]
    versions = {"sales": 7, "daily": 2, "regions": None}
    shown = {n["name"]: n["version"] for n in dependency_graph(tasks, versions)["nodes"]}
    assert shown == {"sales": 7, "regions": None, "daily": 2, "weekly": None, "report": None}


def test_each_edge_says_how_many_versions_of_its_source_its_target_is_behind() -> None:
    tasks = by_id(
        mv("daily", ["sales"], checkpoint={"sales": 5}),
        mv("weekly", ["daily"], checkpoint={"daily": 2}),
        mv("report", ["weekly"], checkpoint={}),
    )
    edges = dependency_graph(tasks, {"sales": 7, "daily": 2, "weekly": 4})["edges"]
    behind = {(e["source"], e["target"]): e["behind_versions"] for e in edges}
    assert behind == {("sales", "daily"): 2, ("daily", "weekly"): 0, ("weekly", "report"): None}


def test_rows_follow_their_inputs_so_lines_cross_little() -> None:
    tasks = by_id(mv("on_c", ["c"]), mv("on_a", ["a"]), mv("on_b", ["b"]), mv("on_a_and_c", ["a", "c"]))
    graph = dependency_graph(tasks, {})
    rows = {node["name"]: (node["depth"], node["row"]) for node in graph["nodes"]}
    assert [rows[t] for t in ("a", "b", "c")] == [(0, 0), (0, 1), (0, 2)]
    # barycenters: on_a 0, on_b 1, on_a_and_c 1 (tie: the name order), on_c 2
    assert [rows[m] for m in ("on_a", "on_a_and_c", "on_b", "on_c")] == [(1, 0), (1, 1), (1, 2), (1, 3)]


def test_a_table_moves_next_to_what_reads_it() -> None:
    """By name customers would come first; the sweeps put each table beside what reads it: regions
    by its long edge on the top row, customers below sales, next to top; no two lines cross."""
    tasks = by_id(
        mv("top", ["customers", "sales"]), mv("daily", ["sales"]), mv("report", ["daily", "regions"])
    )
    graph = dependency_graph(tasks, {})
    rows = {node["name"]: node["row"] for node in graph["nodes"]}
    assert rows == {"regions": 0, "sales": 1, "customers": 2, "daily": 1, "top": 2, "report": 0}
    assert {(e["source"], e["target"]): e["via_rows"] for e in graph["edges"]}[("regions", "report")] == [0]


def test_a_cycle_from_an_older_catalog_still_draws() -> None:
    graph = dependency_graph(by_id(mv("x", ["y"]), mv("y", ["x"])), {})
    assert sorted((n["name"], n["kind"]) for n in graph["nodes"]) == [("x", "mv"), ("y", "mv")]
    assert len(graph["edges"]) == 2


def test_no_tasks_no_graph() -> None:
    assert dependency_graph({}, {}) == {"nodes": [], "edges": []}


# ---- freshness


def fresh(task: dict[str, Any], lag_versions: int | None, behind_since: int | None) -> dict[str, Any]:
    return dict(freshness_json(task, lag_versions, behind_since, NOW_MS))


def test_goals_follow_the_trigger() -> None:
    took = 30_000  # the last run's duration when it is longer than the grace
    last_run = {**fixture("TaskRecord")["last_run"], "started_at": 0, "ended_at": took}
    assert goal_ms(mv("v", ["s"], **trigger("TARGET_LAG", 5 * MINUTE))) == 5 * MINUTE
    assert goal_ms(mv("v", ["s"], **trigger("EVERY", MINUTE))) == MINUTE + REFRESH_GRACE_MS
    assert goal_ms(mv("v", ["s"], last_run=last_run, **trigger("EVERY", MINUTE))) == MINUTE + took
    assert goal_ms(mv("v", ["s"], **trigger("ON_CHANGE"))) == 1000 + REFRESH_GRACE_MS
    assert goal_ms(mv("v", ["s"], **trigger("ON_DEMAND"))) is None


def test_freshness_is_lag_against_the_goal() -> None:
    target = mv("v", ["s"], state="NORMAL", **trigger("TARGET_LAG", MINUTE))
    assert fresh(target, 0, None) | {"reason": ""} == {
        "task_id": "mv:v",
        "name": "v",
        "status": "fresh",
        "lag_ms": 0,
        "goal_ms": MINUTE,
        "behind_since_ms": None,
        "reason": "",
    }
    within = fresh(target, 2, NOW_MS - 40_000)
    assert (within["status"], within["lag_ms"]) == ("fresh", 40_000)
    assert within["reason"] == "2 version(s) behind for 40s (goal 60s)"
    assert fresh(target, 2, NOW_MS - 90_000)["status"] == "late"
    assert fresh(target, 2, NOW_MS - 121_000)["status"] == "stale"
    assert fresh(target, 2, None)["status"] == "unknown"
    on_demand = mv("v", ["s"], state="NORMAL", **trigger("ON_DEMAND"))
    days_behind = fresh(on_demand, 1, NOW_MS - 3 * 86_400_000)
    assert (days_behind["status"], days_behind["goal_ms"]) == ("late", None)
    assert "on demand" in days_behind["reason"]


def test_paused_and_failed_come_before_lag() -> None:
    failed_run = {**fixture("TaskRecord")["last_run"], "state": "ERROR", "message": "gave up"}
    assert fresh(mv("v", ["s"], state="PAUSED"), 0, None)["status"] == "paused"
    failed = fresh(mv("v", ["s"], state="FAILED", error=fixture("TaskRecord")["error"]), None, None)
    assert (failed["status"], failed["reason"]) == ("error", "failed: storage unavailable")
    retrying = fresh(mv("v", ["s"], state="WARNING", last_run=failed_run), 0, None)
    assert (retrying["status"], retrying["reason"]) == ("error", "last run failed: gave up")


def test_behind_since_is_the_oldest_unreflected_commit_but_not_before_the_mv() -> None:
    task = mv("v", ["a", "b"], checkpoint={"a": 3, "b": 7}, created_at=1_000)
    asked: list[tuple[str, int]] = []

    def read_commit(table: str, version: int) -> list[dict[str, Any]]:
        asked.append((table, version))
        return [{"commitInfo": {"timestamp": 50_000 + version}}]

    def since(task: dict[str, Any], read: Any = read_commit) -> int | None:
        commits = WarehouseCommits({"a": 5, "b": 7}.get, read)
        return behind_since(task, missed_versions(task, commits), commits)

    assert since(task) == 50_004
    assert asked == [("a", 4)]  # b is current: its times are not read
    assert since({**task, "created_at": 60_000}) == 60_000
    assert since(task, lambda table, version: []) is None, "no commit time: unknown"
    assert since({**task, "checkpoint": {}}) == 1_000, "never built: behind since its creation"


def test_a_declared_freshness_goal_is_the_pages_goal_too() -> None:
    every = trigger("EVERY", MINUTE)
    every["mv"]["freshness_ms"] = 5 * MINUTE
    assert goal_ms(mv("v", ["s"], **every)) == 5 * MINUTE


# ---- the document and the page


def test_the_overview_is_the_status_with_graph_freshness_and_runs() -> None:
    state = snapshot(versions={"sales": 18})  # the fixture MV reflects sales@v17
    runs = [run_json(fixture("RunRecord"))]
    overview = overview_json(
        state, runs, "mvs", lambda table, version: [{"commitInfo": {"timestamp": NOW_MS - 5_000}}]
    )
    assert {k: v for k, v in overview.items() if k in status_json(state, "mvs")} == status_json(state, "mvs")
    assert [(n["name"], n["version"]) for n in overview["graph"]["nodes"]] == [
        ("sales", 18),
        ("sales_by_region", None),
    ]
    [only] = overview["freshness"]  # MV logs have none
    assert (only["task_id"], only["status"], only["lag_ms"]) == ("mv:sales_by_region", "fresh", 5_000)
    assert overview["runs"] == runs


@pytest.fixture
def api() -> Iterator[TestClient]:
    with TestClient(create_app(SETTINGS), raise_server_exceptions=False) as client:
        yield client


def test_the_page_and_its_files_are_served(api: TestClient) -> None:
    for path in ("/", "/status"):
        page = api.get(path)
        assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
        assert '<script src="static/status.js">' in page.text and 'id="graph"' in page.text
    script = api.get("/static/status.js")
    assert script.status_code == 200 and 'fetch("overview"' in script.text
    assert api.get("/static/status.css").status_code == 200
    assert api.get("/static/nothing.js").status_code == 404
    paths = api.get("/openapi.json").json()["paths"]
    assert "/overview" in paths and "/" not in paths and "/status" not in paths


def test_overview_reads_runs_newest_first_and_notes_what_it_may_not_read(
    api: TestClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    older = {**fixture("RunRecord"), "run_id": "run-1", "started_at": 1}
    newer = {**fixture("RunRecord"), "run_id": "run-2", "started_at": 2}
    monkeypatch.setattr(MvsClient, "status_snapshot", lambda self, **kwargs: snapshot())
    monkeypatch.setattr(MvsClient, "history", lambda self, *args, **kwargs: [older, newer])
    answer = api.get("/overview")
    assert answer.status_code == 200
    assert [run["run_id"] for run in answer.json()["runs"]] == ["run-2", "run-1"]

    def refused(self: MvsClient, *args: Any, **kwargs: Any) -> list[Any]:
        raise NotAuthorized("not authorized to read topic mvs.runs")

    monkeypatch.setattr(MvsClient, "history", refused)
    answer = api.get("/overview")
    assert answer.status_code == 200 and answer.json()["runs"] == []
    assert answer.json()["notes"] == ["runs: not authorized to read topic mvs.runs"]


def test_overview_without_a_broker_is_503(api: TestClient) -> None:
    answer = api.get("/overview")
    assert answer.status_code == 503 and answer.json()["error_code"] == 3001
