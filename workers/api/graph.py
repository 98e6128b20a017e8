"""The status page's dependency graph: base tables → MVs, an MV over MVs as a chain. Pure: from
catalog entries only (``TaskRecord`` dicts), laid out in columns for the page to draw.

A node's ``depth`` is its column: 0 for a table no MV writes, one more than its deepest input for an
MV. ``row`` orders a column so that lines cross little: each node sits near the mean row of its
inputs (the barycenter heuristic, one pass left to right), ties by name.
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
    depth: int  # the column: 0 for tables, 1 + the deepest input for an MV
    row: int  # the position in its column, from 0


class GraphEdgeJson(TypedDict):
    source: str  # the table or MV read
    target: str  # the MV that reads it


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


def dependency_graph(tasks: Mapping[str, Record]) -> GraphJson:
    """The graph of the catalog's MVs and the tables they read (task id → TaskRecord)."""
    inputs = _inputs(tasks)
    task_ids = {task["name"]: task["task_id"] for task in tasks.values() if task["kind"] == "MV"}
    depths = _depths(inputs)
    logged = {task["name"] for task in tasks.values() if task["kind"] == "MV_LOG"}
    tables = ({source for sources in inputs.values() for source in sources} | logged) - set(inputs)
    columns: dict[int, list[str]] = {0: sorted(tables)}
    for name in sorted(inputs, key=lambda n: (depths[n], n)):
        columns.setdefault(depths[name], []).append(name)
    rows: dict[str, int] = {}
    for depth in sorted(columns):
        column = columns[depth]
        if depth > 0:
            column.sort(key=lambda n: (_mean_row(inputs[n], rows), n))
        rows.update((name, row) for row, name in enumerate(column))
    nodes: list[GraphNodeJson] = []
    for depth in sorted(columns):
        for name in columns[depth]:
            nodes.append(
                {
                    "name": name,
                    "kind": "mv" if name in inputs else "table",
                    "task_id": task_ids.get(name) if name in inputs else None,
                    "inputs": inputs.get(name, []),
                    "mv_log": name in logged,
                    "depth": depth,
                    "row": rows[name],
                }
            )
    edges: list[GraphEdgeJson] = [
        {"source": source, "target": name} for name in sorted(inputs) for source in inputs[name]
    ]
    return {"nodes": nodes, "edges": edges}


def _mean_row(sources: list[str], rows: Mapping[str, int]) -> float:
    placed = [rows[source] for source in sources if source in rows]
    return sum(placed) / len(placed) if placed else 0.0
