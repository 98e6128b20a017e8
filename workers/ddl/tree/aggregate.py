"""An aggregate at the top of the tree, split into its input and a one-input aggregate over it.

``SELECT n1.n_name AS nation, year(o.d) AS y, SUM(l.p * (1 - l.c)) AS s FROM … GROUP BY n1.n_name,
year(o.d)`` becomes the input block ``SELECT n1.n_name AS nation, year(o.d) AS y, l.p * (1 - l.c) AS
__mvs_a0 FROM …`` (every GROUP BY expression and aggregate argument a column) and the aggregate
``SELECT nation, y, SUM(__mvs_a0) AS s FROM __mvs_input GROUP BY nation, y``: plain columns, which
the one-table aggregate planner (``workers.ddl.fast``) plans and the aggregate machinery merges.
"""

from __future__ import annotations

from dataclasses import dataclass

import sqlglot
from sqlglot import exp

from workers.ddl.dialect import DIALECT
from workers.ddl.fast import plan_fast_refresh
from workers.ddl.fast_rules import NotEligible
from workers.ddl.plan import FastRefreshPlan
from workers.ddl.tree.values import INPUT_VIEW

_P = "__mvs_"  # helper names: the aggregate's output columns are named by the query, never these


@dataclass(frozen=True)
class SplitAggregate:
    """The input block's select items, and the aggregate over ``input_view`` (its SQL, and its
    plan when asked for); ``keys``: the input columns it groups by, each with its output name (None
    when the group key is not an output)."""

    input_items: list[exp.Expr]
    sql: str
    plan: FastRefreshPlan | None
    keys: list[tuple[str, str | None]]


def split_aggregate(select: exp.Select, input_view: str = INPUT_VIEW, planned: bool = True) -> SplitAggregate:
    """``select`` (qualified, an aggregate) as its input and the aggregate over it; NotEligible.
    ``planned``: the aggregate is merged (its plan is needed, DISTINCT aggregates refused), else it
    is recomputed by group (any aggregate)."""
    group = select.args.get("group")
    if group is not None and any(group.args.get(k) for k in ("rollup", "cube", "grouping_sets")):
        raise NotEligible("ROLLUP, CUBE and GROUPING SETS are not supported", group)
    keys: list[tuple[exp.Expr, str]] = []
    for index, key in enumerate(group.expressions if group is not None else []):
        if any(key == seen for seen, _ in keys):
            continue  # grouped twice by one expression (DISTINCT a AS x, a AS y): one key
        named = next(
            (i.alias for i in select.expressions if isinstance(i, exp.Alias) and i.this == key), None
        )
        keys.append((key, named or f"{_P}g{index}"))
    inputs: list[exp.Expr] = [exp.alias_(key.copy(), name, quoted=True) for key, name in keys]
    arguments: dict[str, str] = {}  # an argument's SQL -> its input column

    def argument_column(argument: exp.Expr) -> exp.Column:
        text = argument.sql(dialect=DIALECT)
        if text not in arguments:
            arguments[text] = f"{_P}a{len(arguments)}"
            inputs.append(exp.alias_(argument.copy(), arguments[text], quoted=True))
        return exp.column(arguments[text], quoted=True)

    def rewrite(node: exp.Expr) -> exp.Expr:
        for key, name in keys:
            if node == key:
                return exp.column(name, quoted=True)
        if isinstance(node, exp.AggFunc):
            if isinstance(node.this, exp.Distinct) and not planned:  # recomputed by group: any aggregate
                copy = node.copy()
                copy.this.set("expressions", [argument_column(e) for e in node.this.expressions])
                return copy
            if node.find(exp.Distinct) is not None:
                raise NotEligible(
                    f"{node.sql(dialect=DIALECT)}: aggregates over DISTINCT are not yet FAST", node
                )
            argument = node.this
            if argument is None or isinstance(argument, exp.Star):
                return node.copy()
            copy = node.copy()
            copy.set("this", argument_column(argument))
            return copy
        if isinstance(node, exp.Column):
            raise NotEligible(
                f"column {node.sql(dialect=DIALECT)} is neither grouped by nor inside an aggregate", node
            )
        return node

    items = []
    for item in select.expressions:
        rewritten = item.transform(rewrite)
        bare = isinstance(rewritten, exp.Alias) and isinstance(rewritten.this, exp.Column)
        if bare and rewritten.this.name == rewritten.alias:
            rewritten = rewritten.this
        items.append(rewritten)
    top = exp.select(*items).from_(exp.to_table(input_view))
    if keys:
        top = top.group_by(*[exp.column(name, quoted=True) for _, name in keys])
    having = select.args.get("having")
    if having is not None:
        top = top.having(having.this.transform(rewrite))
    sql = top.sql(dialect=DIALECT)
    outputs = {i.alias_or_name for i in items}
    grouped = [(name, name if name in outputs else None) for _, name in keys]
    input_items = inputs or [exp.alias_(exp.true(), f"{_P}row", quoted=True)]
    if not planned:
        return SplitAggregate(input_items, sql, None, grouped)
    parsed = sqlglot.parse_one(sql, dialect=DIALECT)
    assert isinstance(parsed, exp.Query)
    verdict = plan_fast_refresh(parsed, (INPUT_VIEW,), sql)
    if verdict.plan is None:
        raise NotEligible(f"the aggregate at the top: {verdict.reason}", select)
    return SplitAggregate(input_items, sql, verdict.plan, grouped)
