"""The columns of each base table an MV query reads: a FAST run holds the change rows and small
bases with these columns only (``workers.jobs.fast.apply.Scope``).

Spark's optimizer evaluates the projections of every query over rows held on the driver again, row
by row, before it plans (``ConvertToLocalRelation``); over change rows with every base column that was
1.1-1.6 s of a steady TPC-H SF 1 Q21 run, with its 16 lineitem columns where it reads 4.

By name, so a superset: a column is read where its name is any identifier of the query (a column's,
a qualifier's, a struct field's, a ``USING`` list's), of whichever table; every column where the
query selects a star (``SELECT *``, ``t.*``; not ``COUNT(*)`` nor ``EXISTS (SELECT * …)``) or joins
``NATURAL``ly, or where a table's columns are unknown. The names of the query as an operator tree
runs it (``tree.normalize``) count too. Pure: sqlglot over the parsed query, the columns from the Delta logs.
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence

from sqlglot import exp

from workers.ddl.fast_rules import NotEligible
from workers.ddl.resolve import ColumnsOf
from workers.ddl.tree.normalize import normalized

# A base table and the columns of it the query reads, in the table's order.
TableColumns = tuple[str, tuple[str, ...]]


def read_columns(
    tree: exp.Query, base_tables: Sequence[str], columns_of: ColumnsOf
) -> tuple[TableColumns, ...] | None:
    """Each of ``base_tables`` with the columns of it ``tree`` reads (``columns_of``: a table's
    columns), or None where the query may read every column of some table (see the module)."""
    columns = {table: columns_of(table) for table in base_tables}
    known = {table: tuple(names) for table, names in columns.items() if names is not None}
    if len(known) < len(columns) or _reads_every_column(tree):
        return None
    names = _names(tree)
    with contextlib.suppress(NotEligible):  # not eligible: no operator tree is made of it
        names |= _names(normalized(tree, known))  # the SQL an operator tree's run reads
    return tuple((table, tuple(c for c in known[table] if c.lower() in names)) for table in base_tables)


def _names(tree: exp.Expr) -> set[str]:
    return {n.name.lower() for n in tree.find_all(exp.Identifier, exp.Var)}


def _reads_every_column(tree: exp.Query) -> bool:
    for star in tree.find_all(exp.Star):
        counted = isinstance(star.parent, exp.Count)
        # ``EXISTS (SELECT * …)`` asks whether a row exists, whatever its columns (TPC-H Q4, Q21, Q22).
        exists = isinstance(star.parent, exp.Select) and isinstance(star.parent.parent, exp.Exists)
        if not counted and not exists:
            return True
    return any((join.args.get("method") or "").upper() == "NATURAL" for join in tree.find_all(exp.Join))
