"""A condition read as its conjuncts, and a conjunct read as one column's equality with another
table's: how the tree finds join keys and correlations."""

from __future__ import annotations

from sqlglot import exp


def conjuncts(condition: exp.Expr | None) -> list[exp.Expr]:
    """``condition``'s operands of AND (flattened); [] for none."""
    if condition is None:
        return []
    return list(condition.flatten()) if isinstance(condition, exp.And) else [condition]


def column_pair(term: exp.Expr, mine: str, others: dict[str, str]) -> tuple[str, str, str] | None:
    """``term`` as ``mine.c = o.x`` (either way round) with ``o`` in ``others``: (c, view of o, x)."""
    if not isinstance(term, exp.EQ):
        return None
    left, right = term.this, term.expression
    for a, b in ((left, right), (right, left)):
        if isinstance(a, exp.Column) and isinstance(b, exp.Column) and a.table == mine and b.table in others:
            return a.name, others[b.table], b.name
    return None
