"""Unqualified columns of a join resolved as Spark resolves them: against the columns of the tables
the query reads, which the coordinator reads from their Delta logs when it accepts the DDL
(``workers.warehouse.table_columns``, delta-rs, no JVM). The fast-refresh planner then sees every
column of a join with its table (``c_custkey`` as ``customer.c_custkey``), as the job's keys need.

Only what the plan looks at is resolved: the select's own columns, not those of ORDER BY (Spark
resolves them against the output first), of lambdas, or HAVING's output names.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from sqlglot import exp

from workers.ddl.fast_rules import NotEligible

# A table's column names (any case), None when not known (no schemas given, or no such table).
ColumnsOf = Callable[[str], Sequence[str] | None]


@dataclass(frozen=True)
class Resolved:
    """``select`` with its columns qualified where exactly one table has them; ``unresolved``: some
    unqualified column could not be looked up for want of a table's columns."""

    select: exp.Select
    unresolved: bool


def resolved(select: exp.Select, tables: Sequence[exp.Table], columns_of: ColumnsOf | None) -> Resolved:
    """A copy of ``select`` (which reads ``tables``) with each unqualified column it names qualified
    by the one table that has it; NotEligible (at the column) when several have it."""
    known: dict[str, frozenset[str]] = {}
    missing = False
    for table in tables:
        names = columns_of(table.name.lower()) if columns_of is not None else None
        if names is None:
            missing = True
        else:
            known[table.alias_or_name] = frozenset(n.lower() for n in names)
    outputs = {item.alias.lower() for item in select.expressions if isinstance(item, exp.Alias)}
    copy = select.copy()
    unresolved = False
    for column in list(copy.find_all(exp.Column)):
        if column.table or not isinstance(column.this, exp.Identifier) or not _planned(column, copy, outputs):
            continue
        name = column.name.lower()
        owners = [qualifier for qualifier, names in known.items() if name in names]
        if len(owners) > 1:
            raise NotEligible(
                f"column {column.name} is ambiguous: {' and '.join(owners)} both have it; "
                f"qualify it ({owners[0]}.{column.name})",
                column,
            )
        if owners:
            column.set("table", exp.to_identifier(owners[0]))
        elif missing:
            unresolved = True
    return Resolved(copy, unresolved)


def _planned(column: exp.Column, select: exp.Select, outputs: set[str]) -> bool:
    """Whether the planner reads ``column`` as a column of a table (see the module's note)."""
    if column.find_ancestor(exp.Select) is not select:
        return False  # a subquery's: refused by the planner anyway
    if column.find_ancestor(exp.Order, exp.Lambda) is not None:
        return False
    return not (column.find_ancestor(exp.Having) is not None and column.name.lower() in outputs)
