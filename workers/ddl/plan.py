"""The analysis of an MV query as it travels: the fast-refresh plan and why there is none.

The coordinator analyses a query once, when it accepts the DDL (``workers.ddl.query``), and stores
the result in the task record (``MvSpec.plan``, Avro ``io.mvs.QueryPlan``); workers read it from
there and never parse the query themselves. This module holds the plain values and their record
form, and does not use sqlglot.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal, cast

FastKind = Literal[
    "projection",
    "aggregate",
    "join_projection",
    "join_aggregate",
    "aggregate_having",
    "union_projection",
    "join_aggregate_having",
    "tree",
    "top_n",
]
FAST_KINDS: tuple[FastKind, ...] = (
    "projection",
    "aggregate",
    "join_projection",
    "join_aggregate",
    "aggregate_having",  # GROUP BY … HAVING: a newer kind, recomputed completely by older workers
    "union_projection",  # UNION ALL of projections: ``tables`` lists the tables its branches read
    "join_aggregate_having",  # GROUP BY … HAVING over a join: ``inputs`` are its group keys only
    "tree",  # the operator tree (``workers.ddl.tree``): ``tree`` holds it, ``tables`` its scans
    "top_n",  # ORDER BY … LIMIT n over any FAST plan: ``top_n`` holds the inner plan (``TopN``)
)
# Kinds of one base table; a join kind reads ``FastRefreshPlan.tables``.
JOIN_KINDS: tuple[FastKind, ...] = ("join_projection", "join_aggregate", "join_aggregate_having")


@dataclass(frozen=True)
class SelectItem:
    """One output column: its name (lower case), its expression, and the source column if it is one."""

    name: str
    sql: str
    column: str | None


# An output that is an expression over aggregates (``100.00 * SUM(a) / SUM(b) AS share``) is an
# AggregateItem of this function, its ``argument`` the expression over its parts' names; each aggregate
# in it is an AggregateItem of its own, named ``formula_part`` (the MV does not show it). A worker that
# does not know FORMULA recomputes such a group from the base (its rules' fallback): never wrong.
FORMULA = "FORMULA"
FORMULA_PART = "__mvs_part"


def formula_part(output: str, number: int) -> str:
    """The name of aggregate ``number`` (from 0) of the expression named ``output``."""
    return f"{FORMULA_PART}{number}_{output}"


@dataclass(frozen=True)
class AggregateItem:
    """An aggregate output column; ``column`` is None for COUNT(*). An aggregate of an expression
    (``SUM(price * (1 - discount))``) has its SQL in ``argument``, and ``column`` names the column the
    job derives from it (``derived_column``) beside the rows it aggregates. (``FORMULA``: an expression
    over other aggregates.)"""

    function: str  # SUM | COUNT | AVG | MIN | MAX | FORMULA
    column: str | None
    name: str
    needs_recompute_on_delete: bool
    argument: str | None = None


def derived_column(output: str) -> str:
    """The name of the column an aggregate's expression argument is computed into (the job's helper
    prefix: it never reaches the MV), by the aggregate's output name (unique in the query)."""
    return f"__mvs_arg_{output}"


def computed_keys(items: tuple[SelectItem, ...]) -> dict[str, str]:
    """The GROUP BY expressions among an aggregate's ``items`` (``year(d) AS y``): the column each is
    computed into (``derived_column`` of its output name, in the plan's ``group_by``) → its SQL."""
    return {i.column: i.sql for i in items if i.column is not None and i.column == derived_column(i.name)}


@dataclass(frozen=True)
class JoinTable:
    """A base table of a join, and the name the query reads it by (alias, else name)."""

    table: str
    qualifier: str


@dataclass(frozen=True)
class JoinKey:
    """``left_table.left_column = right_table.right_column``, one equality of an inner equi-join."""

    left_table: str
    left_column: str
    right_table: str
    right_column: str


@dataclass(frozen=True)
class JoinInput:
    """A column a join aggregate reads: ``name`` (what group_by/items/aggregates call it), its
    reference ``sql``, and its ``table`` ("" when the reference is unqualified) and ``column``."""

    name: str
    sql: str
    table: str
    column: str


@dataclass(frozen=True)
class FastRefreshPlan:
    """How to apply MV-log change rows of ``base_table`` to the MV (names lower case).

    ``items`` lists every output column in order (aggregates included, as SQL); ``aggregates`` repeats
    the aggregate ones in structured form; ``where`` is the filter to apply to change rows (columns
    may be qualified by ``qualifier``).
    """

    kind: FastKind
    base_table: str
    group_by: tuple[str, ...]
    items: tuple[SelectItem, ...]
    aggregates: tuple[AggregateItem, ...]
    where: str | None
    # The name the query reads the table by (its alias, else its name), which qualified columns in
    # ``where`` use. ``where`` is the user's own text of the WHERE condition (when the query text was
    # given), so Spark reads it exactly as in the query, never a re-rendering.
    qualifier: str = ""
    # A union (``union_projection``) lists in ``tables`` the bases its branches read, in order.
    # Join plans (kinds ``join_*``): every base in FROM order, the join's equalities (only to narrow
    # reads), and for an aggregate the columns it reads and the user's own FROM … WHERE text.
    tables: tuple[JoinTable, ...] = ()
    join_keys: tuple[JoinKey, ...] = ()
    inputs: tuple[JoinInput, ...] = ()
    source: str | None = None
    # Kind ``tree``: the operator tree as JSON (``workers.ddl.tree.values``); ``tables`` then lists
    # every scan (a self-join's table twice, by its aliases).
    tree: str | None = None
    # Kind ``top_n``: the query without its ORDER BY … LIMIT, its plan, and the two clauses.
    top_n: TopN | None = None
    # The names (lower case) a run holds its bases' columns of: every word of the query and of the SQL
    # its operator tree runs (``workers.ddl.read_names``); None: any column (a star, a NATURAL JOIN,
    # a plan from before this field).
    read_names: tuple[str, ...] | None = None

    @property
    def base_tables(self) -> tuple[str, ...]:
        """Every base table whose changes the plan applies (each once)."""
        if self.top_n is not None:
            return self.top_n.inner.base_tables
        return tuple(dict.fromkeys(t.table for t in self.tables)) if self.tables else (self.base_table,)

    @property
    def needs_recompute_on_delete(self) -> bool:
        if self.top_n is not None:
            return self.top_n.inner.needs_recompute_on_delete
        return any(a.needs_recompute_on_delete for a in self.aggregates)


@dataclass(frozen=True)
class TopN:
    """``<inner_query> ORDER BY <order_by> LIMIT <limit>`` (kind ``top_n``): the inner query's rows are
    kept FAST by ``inner`` in a helper table, the MV is their first ``limit`` rows by ``order_by``
    (the user's text, over the output columns)."""

    inner: FastRefreshPlan
    inner_query: str
    order_by: str
    limit: int


@dataclass(frozen=True)
class QueryPlan:
    """``fast_refresh`` is None when the query cannot be refreshed incrementally; ``fast_reason``
    then says why, in words meant for the user ("" when a plan exists)."""

    fast_refresh: FastRefreshPlan | None
    fast_reason: str = ""


def plan_record(plan: QueryPlan) -> dict[str, Any]:
    """``plan`` as an ``io.mvs.QueryPlan`` record."""
    fast = plan.fast_refresh
    if fast is None:
        return {"fast_refresh": None, "fast_reason": plan.fast_reason}
    return {"fast_refresh": fast_plan_record(fast), "fast_reason": ""}


def fast_plan_record(fast: FastRefreshPlan) -> dict[str, Any]:
    """``fast`` as an ``io.mvs.FastRefreshPlan`` record."""
    return {
        "kind": fast.kind,
        "base_table": fast.base_table,
        "group_by": list(fast.group_by),
        "items": [{"name": i.name, "sql": i.sql, "column": i.column} for i in fast.items],
        "aggregates": [
            {
                "function": a.function,
                "column": a.column,
                "name": a.name,
                "needs_recompute_on_delete": a.needs_recompute_on_delete,
                "argument": a.argument,
            }
            for a in fast.aggregates
        ],
        "where": fast.where,
        "qualifier": fast.qualifier,
        "tables": [{"table": t.table, "qualifier": t.qualifier} for t in fast.tables],
        "join_keys": [
            {
                "left_table": k.left_table,
                "left_column": k.left_column,
                "right_table": k.right_table,
                "right_column": k.right_column,
            }
            for k in fast.join_keys
        ],
        "inputs": [{"name": i.name, "sql": i.sql, "table": i.table, "column": i.column} for i in fast.inputs],
        "source": fast.source,
        "tree": fast.tree,
        "top_n": None if fast.top_n is None else json.dumps(_top_n_record(fast.top_n), sort_keys=True),
        "read_names": None if fast.read_names is None else list(fast.read_names),
    }


def _top_n_record(top: TopN) -> dict[str, Any]:
    return {
        "inner": fast_plan_record(top.inner),
        "inner_query": top.inner_query,
        "order_by": top.order_by,
        "limit": top.limit,
    }


def plan_from_record(record: Mapping[str, Any]) -> QueryPlan:
    """The ``io.mvs.QueryPlan`` record as a QueryPlan. A plan kind this worker does not know (a newer
    coordinator's) is no plan: the MV is refreshed completely, saying why."""
    fast = record.get("fast_refresh")
    if fast is None:
        return QueryPlan(None, str(record.get("fast_reason") or ""))
    unknown = next((kind for kind in _kinds_of(fast) if kind not in FAST_KINDS), None)
    if unknown is not None:
        return QueryPlan(None, f"this worker does not know fast-refresh plans of kind {unknown}")
    return QueryPlan(fast_plan_from_record(fast))


def _kinds_of(fast: Mapping[str, Any]) -> list[str]:
    """The kind of the plan record ``fast`` and of the plan it wraps (kind ``top_n``), outermost first."""
    top = fast.get("top_n")
    inner = _kinds_of(json.loads(top)["inner"]) if fast["kind"] == "top_n" and top else []
    return [fast["kind"], *inner]


def fast_plan_from_record(fast: Mapping[str, Any]) -> FastRefreshPlan:
    """The ``io.mvs.FastRefreshPlan`` record ``fast`` (of a known kind) as a FastRefreshPlan."""
    return FastRefreshPlan(
        kind=cast(FastKind, fast["kind"]),
        base_table=fast["base_table"],
        group_by=tuple(fast.get("group_by", ())),
        items=tuple(SelectItem(i["name"], i["sql"], i.get("column")) for i in fast.get("items", ())),
        aggregates=tuple(_aggregate(a) for a in fast.get("aggregates", ())),
        where=fast.get("where"),
        qualifier=fast.get("qualifier", ""),
        tables=tuple(JoinTable(t["table"], t["qualifier"]) for t in fast.get("tables", ())),
        join_keys=tuple(
            JoinKey(k["left_table"], k["left_column"], k["right_table"], k["right_column"])
            for k in fast.get("join_keys", ())
        ),
        inputs=tuple(JoinInput(i["name"], i["sql"], i["table"], i["column"]) for i in fast.get("inputs", ())),
        source=fast.get("source"),
        tree=fast.get("tree"),
        top_n=_top_n(fast.get("top_n")),
        read_names=None if fast.get("read_names") is None else tuple(fast["read_names"]),
    )


def _top_n(text: str | None) -> TopN | None:
    if text is None:
        return None
    record = json.loads(text)
    inner = fast_plan_from_record(record["inner"])
    return TopN(inner, record["inner_query"], record["order_by"], int(record["limit"]))


def _aggregate(record: Mapping[str, Any]) -> AggregateItem:
    recompute = bool(record.get("needs_recompute_on_delete"))
    return AggregateItem(
        record["function"], record.get("column"), record["name"], recompute, record.get("argument")
    )
