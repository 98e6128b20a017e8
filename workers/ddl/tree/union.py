"""UNION ALL and UNION in the operator tree: a chain of UNION ALLs is one ``Union`` node over its
branches' nodes (linear: its change is the signed union of theirs), a UNION the distinct of it (an
``Aggregate`` grouping by every column, recomputed for the rows whose first column its change
reaches). INTERSECT and EXCEPT are refused naming the way out.
"""

from __future__ import annotations

from typing import Protocol

from sqlglot import exp

from workers.ddl.dialect import DIALECT
from workers.ddl.fast_rules import NotEligible
from workers.ddl.tree.values import Aggregate, Block, Node, Union


class Builder(Protocol):
    """What a UNION asks of the tree's builder (``nodes.Builder``): its branches' nodes, view names."""

    def select(self, body: exp.Select) -> Block | Aggregate: ...

    def set_operation(self, op: exp.SetOperation) -> tuple[Union | Aggregate, tuple[str, ...]]: ...

    def view(self) -> str: ...


def union_node(builder: Builder, op: exp.SetOperation) -> tuple[Union | Aggregate, tuple[str, ...]]:
    """A UNION ALL as a ``Union`` of its branches' nodes (a chain of them one node), a UNION as
    the distinct of that; and its column names (its first branch's)."""
    if not isinstance(op, exp.Union):
        word = "INTERSECT" if isinstance(op, exp.Intersect) else "EXCEPT"
        exists = "EXISTS" if word == "INTERSECT" else "NOT EXISTS"
        raise NotEligible(
            f"{word} is not yet FAST in the operator tree; write it as SELECT DISTINCT … WHERE "
            f"{exists} (SELECT … WHERE each column <=> the other's), or use REFRESH COMPLETE",
            op,
        )
    for clause in ("order", "limit", "offset"):
        if op.args.get(clause):
            shown = f"{clause.upper()} on a UNION inside the query is not yet FAST"
            raise NotEligible(shown, op.args[clause])
    distinct = bool(op.args.get("distinct"))
    branches: list[exp.Expr] = []

    def flatten(node: exp.Expr) -> None:
        plain = not any(node.args.get(c) for c in ("order", "limit", "offset"))
        if isinstance(node, exp.Union) and bool(node.args.get("distinct")) == distinct and plain:
            flatten(node.this)
            flatten(node.expression)
        else:
            branches.append(node.this if isinstance(node, exp.Subquery) else node)

    flatten(op)
    inputs: list[Node] = []
    columns: list[tuple[str, ...]] = []
    for branch in branches:
        if isinstance(branch, exp.Select):
            columns.append(tuple(i.alias_or_name for i in branch.expressions))
            inputs.append(builder.select(branch))
        elif isinstance(branch, exp.SetOperation):
            node, names = builder.set_operation(branch)
            inputs.append(node)
            columns.append(names)
        else:
            raise NotEligible("a UNION's branches must be SELECTs", branch)
    names = columns[0]
    sql = " UNION ALL ".join(f"SELECT * FROM {n.view}" for n in inputs)
    union = Union(builder.view(), sql, tuple(inputs), tuple(columns))
    if not distinct:
        return union, names
    block = Block(builder.view(), f"SELECT * FROM {union.view}", (union,), lineage=_same(names, union.view))
    listed = ", ".join(exp.column(c, quoted=True).sql(dialect=DIALECT) for c in names)
    sql = f"SELECT {listed} FROM {block.view} GROUP BY {listed}"
    return Aggregate(builder.view(), sql, block, names[0], names[0], "distinct (UNION)"), names


def _same(names: tuple[str, ...], view: str) -> tuple[tuple[str, str, str], ...]:
    """The lineage of ``SELECT * FROM view``: each column its own."""
    return tuple((name, view, name) for name in names)
