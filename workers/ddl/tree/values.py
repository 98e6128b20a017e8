"""The operator tree of a FAST plan of kind ``tree`` as it travels: plain values, their JSON form
(``FastRefreshPlan.tree``), and ``describe()``. No sqlglot here (workers read it, never parse).

A tree is, from the leaves up: one ``Scan`` per occurrence of a base table (a self-join reads the
same table twice, as two scans), the linear block over them (inner join of the scans, filter,
projection: ``block_sql``, Spark SQL over temp views named by the scans' ``view``), and at the top
either that block itself (the MV is its rows) or an aggregate of its rows (``aggregate``: the plan
of a one-input aggregate over the view ``INPUT_VIEW``, applied by the aggregate machinery).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Literal

from workers.ddl.plan import FastRefreshPlan, JoinKey, fast_plan_from_record, fast_plan_record

# The temp view the top aggregate reads its input (the block's rows) from.
INPUT_VIEW = "__mvs_input"
TopKind = Literal["projection", "aggregate"]


def scan_view(index: int) -> str:
    """The temp view a run binds the ``index``-th scan to (its rows at a version, or its changes)."""
    return f"__mvs_scan{index}"


@dataclass(frozen=True)
class Scan:
    """One occurrence of a base table: the table, the alias the query reads it by, its view."""

    table: str
    alias: str
    view: str


@dataclass(frozen=True)
class TreePlan:
    """The operator tree (see the module's note); ``keys``: equalities of columns of two scans that
    the block's inner join holds (by view), used to narrow reads, never for results."""

    scans: tuple[Scan, ...]
    keys: tuple[JoinKey, ...]
    filtered: bool  # the block has a WHERE / ON condition beyond its keys (for describe)
    block_sql: str
    top: TopKind
    aggregate: FastRefreshPlan | None = None  # top == "aggregate": over INPUT_VIEW
    aggregate_sql: str | None = None
    distinct: bool = False  # the aggregate is the query's SELECT DISTINCT (GROUP BY every output)

    def describe(self) -> list[str]:
        """One line per operator, "operator: rule", from the leaves up (for run messages, EXPLAIN)."""
        lines = [f"scan {s.table} AS {s.alias}: MV-log change rows" for s in self.scans]
        if len(self.scans) > 1:
            lines.append(
                f"inner join of {len(self.scans)} inputs: linear, Σ_i T1'⋈…⋈ΔTi⋈…⋈Tn over the occurrences"
            )
        if self.filtered:
            lines.append("filter: linear, applied to the change rows")
        if self.top == "projection":
            lines.append("project (top): signed rows merged into the MV by row value")
        else:
            assert self.aggregate is not None
            how = "recompute of the groups reached" if self.aggregate.kind == "aggregate_having" else "merge"
            what = "distinct (top, as GROUP BY of every output)" if self.distinct else "aggregate (top)"
            lines.append(f"{what}: {how} of the signed input rows ({self.aggregate.kind})")
        return lines


def tree_json(tree: TreePlan) -> str:
    """``tree`` as the JSON text stored in ``FastRefreshPlan.tree``."""
    record: dict[str, Any] = {
        "scans": [{"table": s.table, "alias": s.alias, "view": s.view} for s in tree.scans],
        "keys": [[k.left_table, k.left_column, k.right_table, k.right_column] for k in tree.keys],
        "filtered": tree.filtered,
        "block_sql": tree.block_sql,
        "top": tree.top,
        "aggregate": None if tree.aggregate is None else fast_plan_record(tree.aggregate),
        "aggregate_sql": tree.aggregate_sql,
        "distinct": tree.distinct,
    }
    return json.dumps(record, sort_keys=True)


def tree_from_json(text: str) -> TreePlan:
    """The tree stored as ``text`` by ``tree_json``."""
    record = json.loads(text)
    aggregate = record.get("aggregate")
    return TreePlan(
        scans=tuple(Scan(s["table"], s["alias"], s["view"]) for s in record["scans"]),
        keys=tuple(JoinKey(*k) for k in record.get("keys", ())),
        filtered=bool(record.get("filtered")),
        block_sql=record["block_sql"],
        top=record["top"],
        aggregate=None if aggregate is None else fast_plan_from_record(aggregate),
        aggregate_sql=record.get("aggregate_sql"),
        distinct=bool(record.get("distinct")),
    )
