"""``GET /overview``: everything the status page shows in one document — the status of every task
and role (as ``GET /mvs``), the dependency graph, each MV's freshness, and the last runs of all
tasks with their messages (why a run was incremental or complete)."""

from __future__ import annotations

from collections.abc import Callable

from workers.api.freshness import FreshnessJson, freshness_json
from workers.api.graph import GraphJson, dependency_graph
from workers.client import Deadline, MvsClient, NotAuthorized, StatusSnapshot, TopicNotFound
from workers.config import Settings
from workers.freshness import WarehouseCommits, behind_since, missed_versions
from workers.records import Record
from workers.status import behind_versions
from workers.views import RunJson, StatusJson, run_json, status_json
from workers.warehouse import read_commit

RECENT_RUNS = 25


class OverviewJson(StatusJson):
    graph: GraphJson
    freshness: list[FreshnessJson]  # one per MV, by task id
    runs: list[RunJson]  # the newest runs of every task, newest first


def overview_json(
    snapshot: StatusSnapshot,
    runs: list[RunJson],
    namespace: str,
    read_commit: Callable[[str, int], list[Record]],
) -> OverviewJson:
    """The page's document from a status snapshot, the recent runs (newest first) and a reader of
    base commits (``workers.warehouse.read_commit``, a stand-in in unit tests)."""
    commits = WarehouseCommits(snapshot.latest_version, read_commit)
    freshness = []
    for task_id in sorted(snapshot.tasks):
        task = snapshot.tasks[task_id]
        if task["kind"] != "MV" or not task.get("mv"):
            continue
        since = behind_since(task, missed_versions(task, commits), commits)
        lag = behind_versions(task, snapshot.latest_version)
        freshness.append(freshness_json(task, lag, since, snapshot.at_ms))
    return {
        **status_json(snapshot, namespace),
        "graph": dependency_graph(snapshot.tasks, snapshot.versions),
        "freshness": freshness,
        "runs": runs,
    }


def read_overview(client: MvsClient, settings: Settings, timeout_s: float) -> OverviewJson:
    """The overview as this client can read it: runs it may not read are a note, not a failure."""
    deadline = Deadline(timeout_s)
    snapshot = client.status_snapshot(timeout_s=deadline.remaining())
    notes: list[str] = []
    try:
        records = client.history(None, limit=RECENT_RUNS, timeout_s=deadline.remaining())
    except (NotAuthorized, TopicNotFound) as exc:
        records, notes = [], [f"runs: {exc}"]
    runs = [run_json(record) for record in reversed(records)]
    overview = overview_json(snapshot, runs, settings.namespace, lambda t, v: read_commit(settings, t, v))
    overview["notes"] += notes
    return overview
