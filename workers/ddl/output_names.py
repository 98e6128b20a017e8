"""The MV's column names, as Spark names the query's output columns.

Spark names an unaliased expression by its text (``sum(l_quantity)``, ``(a + b)``): TPC-H's Q18 as
written has such a column. Delta refuses the characters in such names unless the table uses column
mapping, which the MV writer turns on for exactly those tables (``workers.jobs.delta.write``).
"""

from __future__ import annotations

from sqlglot import exp

from workers.ddl.dialect import DIALECT


def output_columns(tree: exp.Query) -> tuple[str, ...] | None:
    """The names of the query's output columns as Spark gives them (so an MV's table will have
    them), or None when the list has a ``*`` (its columns are its tables')."""
    select = _first_select(tree)
    if select is None:
        return None
    names: list[str] = []
    for projection in select.expressions:
        if isinstance(projection, exp.Star) or (
            isinstance(projection, exp.Column) and isinstance(projection.this, exp.Star)
        ):
            return None
        names.append(projection.output_name or projection.sql(dialect=DIALECT))
    return tuple(names)


def _first_select(tree: exp.Expr) -> exp.Select | None:
    """The SELECT whose list names the output columns (the left-most branch of a set operation)."""
    node: exp.Expr | None = tree
    while node is not None and not isinstance(node, exp.Select):
        if isinstance(node, exp.SetOperation):
            node = node.left
        elif isinstance(node, exp.Subquery):
            node = node.this
        else:
            return None
    return node


def _short(text: str) -> str:
    return text if len(text) <= 60 else text[:57] + "..."
