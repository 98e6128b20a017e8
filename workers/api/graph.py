"""The status page's dependency graph: base tables → MVs, an MV over MVs as a chain. Pure: from
catalog entries only (``TaskRecord`` dicts), laid out in columns for the page to draw.

A node's ``depth`` is its column: 0 for a table no MV writes, one more than its deepest input for an
MV. An edge that skips columns takes a row of its own in each column it passes, so it never runs
behind a node (a layered, Sugiyama-style drawing). ``row`` orders a column so that lines cross
little: each slot sits near the mean row of what it joins (the barycenter heuristic, ``_order``).
"""

from __future__ import annotations

from collections.abc import Mapping

from typing_extensions import TypedDict

from workers.records import Record


class GraphNodeJson(TypedDict):
    name: str
    kind: str  # "table": a base table no MV writes; "mv": a materialized view
    task_id: str | None  # the MV's refresh task (None for a table)
    inputs: list[str]  # the tables and MVs the MV's query reads (empty for a table)
    mv_log: bool  # an MV log keeps this table's change rows (CREATE MATERIALIZED VIEW LOG)
    version: int | None  # the table's newest Delta version, where it was read (an MV's input)
    depth: int  # the column: 0 for tables, 1 + the deepest input for an MV
    row: int  # the position in its column, from 0


class GraphEdgeJson(TypedDict):
    source: str  # the table or MV read
    target: str  # the MV that reads it
    via_rows: list[int]  # an edge past the next column: its row in each column between the two
    # The edge's lag: versions of the source committed since the version the target reflects
    # (None: the source's version or the target's watermark not known yet).
    behind_versions: int | None


class GraphJson(TypedDict):
    nodes: list[GraphNodeJson]
    edges: list[GraphEdgeJson]


def _inputs(tasks: Mapping[str, Record]) -> dict[str, list[str]]:
    """MV name → the names its query reads, sorted."""
    return {
        task["name"]: sorted(set(task["mv"]["base_tables"]))
        for task in tasks.values()
        if task["kind"] == "MV" and task.get("mv")
    }


def _depths(inputs: Mapping[str, list[str]]) -> dict[str, int]:
    """Each MV's column. The coordinator refuses cycles; one met anyway (an older catalog) is cut
    where it closes, so the graph still draws."""
    depths: dict[str, int] = {}
    visiting: set[str] = set()

    def depth(name: str) -> int:
        if name not in inputs:
            return 0
        if name in depths:
            return depths[name]
        if name in visiting:
            return 0
        visiting.add(name)
        found = 1 + max((depth(source) for source in inputs[name]), default=0)
        visiting.discard(name)
        depths[name] = found
        return found

    for name in sorted(inputs):
        depth(name)
    return depths


def dependency_graph(tasks: Mapping[str, Record], versions: Mapping[str, int | None]) -> GraphJson:
    """The graph of the catalog's MVs (task id → TaskRecord) and the tables they read, with the
    newest Delta versions known (``StatusSnapshot.versions``: the tables MVs read)."""
    inputs = _inputs(tasks)
    task_ids = {task["name"]: task["task_id"] for task in tasks.values() if task["kind"] == "MV"}
    marks = {task["name"]: task.get("checkpoint") or {} for task in tasks.values() if task["kind"] == "MV"}
    logged = {task["name"] for task in tasks.values() if task["kind"] == "MV_LOG"}
    tables = ({source for sources in inputs.values() for source in sources} | logged) - set(inputs)
    depths = {table: 0 for table in tables} | _depths(inputs)
    # A column's slots: its nodes, and a point for each longer edge that passes through it.
    slots: dict[int, list[str]] = {}
    before: dict[str, list[str]] = {}  # a slot → the slots it joins in the column to its left
    for name in depths:
        slots.setdefault(depths[name], []).append(name)
        before[name] = []
    passes: dict[tuple[str, str], list[str]] = {}
    for target in sorted(inputs):
        for source in inputs[target]:
            previous = source
            passes[source, target] = []
            for depth in range(depths[source] + 1, depths[target]):
                point = f"{source}->{target}@{depth}"  # no name has these characters
                slots[depth].append(point)
                before[point] = [previous]
                passes[source, target].append(point)
                previous = point
            before[target].append(previous)
    rows = _order(slots, before)
    nodes: list[GraphNodeJson] = [
        {
            "name": name,
            "kind": "mv" if name in inputs else "table",
            "task_id": task_ids.get(name) if name in inputs else None,
            "inputs": inputs.get(name, []),
            "mv_log": name in logged,
            "version": versions.get(name),
            "depth": depths[name],
            "row": rows[name],
        }
        for name in sorted(depths, key=lambda n: (depths[n], rows[n]))
    ]
    edges: list[GraphEdgeJson] = [
        {
            "source": source,
            "target": target,
            "via_rows": [rows[point] for point in points],
            "behind_versions": _behind(versions.get(source), marks.get(target, {}).get(source)),
        }
        for (source, target), points in passes.items()
    ]
    return {"nodes": nodes, "edges": edges}


def _behind(latest: int | None, reflected: int | None) -> int | None:
    return None if latest is None or reflected is None else max(0, latest - reflected)


def _order(slots: dict[int, list[str]], before: Mapping[str, list[str]]) -> dict[str, int]:
    """Each slot's row: by name, then sweeps left to right (by the slots joined on the left), right
    to left (on the right) and left to right again, each slot moving to the mean row of what it joins
    on that side (one that joins nothing there keeps its row; ties keep the order they had)."""
    after: dict[str, list[str]] = {slot: [] for slot in before}
    for slot, sources in before.items():
        for source in sources:
            after[source].append(slot)
    rows = {slot: row for column in slots.values() for row, slot in enumerate(sorted(column))}
    depths = sorted(slots)
    for neighbours, sweep in ((before, depths[1:]), (after, depths[-2::-1]), (before, depths[1:])):
        for depth in sweep:
            slots[depth].sort(key=lambda slot: (_mean_row(neighbours[slot], rows, rows[slot]), rows[slot]))
            rows.update((slot, row) for row, slot in enumerate(slots[depth]))
    return rows


def _mean_row(neighbours: list[str], rows: Mapping[str, int], alone: int) -> float:
    return sum(rows[n] for n in neighbours) / len(neighbours) if neighbours else alone
