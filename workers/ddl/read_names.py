"""The names a FAST run may need of its bases' columns: a run holds the change rows and small bases
with the columns of these names only (``workers.jobs.fast.apply.Scope``).

Spark's optimizer evaluates the projections of every query over rows held on the driver again, row
by row, before it plans (``ConvertToLocalRelation``); over change rows with every base column that
was 1.1-1.9 s of a steady TPC-H SF 1 Q21 run, with 16 lineitem columns where it reads 4.

Every word of the query's text, lower-case (an identifier's, a keyword's: ``session_user`` is a
column where the table has one, a function elsewhere; string literals aside), and of the SQL an
operator tree runs (``tree.normalize``): a superset of the columns it reads, whichever table they
are of, and of a column a base gains after the DDL (Spark would resolve the name to it). None
where a star (``SELECT *``, ``t.*``; not ``COUNT(*)`` nor ``EXISTS (SELECT * …)``) or a NATURAL JOIN
may read any column. Pure: sqlglot.
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping, Sequence

from sqlglot import TokenType, exp
from sqlglot.dialects.dialect import Dialect

from workers.ddl.dialect import DIALECT
from workers.ddl.fast_rules import NotEligible
from workers.ddl.tree.normalize import exists_of_star, normalized


def read_names(sql: str, tree: exp.Query, columns: Mapping[str, Sequence[str]]) -> tuple[str, ...] | None:
    """The names of ``sql`` (parsed: ``tree``) a run holds its bases' columns of (see the module), or
    None where it may read any column. ``columns``: each base table's."""
    if _reads_every_column(tree):
        return None
    names = _words(sql)
    with contextlib.suppress(NotEligible):  # not eligible: no operator tree is made of it
        names |= _words(normalized(tree, columns).sql(dialect=DIALECT))
    return tuple(sorted(names))


def _words(sql: str) -> set[str]:
    """Every word of ``sql``, lower-case: its identifiers (quoted ones whatever they hold) and
    keywords, not its strings, numbers or punctuation."""
    tokens = Dialect.get_or_raise(DIALECT).tokenize(sql)
    return {
        t.text.lower()
        for t in tokens
        if t.token_type == TokenType.IDENTIFIER
        or (not t.token_type.name.endswith("STRING") and (t.text[:1].isalpha() or t.text[:1] == "_"))
    }


def _reads_every_column(tree: exp.Query) -> bool:
    for star in tree.find_all(exp.Star):
        counted = isinstance(star.parent, exp.Count)
        if not counted and not (isinstance(star.parent, exp.Select) and exists_of_star(star.parent)):
            return True
    return any((join.args.get("method") or "").upper() == "NATURAL" for join in tree.find_all(exp.Join))
