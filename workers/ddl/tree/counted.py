"""Semi and anti joins read as tests of one input's keys (the analysis side of
``workers.jobs.fast.operators.semi_join``): which EXISTS / NOT EXISTS / IN subqueries depend on
their input only through how many of its rows match each key, the SQL of those rows' keys
(``Keyed.matches``), and the block's SQL with each such subquery reading a set of keys instead
(``Block.over_key_sets``)."""

from __future__ import annotations

from dataclasses import dataclass

from sqlglot import exp

from workers.ddl.dialect import DIALECT
from workers.ddl.tree.terms import column_pair
from workers.ddl.tree.values import Keyed

# The fewest matching rows a key of every counted input must average for its counts to be kept. A run
# reads the kept counts whole and rewrites their files, where the keyed recompute reads the input at
# the keys reached: the counts pay where they are many times fewer rows (``semi_join._rebuilt`` decides,
# when a FAST run first counts a matching row). TPC-H SF 1, 3 rounds: Q22's orders by customer (~15 a
# key) 837 ms a run counted, 1,111 recomputed; Q4's late lineitems by order (~2.8 a key, and every
# change flips its keys) 3.9-4.4 s counted, 1.9 s recomputed.
MIN_ROWS_PER_KEY = 8

# The subqueries whose input a run may keep as per-key match counts (``counted_subquery``): NOT IN is not
# (one NULL in its subquery rejects every row, whatever the key).
_COUNTED_OPERATORS = frozenset({"semi join (EXISTS)", "anti join (NOT EXISTS)", "semi join (IN)"})
_NOT_COUNTED_CLAUSES = ("group", "having", "distinct", "qualify", "limit", "offset", "order")


@dataclass(frozen=True)
class CountedSubquery:
    """A subquery whose input is read as a set of keys: its matching rows' keys (``matches``, for
    ``Keyed.matches``), and what its WHERE and select list become over that set (``over_key_sets``)."""

    sub: exp.Select
    matches: str
    where: exp.Expr | None
    expressions: list[exp.Expr] | None  # None: as written


def counted_subquery(
    sub: exp.Select, operator: str, names: tuple[str, dict[str, str]], keyed: Keyed, terms: list[exp.Expr]
) -> CountedSubquery | None:
    """``sub`` as a test of its one input's keys, where that is all it is: ``EXISTS (SELECT … FROM t
    WHERE t.c = o.x AND <t's own conditions>)`` (NOT EXISTS alike), or ``o.x IN (SELECT t.c FROM t
    WHERE <t's own conditions>)``. It then holds for an outer row exactly when some row of t passing
    its own conditions has c = x (a NULL x matches none): the count of such rows per key is all a run
    needs of t (``workers.jobs.fast.operators.semi_join``). None otherwise (another correlation, a
    join, a grouping, a nested subquery: TPC-H Q21's ``l2.l_suppkey <> l1.l_suppkey``). ``names``:
    the input's alias, and the outer tables' views by alias (``column_pair``'s)."""
    alias, reachable = names
    if operator not in _COUNTED_OPERATORS or keyed.column is None:
        return None
    if any(sub.args.get(c) for c in _NOT_COUNTED_CLAUSES):
        return None
    in_form = operator == "semi join (IN)"
    # EXISTS tests rows, not what they select: only as long as a row selects one (a generator makes
    # none or more).
    listed = (e.this if isinstance(e, exp.Alias) else e for e in sub.expressions)
    if not in_form and not all(isinstance(e, exp.Star | exp.Column | exp.Literal) for e in listed):
        return None
    if any(isinstance(n, exp.Query) and n is not sub for n in sub.walk()):
        return None
    pair = (keyed.column, keyed.outer_view, keyed.outer_column)
    correlation = [t for t in terms if column_pair(t, alias, reachable) == pair]
    own = [t for t in terms if all(c.table == alias for c in t.find_all(exp.Column))]
    if len(own) + len(correlation) != len(terms) or len(correlation) != (0 if in_form else 1):
        return None
    source = sub.args["from_"].this  # the input's view by now
    query = exp.select(exp.column(keyed.column, table=alias, quoted=True)).from_(source.copy())
    if own:
        query = query.where(exp.and_(*[t.copy() for t in own]))
    if in_form:  # the key column it selects is the key set's
        return CountedSubquery(sub, query.sql(dialect=DIALECT), None, None)
    return CountedSubquery(sub, query.sql(dialect=DIALECT), correlation[0].copy(), [exp.Literal.number(1)])


def over_key_sets(select: exp.Select, counted: list[CountedSubquery]) -> str | None:
    """``select``'s SQL with each counted subquery reading its input as a set of keys: its own
    conditions gone (the run binds the input's view to the keys its matching rows hold, in a column
    named as the key: ``Block.over_key_sets``); None where no subquery is counted."""
    if not counted:
        return None
    kept = [(c.sub, c.sub.args.get("where"), c.sub.expressions) for c in counted]
    for c in counted:
        c.sub.set("where", None if c.where is None else exp.Where(this=c.where.copy()))
        if c.expressions is not None:
            c.sub.set("expressions", [e.copy() for e in c.expressions])
    try:
        return select.sql(dialect=DIALECT)
    finally:
        for sub, where, expressions in kept:
            sub.set("where", where)
            sub.set("expressions", expressions)
