"""Inputs read only through how many of their rows match each key (the analysis side of
``workers.jobs.fast.operators.semi_join``): which EXISTS / NOT EXISTS / IN subqueries depend on their
input only so, and which LEFT JOINs under a GROUP BY do (their right side read only by ``COUNT(column)``:
TPC-H Q13); the SQL of those rows' keys (``Keyed.matches``), and the block's SQL reading a set of keys
(for a LEFT JOIN, one row per key with its count, which the aggregate above sums) instead
(``Block.over_key_sets``, ``Aggregate.over_key_sets``)."""

from __future__ import annotations

from dataclasses import dataclass, replace

import sqlglot
from sqlglot import exp

from workers.ddl.dialect import DIALECT
from workers.ddl.tree.terms import column_pair, conjuncts
from workers.ddl.tree.values import Block, Keyed, Scan

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


def counted_left_join(block: Block, select: exp.Select, aggregate_sql: str) -> tuple[Block, str | None]:
    """``block`` (``select``: its SELECT, sources renamed to their views) under the GROUP BY
    ``aggregate_sql`` with its one keyed input counted per key where that is all the aggregate reads
    of it, and the aggregate's SQL over the counts (None where not counted): a LEFT JOIN of a table
    ``t`` on one equality ``t.c = o.x`` plus conditions on t's own rows, whose columns the block
    selects only as a column (one column y of t), and the aggregate's every aggregate is ``COUNT(y)``.
    A row of o then yields a row per row of t matching its x (one NULL-padded row for none), in the
    group of o's row, and ``COUNT(y)`` counts those with y not NULL: the count of t's rows per key
    that pass their own conditions with y not NULL is all the aggregate needs of t
    (``Keyed.count_column``). Over the counts, t is one row per key with its count in y, and each
    ``COUNT(y)`` a ``COALESCE(SUM(y), 0)`` (``Aggregate.over_key_sets``). Not with another aggregate:
    how many rows a row of o yields differs where some match has a NULL y (``COUNT(*)``, ``SUM`` of
    o's columns). The block unchanged otherwise (any other use of t, a second keyed input, a
    counted subquery)."""
    if len(block.keyed) != 1 or block.over_key_sets is not None:
        return block, None
    keyed = block.keyed[0]
    node = next((n for n in block.inputs if n.view == keyed.view), None)
    if keyed.operator != "left outer join" or keyed.column is None or not isinstance(node, Scan):
        return block, None
    joins = select.args.get("joins") or []
    index = next(
        (i for i, j in enumerate(joins) if isinstance(j.this, exp.Table) and j.this.name == node.view), None
    )
    if index is None:
        return block, None
    alias = joins[index].this.alias_or_name
    sources = [select.args["from_"].this, *[j.this for j in joins]]
    others = {
        s.alias_or_name: s.name for s in sources if isinstance(s, exp.Table) and s.alias_or_name != alias
    }
    terms = conjuncts(joins[index].args.get("on"))
    pair = (keyed.column, keyed.outer_view, keyed.outer_column)
    correlation = [t for t in terms if column_pair(t, alias, others) == pair]
    own = [t for t in terms if all(c.table == alias for c in t.find_all(exp.Column))]
    if len(correlation) != 1 or len(own) + 1 != len(terms):
        return block, None
    found = _counted_column(select, alias, joins[index], aggregate_sql)
    if found is None:
        return block, None
    counted, summed = found
    if counted.lower() == keyed.column.lower():  # the counts would share the key's column (Spark's names
        return block, None  # ignore case): the block's reads of it would be ambiguous
    source = joins[index].this
    query = exp.select(exp.column(keyed.column, table=alias, quoted=True)).from_(source.copy())
    present = exp.not_(exp.column(counted, table=alias, quoted=True).is_(exp.null()))
    query = query.where(exp.and_(*[t.copy() for t in own], present))
    over = select.copy()
    over.args["joins"][index].set("on", correlation[0].copy())
    keyed = replace(keyed, matches=query.sql(dialect=DIALECT), count_column=counted)
    return replace(block, keyed=(keyed,), over_key_sets=over.sql(dialect=DIALECT)), summed


def _counted_column(
    select: exp.Select, alias: str, join: exp.Join, aggregate_sql: str
) -> tuple[str, str] | None:
    """The one column of ``alias`` that ``select`` reads outside ``join``'s ON, where it reads it only
    as a select item of its own, and every aggregate of ``aggregate_sql`` is ``COUNT`` (not DISTINCT)
    of such an item, which it reads nowhere else; and ``aggregate_sql`` with each of those counts a
    ``COALESCE(SUM(item), 0)``. None otherwise."""
    on = join.args.get("on")
    items: dict[str, str] = {}  # select item name -> the column of ``alias`` it is
    for column in select.find_all(exp.Column):
        if column.table != alias or (on is not None and _within(column, on)):
            continue
        item = column.parent
        if not isinstance(item, exp.Alias) or item.parent is not select or item.this is not column:
            return None
        items[item.alias] = column.name
    if len(set(items.values())) != 1:
        return None
    parsed = sqlglot.parse_one(aggregate_sql, dialect=DIALECT)
    for column in parsed.find_all(exp.Column):
        if column.name in items and not (
            isinstance(column.parent, exp.Count) and column.parent.this is column
        ):
            return None
    counts = list(parsed.find_all(exp.AggFunc))
    if not all(
        isinstance(c, exp.Count) and isinstance(c.this, exp.Column) and c.this.name in items for c in counts
    ):
        return None
    for count in counts:
        count.replace(exp.func("COALESCE", exp.Sum(this=count.this.copy()), exp.Literal.number(0)))
    return next(iter(items.values())), parsed.sql(dialect=DIALECT)


def _within(node: exp.Expr, ancestor: exp.Expr) -> bool:
    parent = node.parent
    while parent is not None and parent is not ancestor:
        parent = parent.parent
    return parent is ancestor
