"""The analysis of an MV query as it travels: the fast-refresh plan and why there is none.

The coordinator analyses a query once, when it accepts the DDL (``workers.ddl.query``), and stores
the result in the task record (``MvSpec.plan``, Avro ``io.mvs.QueryPlan``); workers read it from
there and never parse the query themselves. This module holds the plain values and their record
form, and does not use sqlglot.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal, cast

FastKind = Literal["projection", "aggregate"]
FAST_KINDS: tuple[FastKind, ...] = ("projection", "aggregate")


@dataclass(frozen=True)
class SelectItem:
    """One output column: its name (lower case), its expression, and the source column if it is one."""

    name: str
    sql: str
    column: str | None


@dataclass(frozen=True)
class AggregateItem:
    """An aggregate output column; ``column`` is None for COUNT(*)."""

    function: str  # SUM | COUNT | AVG | MIN | MAX
    column: str | None
    name: str
    needs_recompute_on_delete: bool


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

    @property
    def needs_recompute_on_delete(self) -> bool:
        return any(a.needs_recompute_on_delete for a in self.aggregates)


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
    return {
        "fast_refresh": {
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
                }
                for a in fast.aggregates
            ],
            "where": fast.where,
            "qualifier": fast.qualifier,
        },
        "fast_reason": "",
    }


def plan_from_record(record: Mapping[str, Any]) -> QueryPlan:
    """The ``io.mvs.QueryPlan`` record as a QueryPlan. A plan kind this worker does not know (a newer
    coordinator's) is no plan: the MV is refreshed completely, saying why."""
    fast = record.get("fast_refresh")
    if fast is None:
        return QueryPlan(None, str(record.get("fast_reason") or ""))
    if fast["kind"] not in FAST_KINDS:
        return QueryPlan(None, f"this worker does not know fast-refresh plans of kind {fast['kind']}")
    return QueryPlan(
        FastRefreshPlan(
            kind=cast(FastKind, fast["kind"]),
            base_table=fast["base_table"],
            group_by=tuple(fast.get("group_by", ())),
            items=tuple(SelectItem(i["name"], i["sql"], i.get("column")) for i in fast.get("items", ())),
            aggregates=tuple(_aggregate(a) for a in fast.get("aggregates", ())),
            where=fast.get("where"),
            qualifier=fast.get("qualifier", ""),
        )
    )


def _aggregate(record: Mapping[str, Any]) -> AggregateItem:
    recompute = bool(record.get("needs_recompute_on_delete"))
    return AggregateItem(record["function"], record.get("column"), record["name"], recompute)
