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
    select = first_select(tree)
    if select is None:
        return None
    names: list[str] = []
    for projection in select.expressions:
        if isinstance(projection, exp.Star) or (
            isinstance(projection, exp.Column) and isinstance(projection.this, exp.Star)
        ):
            return None
        names.append(projection.output_name or spark_name(projection) or projection.sql(dialect=DIALECT))
    return tuple(names)


# Spark's text of the operators it names an unaliased output by (``(a + b)``, ``(- a)``).
_BINARY: dict[type[exp.Expr], str] = {exp.Add: "+", exp.Sub: "-", exp.Mul: "*", exp.Div: "/", exp.Mod: "%"}
_AGGREGATES = (exp.Sum, exp.Avg, exp.Min, exp.Max, exp.Count)


def spark_name(node: exp.Expr) -> str | None:
    """The name Spark gives the unaliased output ``node`` (``sum(l_quantity)`` for ``SUM(l.l_quantity)``,
    ``count(1)`` for ``COUNT(*)``, ``sum((a * (1 - b)))``), for the forms whose naming is known: columns
    (unqualified), numbers, + - * / % and unary minus, SUM / AVG / MIN / MAX / COUNT (not over DISTINCT); None
    for any other (the caller asks for an AS)."""
    if isinstance(node, exp.Column) and not isinstance(node.this, exp.Star):
        return node.name
    if isinstance(node, exp.Literal) and node.is_number:
        return str(node.this)
    if isinstance(node, exp.Paren):
        return spark_name(node.this)
    if isinstance(node, exp.Neg):
        inner = spark_name(node.this)
        return None if inner is None else f"(- {inner})"
    operator = _BINARY.get(type(node))
    if operator is not None:
        left, right = spark_name(node.this), spark_name(node.expression)
        return None if left is None or right is None else f"({left} {operator} {right})"
    if isinstance(node, _AGGREGATES) and not node.args.get("expressions"):
        function = type(node).__name__.lower()
        argument = node.this
        if isinstance(node, exp.Count) and (argument is None or isinstance(argument, exp.Star)):
            return "count(1)"
        if isinstance(argument, exp.Distinct):  # Spark's DISTINCT keeps its case; the tree's SQL may not
            return None
        inner = None if argument is None else spark_name(argument)
        return None if inner is None else f"{function}({inner})"
    return None


def first_select(tree: exp.Expr) -> exp.Select | None:
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
