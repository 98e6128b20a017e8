"""The MV's column names: each output column of the query must be a name a Delta table can hold.

Spark names an unaliased expression by its text (``sum(l_quantity)``, ``(a + b)``), and Delta refuses
the characters in such names unless the table uses column mapping. Without this check the query was
accepted and its first refresh failed inside Spark; here the user learns at CREATE which column needs
an ``AS`` name, with its position in the query.
"""

from __future__ import annotations

from sqlglot import exp

from workers.ddl.dialect import DIALECT
from workers.ddl.errors import InvalidQueryError, start_of

# Delta's DELTA_INVALID_CHARACTERS_IN_COLUMN_NAMES without column mapping.
INVALID_CHARACTERS = frozenset(" ,;{}()\n\t=")


def check_output_names(tree: exp.Query) -> None:
    """Raise ``InvalidQueryError`` naming the first output column whose name Delta cannot store."""
    select = _first_select(tree)
    if select is None:
        return
    for index, projection in enumerate(select.expressions, start=1):
        if isinstance(projection, exp.Star) or (
            isinstance(projection, exp.Column) and isinstance(projection.this, exp.Star)
        ):
            continue
        name = projection.output_name or projection.sql(dialect=DIALECT)
        bad = sorted(set(name) & INVALID_CHARACTERS)
        if not bad:
            continue
        shown = ", ".join(repr(c) for c in bad)
        how = (
            "rename it"
            if isinstance(projection, exp.Alias)
            else f"name it with AS, e.g. `{_short(projection.sql(dialect=DIALECT))} AS col{index}`"
        )
        raise InvalidQueryError(
            f"output column {index} would be named '{_short(name)}', which a Delta table cannot hold "
            f"(it contains {shown}); {how}",
            start_of(projection),
        )


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
