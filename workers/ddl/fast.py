"""Fast (incremental) refresh eligibility and the plan the refresh job follows.

These shapes are eligible, over one base table or an inner equi-join of several:

* projection: ``SELECT <cols/expressions> FROM t [WHERE <deterministic predicate>]`` - each change
  row maps to at most one MV row;
* aggregate: ``... [GROUP BY <columns or expressions>]`` with SUM/COUNT/AVG/MIN/MAX of columns or
  expressions of the row, and expressions over SUM/COUNT/AVG (``FORMULA``) - each group can be merged
  with the delta. MIN/MAX cannot be "un-merged" on delete, hence ``needs_recompute_on_delete``.
* either over ``FROM a JOIN b ON a.k = b.k [AND …] [JOIN c USING (k) …]`` (kinds ``join_projection``,
  ``join_aggregate``): distinct tables, inner joins whose conditions are column equalities. The job
  applies the delta rules of a join to each table's change rows (``workers.jobs.fast.join``).
* an aggregate of one table or a join with HAVING (kinds ``aggregate_having``,
  ``join_aggregate_having``; ``workers.ddl.fast_having``): the groups change rows reach are
  recomputed (``workers.jobs.fast.having``).
* UNION ALL of projections of one table each (kind ``union_projection``, ``workers.ddl.fast_union``):
  the query run over the tables' change rows (``workers.jobs.fast.union``).

A join's unqualified columns are resolved against its tables' columns when they are given
(``workers.ddl.resolve``). ORDER BY is accepted and not stored (a table has no order; read the MV
with ORDER BY). A refusal names the construct, and ``FastVerdict.position`` says where it is.

Everything else is refused with a reason the user can act on.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import sqlglot
from sqlglot import TokenType, exp

from workers.ddl.dialect import DIALECT
from workers.ddl.fast_having import having_plan
from workers.ddl.fast_join import join_plan
from workers.ddl.fast_rules import (
    CLAUSE_MESSAGES,
    NotEligible,
    aggregate_plan,
    check_unique,
    projection_item,
    table_of,
)
from workers.ddl.fast_union import union_plan
from workers.ddl.plan import AggregateItem, FastRefreshPlan, SelectItem
from workers.ddl.resolve import ColumnsOf, resolved

__all__ = ["AggregateItem", "FastRefreshPlan", "FastVerdict", "SelectItem", "plan_fast_refresh"]


# A refresh that re-evaluates these over the delta would disagree with a complete refresh.
_NONDETERMINISTIC_TYPES: tuple[type[exp.Expression], ...] = (
    exp.Rand,
    exp.Randn,
    exp.Randstr,
    exp.Uniform,
    exp.Uuid,
    exp.Shuffle,
    exp.CurrentDate,
    exp.CurrentTime,
    exp.CurrentTimestamp,
    exp.CurrentTimestampLTZ,
    exp.Localtimestamp,
)
_NONDETERMINISTIC_NAMES = frozenset(
    {
        "now",
        "rand",
        "random",
        "randn",
        "uuid",
        "monotonically_increasing_id",
        "spark_partition_id",
        "input_file_name",
        "input_file_block_start",
        "input_file_block_length",
        "reflect",
        "java_method",
        "try_reflect",
    }
)

# Select clauses a fast plan can live with; every other populated clause is refused by name.
_ALLOWED_CLAUSES = frozenset({"expressions", "from_", "joins", "where", "group", "having", "hint", "order"})
# Tokens that end a WHERE or FROM … WHERE clause at the query's own depth.
_CLAUSE_ENDS = (TokenType.GROUP_BY, TokenType.HAVING, TokenType.ORDER_BY, TokenType.SEMICOLON)


@dataclass(frozen=True)
class FastVerdict:
    """The plan, or None and the ``reason`` (user-facing, completes "fast refresh is not possible:
    …") with the ``position`` (0-based offset in the query text) of the construct it names, when
    known; ``needs_columns``: the refusal may go once the tables' columns resolve the join's
    unqualified columns (the coordinator's analysis, which reads them, decides)."""

    plan: FastRefreshPlan | None
    reason: str = ""
    position: int | None = None
    needs_columns: bool = False


def plan_fast_refresh(
    tree: exp.Query, base_tables: tuple[str, ...], sql: str | None = None, columns_of: ColumnsOf | None = None
) -> FastVerdict:
    """The fast-refresh plan of ``tree``, or why there is none.

    ``sql`` is the text ``tree`` was parsed from: the plan's ``where`` is then cut from it verbatim.
    ``columns_of`` gives a base table's columns (to resolve a join's unqualified columns).
    """
    try:
        plan = _plan(tree, base_tables, columns_of)
    except NotEligible as why:
        return FastVerdict(None, str(why), why.position, why.needs_columns)
    if sql is not None and plan.where is not None:
        plan = replace(plan, where=_clause_text(sql, TokenType.WHERE, keyword=False))
    if sql is not None and plan.source is not None:
        plan = replace(plan, source=_clause_text(sql, TokenType.FROM, keyword=True))
    return FastVerdict(plan)


def _clause_text(sql: str, start: TokenType, *, keyword: bool) -> str:
    """The user's text of a clause of an eligible query (its ``start`` keyword at the query's own
    depth, included when ``keyword``), up to its GROUP BY, the parenthesis that closes the query, a
    ';' or the end."""
    tokens = sqlglot.Dialect.get_or_raise(DIALECT).tokenize(sql)
    depth, level, begin, end = 0, None, None, len(sql)  # HAVING ends a WHERE without GROUP BY
    for token in tokens:
        if token.token_type == TokenType.L_PAREN:
            depth += 1
        elif token.token_type == TokenType.R_PAREN:
            depth -= 1
        if level is None:
            level = depth if token.token_type == TokenType.SELECT else None
        elif begin is None:
            if depth == level and token.token_type == start:
                begin = token.start if keyword else token.end + 1
        elif depth < level or (depth == level and token.token_type in _CLAUSE_ENDS):
            end = token.start
            break
    assert begin is not None, f"no {start.name} in an eligible query"
    return sql[begin:end].strip()


def _plan(tree: exp.Query, base_tables: tuple[str, ...], columns_of: ColumnsOf | None) -> FastRefreshPlan:
    select: exp.Expr = tree
    while isinstance(select, exp.Subquery):
        select = select.this
    if isinstance(select, exp.SetOperation):
        return union_plan(select, _branch_plan)
    if not isinstance(select, exp.Select):
        raise NotEligible("only a plain SELECT is supported", select)
    for clause, value in select.args.items():
        if value and clause not in _ALLOWED_CLAUSES:
            shown = CLAUSE_MESSAGES.get(clause, f"{clause.upper()} is not supported")
            raise NotEligible(shown, value if isinstance(value, exp.Expr) else None)
    for node in select.walk():
        if node is not select and isinstance(node, exp.Query | exp.Subquery):
            raise NotEligible("subqueries are not supported", node)
    source = select.args.get("from_")
    table = table_of(source.this if source is not None else None)
    window = select.find(exp.Window)
    if window is not None:
        raise NotEligible("window functions are not supported", window)
    check_deterministic(select)
    for item in select.expressions:
        if isinstance(item, exp.Star) or (isinstance(item, exp.Column) and isinstance(item.this, exp.Star)):
            raise NotEligible("SELECT * is not supported; list the output columns", item)
    unresolved = False
    if select.args.get("joins"):
        joined = [j.this for j in select.args["joins"] if isinstance(j.this, exp.Table)]
        resolution = resolved(select, [table, *joined], columns_of)
        select, unresolved = resolution.select, resolution.unresolved
        try:
            plan = join_plan(select, table)
        except NotEligible as why:
            why.needs_columns = unresolved and why.unqualified
            raise
    else:
        if len(base_tables) != 1:
            raise NotEligible(f"it reads {len(base_tables)} tables; only one base table is supported", select)
        qualifier = table.alias_or_name
        select = _unqualified(select, {qualifier.lower(), table.name.lower()})
        plan = _one_table_plan(select, base_tables[0], qualifier)
    having = select.args.get("having")  # one table: without its qualifier, like the plan's names
    if having is None:
        return plan
    try:
        return having_plan(having, plan)
    except NotEligible as why:
        why.needs_columns = unresolved and why.unqualified
        raise


def _one_table_plan(select: exp.Select, base_table: str, qualifier: str) -> FastRefreshPlan:
    where = select.args.get("where")
    where_sql = where.this.sql(dialect=DIALECT) if where is not None else None
    if select.args.get("group") is not None or any(i.find(exp.AggFunc) for i in select.expressions):
        return replace(aggregate_plan(select, base_table, where_sql), qualifier=qualifier)
    items = tuple(projection_item(item) for item in select.expressions)
    check_unique(items)
    return FastRefreshPlan("projection", base_table, (), items, (), where_sql, qualifier)


def _branch_plan(select: exp.Select) -> FastRefreshPlan:
    """The plan of one SELECT of a UNION ALL, as if it were the whole query (over its one table)."""
    source = select.args.get("from_")
    return _plan(select, (table_of(source.this if source is not None else None).name.lower(),), None)


def _unqualified(select: exp.Select, qualifiers: set[str]) -> exp.Select:
    """A copy of ``select`` without the (single) table's qualifier on columns.

    The plan's SQL is applied to views of the change rows, where ``s.amount`` would not resolve; a
    qualifier naming something else (``payload.field``, a struct access) is kept.
    """
    copy = select.copy()
    for column in copy.find_all(exp.Column):
        if column.table.lower() in qualifiers and not column.args.get("db"):
            column.set("table", None)
    return copy


def check_deterministic(select: exp.Expr) -> None:
    """NotEligible at the first function whose value a re-evaluation over the changes could change."""
    for func in select.find_all(exp.Func):
        name = func.name.lower() if isinstance(func, exp.Anonymous) else ""
        if isinstance(func, _NONDETERMINISTIC_TYPES) or name in _NONDETERMINISTIC_NAMES:
            shown = name.upper() if name else func.sql_names()[0]
            raise NotEligible(f"non-deterministic function {shown} is not supported", func)
