"""Fast (incremental) refresh eligibility and the plan the refresh job follows.

Only two shapes are eligible, both over exactly one base table, because for them the change rows of
the MV log can be applied to the MV without re-reading the base table:

* projection: ``SELECT <cols/expressions> FROM t [WHERE <deterministic predicate>]`` - each change
  row maps to at most one MV row;
* aggregate: ``... GROUP BY <plain columns>`` with SUM/COUNT/AVG/MIN/MAX of plain columns - each group
  can be merged with the delta. MIN/MAX cannot be "un-merged" on delete, hence
  ``needs_recompute_on_delete``.

Everything else is refused with a reason the user can act on.
"""

from __future__ import annotations

from dataclasses import replace

import sqlglot
from sqlglot import TokenType, exp

from workers.ddl.dialect import DIALECT
from workers.ddl.plan import AggregateItem, FastRefreshPlan, SelectItem

__all__ = ["AggregateItem", "FastRefreshPlan", "SelectItem", "plan_fast_refresh"]

_AGGREGATES: dict[type[exp.Expression], str] = {
    exp.Sum: "SUM",
    exp.Count: "COUNT",
    exp.Avg: "AVG",
    exp.Min: "MIN",
    exp.Max: "MAX",
}

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
_ALLOWED_CLAUSES = frozenset({"expressions", "from_", "where", "group", "hint"})
_CLAUSE_MESSAGES = {
    "with_": "WITH clauses (CTEs) are not supported",
    "distinct": "DISTINCT is not supported",
    "joins": "joins are not supported",
    "laterals": "LATERAL VIEW is not supported",
    "having": "HAVING is not supported",
    "qualify": "QUALIFY is not supported",
    "windows": "WINDOW clauses are not supported",
    "distribute": "DISTRIBUTE BY is not supported",
    "sort": "SORT BY is not supported",
    "cluster": "CLUSTER BY is not supported",
    "order": "ORDER BY is not supported",
    "limit": "LIMIT is not supported",
    "offset": "OFFSET is not supported",
    "pivots": "PIVOT is not supported",
    "sample": "TABLESAMPLE is not supported",
    "version": "time travel (VERSION/TIMESTAMP AS OF) is not supported",
}


class _NotEligible(Exception):
    pass


def plan_fast_refresh(
    tree: exp.Query, base_tables: tuple[str, ...], sql: str | None = None
) -> tuple[FastRefreshPlan | None, str]:
    """The plan, or None and the reason (user-facing, completes "fast refresh is not possible: …").

    ``sql`` is the text ``tree`` was parsed from: the plan's ``where`` is then cut from it verbatim.
    """
    try:
        plan = _plan(tree, base_tables)
    except _NotEligible as why:
        return None, str(why)
    if sql is not None and plan.where is not None:
        plan = replace(plan, where=_where_text(sql))
    return plan, ""


def _where_text(sql: str) -> str:
    """The text of the (only) WHERE condition of an eligible query: after WHERE, up to its GROUP BY,
    the parenthesis that closes the query, a ';' or the end."""
    tokens = sqlglot.Dialect.get_or_raise(DIALECT).tokenize(sql)
    start = next(i for i, t in enumerate(tokens) if t.token_type == TokenType.WHERE)
    depth, end = 0, len(sql)
    for token in tokens[start + 1 :]:
        if token.token_type == TokenType.L_PAREN:
            depth += 1
        elif token.token_type == TokenType.R_PAREN:
            depth -= 1
        if depth < 0 or (depth == 0 and token.token_type in (TokenType.GROUP_BY, TokenType.SEMICOLON)):
            end = token.start
            break
    return sql[tokens[start].end + 1 : end].strip()


def _plan(tree: exp.Query, base_tables: tuple[str, ...]) -> FastRefreshPlan:
    select: exp.Expr = tree
    while isinstance(select, exp.Subquery):
        select = select.this
    if isinstance(select, exp.SetOperation):
        raise _NotEligible("set operations (UNION, INTERSECT, EXCEPT) are not supported")
    if not isinstance(select, exp.Select):
        raise _NotEligible("only a plain SELECT is supported")
    for clause, value in select.args.items():
        if value and clause not in _ALLOWED_CLAUSES:
            raise _NotEligible(_CLAUSE_MESSAGES.get(clause, f"{clause.upper()} is not supported"))
    if len(base_tables) != 1:
        raise _NotEligible(f"it reads {len(base_tables)} tables; only one base table is supported")
    for node in select.walk():
        if node is not select and isinstance(node, exp.Query | exp.Subquery):
            raise _NotEligible("subqueries are not supported")
    source = select.args.get("from_")
    table = source.this if source is not None else None
    if not isinstance(table, exp.Table):
        raise _NotEligible("the query must read its table directly in FROM")
    for clause, value in table.args.items():
        if value and clause not in ("this", "alias"):
            raise _NotEligible(
                _CLAUSE_MESSAGES.get(clause, f"{clause.upper()} on the table is not supported")
            )
    qualifier = table.alias_or_name
    select = _unqualified(select, {qualifier.lower(), table.name.lower()})
    if select.find(exp.Window) is not None:
        raise _NotEligible("window functions are not supported")
    _check_deterministic(select)
    for item in select.expressions:
        if isinstance(item, exp.Star) or (isinstance(item, exp.Column) and isinstance(item.this, exp.Star)):
            raise _NotEligible("SELECT * is not supported; list the output columns")
    where = select.args.get("where")
    where_sql = where.this.sql(dialect=DIALECT) if where is not None else None
    if select.args.get("group") is not None or any(i.find(exp.AggFunc) for i in select.expressions):
        return replace(_aggregate_plan(select, base_tables[0], where_sql), qualifier=qualifier)
    items = tuple(_projection_item(item) for item in select.expressions)
    _check_unique(items)
    return FastRefreshPlan("projection", base_tables[0], (), items, (), where_sql, qualifier)


def _projection_item(item: exp.Expression) -> SelectItem:
    inner = item.unalias()
    column = _column_name(inner)
    if isinstance(item, exp.Alias):
        name = item.alias
    elif column is not None:
        name = column
    else:
        raise _NotEligible(f"expression {item.sql(dialect=DIALECT)} needs an output name (AS <name>)")
    return SelectItem(name.lower(), inner.sql(dialect=DIALECT), column)


def _aggregate_plan(select: exp.Select, base_table: str, where_sql: str | None) -> FastRefreshPlan:
    group = select.args.get("group")
    group_by: list[str] = []
    if group is not None:
        if any(group.args.get(k) for k in ("grouping_sets", "cube", "rollup", "totals", "all")):
            raise _NotEligible("GROUP BY ALL, ROLLUP, CUBE and GROUPING SETS are not supported")
        for key in group.expressions:
            key_name = _column_name(key)
            if key_name is None:
                raise _NotEligible(f"GROUP BY must list plain columns, found {key.sql(dialect=DIALECT)}")
            group_by.append(key_name)
    items: list[SelectItem] = []
    aggregates: list[AggregateItem] = []
    for item in select.expressions:
        inner = item.unalias()
        if isinstance(inner, exp.Column):
            if _column_name(inner) not in group_by:
                raise _NotEligible(f"column {inner.sql(dialect=DIALECT)} is neither grouped nor aggregated")
            items.append(_projection_item(item))
            continue
        aggregate = _aggregate(item, inner)
        aggregates.append(aggregate)
        items.append(SelectItem(aggregate.name, inner.sql(dialect=DIALECT), None))
    selected = {i.column for i in items if i.column is not None}
    for key_name in group_by:
        if key_name not in selected:
            raise _NotEligible(f"GROUP BY column {key_name} must also be selected")
    _check_unique(items)
    return FastRefreshPlan(
        "aggregate", base_table, tuple(group_by), tuple(items), tuple(aggregates), where_sql
    )


def _aggregate(item: exp.Expression, inner: exp.Expression) -> AggregateItem:
    function = _AGGREGATES.get(type(inner))
    if function is None:
        raise _NotEligible(
            f"{item.sql(dialect=DIALECT)} is not supported; select GROUP BY columns and "
            "SUM, COUNT, AVG, MIN or MAX of a plain column"
        )
    argument = inner.this
    column: str | None
    if _column_name(argument) is not None:
        column = _column_name(argument)
    elif function == "COUNT" and (
        isinstance(argument, exp.Star) or (isinstance(argument, exp.Literal) and not argument.is_string)
    ):
        column = None  # COUNT(*) and the COUNT(1) idiom count rows
    elif isinstance(argument, exp.Distinct):
        raise _NotEligible(f"{function}(DISTINCT ...) is not supported")
    else:
        raise _NotEligible(f"the argument of {inner.sql(dialect=DIALECT)} must be a plain column")
    if inner.expressions:
        raise _NotEligible(f"{inner.sql(dialect=DIALECT)} takes extra arguments; not supported")
    if not isinstance(item, exp.Alias):
        raise _NotEligible(f"aggregate {inner.sql(dialect=DIALECT)} needs an output name (AS <name>)")
    return AggregateItem(function, column, item.alias.lower(), function in ("MIN", "MAX"))


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


def _column_name(node: exp.Expr) -> str | None:
    """The lower-case name when ``node`` is a plain (unqualified) column reference."""
    if isinstance(node, exp.Column) and not node.table and isinstance(node.this, exp.Identifier):
        return node.name.lower()
    return None


def _check_deterministic(select: exp.Select) -> None:
    for func in select.find_all(exp.Func):
        name = func.name.lower() if isinstance(func, exp.Anonymous) else ""
        if isinstance(func, _NONDETERMINISTIC_TYPES) or name in _NONDETERMINISTIC_NAMES:
            shown = name.upper() if name else func.sql_names()[0]
            raise _NotEligible(f"non-deterministic function {shown} is not supported")


def _check_unique(items: tuple[SelectItem, ...] | list[SelectItem]) -> None:
    seen: set[str] = set()
    for item in items:
        if item.name in seen:
            raise _NotEligible(f"output column name {item.name} is used twice")
        seen.add(item.name)
