"""``GET /overview``: everything the status page shows in one document — the status of every task
and role (as ``GET /mvs``), the dependency graph, each MV's freshness, and the last runs of all
tasks with their messages (why a run was incremental or complete)."""

from __future__ import annotations

from collections.abc import Callable

from workers.api.freshness import FreshnessJson, behind_since_ms, freshness_json
from workers.api.graph import GraphJson, dependency_graph
from workers.client import Deadline, MvsClient, NotAuthorized, StatusSnapshot, TopicNotFound
from workers.config import Settings
from workers.status import behind_versions
from workers.views import RunJson, StatusJson, run_json, status_json
from workers.warehouse import read_commit

RECENT_RUNS = 25


class OverviewJson(StatusJson):
    graph: GraphJson
    freshness: list[FreshnessJson]  # one per MV, by task id
    runs: list[RunJson]  # the newest runs of every task, newest first


def commit_time_ms(settings: Settings, table: str, version: int) -> int | None:
    """When version ``version`` of ``table`` was committed (its ``commitInfo.timestamp``), or None:
    a remote warehouse, a commit file cleaned up, or no timestamp."""
    try:
        actions = read_commit(settings, table, version)
    except (OSError, ValueError, NotImplementedError):
        return None
    for action in actions:
        at = (action.get("commitInfo") or {}).get("timestamp")
        if isinstance(at, int):
            return at
    return None


def overview_json(
    snapshot: StatusSnapshot,
    runs: list[RunJson],
    namespace: str,
    commit_time: Callable[[str, int], int | None],
) -> OverviewJson:
    """The page's document from a status snapshot, the recent runs (newest first) and a lookup of
    base commit times (``commit_time_ms``, a stand-in in unit tests)."""
    freshness = []
    for task_id in sorted(snapshot.tasks):
        task = snapshot.tasks[task_id]
        if task["kind"] != "MV" or not task.get("mv"):
            continue
        since = behind_since_ms(task, snapshot.latest_version, commit_time)
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
    overview = overview_json(snapshot, runs, settings.namespace, lambda t, v: commit_time_ms(settings, t, v))
    overview["notes"] += notes
    return overview
