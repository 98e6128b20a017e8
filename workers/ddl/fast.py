"""Fast (incremental) refresh eligibility and the plan the refresh job follows.

Two shapes are eligible, over one base table or an inner equi-join of several:

* projection: ``SELECT <cols/expressions> FROM t [WHERE <deterministic predicate>]`` - each change
  row maps to at most one MV row;
* aggregate: ``... GROUP BY <plain columns>`` with SUM/COUNT/AVG/MIN/MAX of plain columns - each group
  can be merged with the delta. MIN/MAX cannot be "un-merged" on delete, hence
  ``needs_recompute_on_delete``.
* either over ``FROM a JOIN b ON a.k = b.k [AND …] [JOIN c USING (k) …]`` (kinds ``join_projection``,
  ``join_aggregate``): distinct tables, inner joins whose conditions are column equalities. The job
  applies the delta rules of a join to each table's change rows (``workers.jobs.incremental_join``).

Everything else is refused with a reason the user can act on.
"""

from __future__ import annotations

from dataclasses import replace

import sqlglot
from sqlglot import TokenType, exp

from workers.ddl.dialect import DIALECT
from workers.ddl.plan import AggregateItem, FastRefreshPlan, JoinInput, JoinKey, JoinTable, SelectItem

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
_ALLOWED_CLAUSES = frozenset({"expressions", "from_", "joins", "where", "group", "hint"})
_CLAUSE_MESSAGES = {
    "with_": "WITH clauses (CTEs) are not supported",
    "distinct": "DISTINCT is not supported",
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
        plan = replace(plan, where=_clause_text(sql, TokenType.WHERE, keyword=False))
    if sql is not None and plan.source is not None:
        plan = replace(plan, source=_clause_text(sql, TokenType.FROM, keyword=True))
    return plan, ""


def _clause_text(sql: str, start: TokenType, *, keyword: bool) -> str:
    """The user's text of a clause of an eligible query (its ``start`` keyword at the query's own
    depth, included when ``keyword``), up to its GROUP BY, the parenthesis that closes the query, a
    ';' or the end."""
    tokens = sqlglot.Dialect.get_or_raise(DIALECT).tokenize(sql)
    depth, level, begin, end = 0, None, None, len(sql)
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
        elif depth < level or (
            depth == level and token.token_type in (TokenType.GROUP_BY, TokenType.SEMICOLON)
        ):
            end = token.start
            break
    assert begin is not None, f"no {start.name} in an eligible query"
    return sql[begin:end].strip()


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
    for node in select.walk():
        if node is not select and isinstance(node, exp.Query | exp.Subquery):
            raise _NotEligible("subqueries are not supported")
    source = select.args.get("from_")
    table = _table(source.this if source is not None else None)
    if select.find(exp.Window) is not None:
        raise _NotEligible("window functions are not supported")
    _check_deterministic(select)
    for item in select.expressions:
        if isinstance(item, exp.Star) or (isinstance(item, exp.Column) and isinstance(item.this, exp.Star)):
            raise _NotEligible("SELECT * is not supported; list the output columns")
    if select.args.get("joins"):
        return _join_plan(select, table)
    if len(base_tables) != 1:
        raise _NotEligible(f"it reads {len(base_tables)} tables; only one base table is supported")
    qualifier = table.alias_or_name
    select = _unqualified(select, {qualifier.lower(), table.name.lower()})
    where = select.args.get("where")
    where_sql = where.this.sql(dialect=DIALECT) if where is not None else None
    if select.args.get("group") is not None or any(i.find(exp.AggFunc) for i in select.expressions):
        return replace(_aggregate_plan(select, base_tables[0], where_sql), qualifier=qualifier)
    items = tuple(_projection_item(item) for item in select.expressions)
    _check_unique(items)
    return FastRefreshPlan("projection", base_tables[0], (), items, (), where_sql, qualifier)


def _table(node: exp.Expr | None) -> exp.Table:
    """``node`` when it is a plain table reference (with an alias at most)."""
    if not isinstance(node, exp.Table):
        raise _NotEligible("the query must read its tables directly in FROM and JOIN")
    for clause, value in node.args.items():
        if value and clause not in ("this", "alias"):
            raise _NotEligible(
                _CLAUSE_MESSAGES.get(clause, f"{clause.upper()} on the table is not supported")
            )
    return node


def _projection_item(item: exp.Expression, qualifiers: frozenset[str] = frozenset()) -> SelectItem:
    inner = item.unalias()
    column = _column_name(inner, qualifiers)
    if isinstance(item, exp.Alias):
        name = item.alias
    elif column is not None:
        name = inner.name  # Spark names a column, qualified or not, by itself
    else:
        raise _NotEligible(f"expression {item.sql(dialect=DIALECT)} needs an output name (AS <name>)")
    return SelectItem(name.lower(), inner.sql(dialect=DIALECT), column)


def _aggregate_plan(
    select: exp.Select, base_table: str, where_sql: str | None, qualifiers: frozenset[str] = frozenset()
) -> FastRefreshPlan:
    """``qualifiers``: the names a join reads its tables by; columns are then named ``q.column``."""
    group = select.args.get("group")
    group_by: list[str] = []
    if group is not None:
        if any(group.args.get(k) for k in ("grouping_sets", "cube", "rollup", "totals", "all")):
            raise _NotEligible("GROUP BY ALL, ROLLUP, CUBE and GROUPING SETS are not supported")
        for key in group.expressions:
            key_name = _column_name(key, qualifiers)
            if key_name is None:
                raise _NotEligible(f"GROUP BY must list plain columns, found {key.sql(dialect=DIALECT)}")
            group_by.append(key_name)
    items: list[SelectItem] = []
    aggregates: list[AggregateItem] = []
    for item in select.expressions:
        inner = item.unalias()
        if isinstance(inner, exp.Column):
            if _column_name(inner, qualifiers) not in group_by:
                raise _NotEligible(f"column {inner.sql(dialect=DIALECT)} is neither grouped nor aggregated")
            items.append(_projection_item(item, qualifiers))
            continue
        aggregate = _aggregate(item, inner, qualifiers)
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


def _aggregate(item: exp.Expression, inner: exp.Expression, qualifiers: frozenset[str]) -> AggregateItem:
    function = _AGGREGATES.get(type(inner))
    if function is None:
        raise _NotEligible(
            f"{item.sql(dialect=DIALECT)} is not supported; select GROUP BY columns and "
            "SUM, COUNT, AVG, MIN or MAX of a plain column"
        )
    argument = inner.this
    column: str | None
    if _column_name(argument, qualifiers) is not None:
        column = _column_name(argument, qualifiers)
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


def _column_name(node: exp.Expr, qualifiers: frozenset[str] = frozenset()) -> str | None:
    """The lower-case name when ``node`` is a plain column reference: unqualified, or (in a join)
    qualified by one of ``qualifiers``, then named ``qualifier.column``."""
    if not isinstance(node, exp.Column) or not isinstance(node.this, exp.Identifier) or node.args.get("db"):
        return None
    if not node.table:
        return node.name.lower()
    if node.table.lower() in qualifiers:
        return f"{node.table.lower()}.{node.name.lower()}"
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


# ------------------------------------------------------------------------------------------- joins

_ACTIONABLE = "only inner joins on column equalities (ON a.k = b.k [AND …], or USING (k)) are supported"


def _join_plan(select: exp.Select, first: exp.Table) -> FastRefreshPlan:
    """A projection or aggregate over an inner equi-join of distinct tables, each read directly."""
    tables = [JoinTable(first.name.lower(), first.alias_or_name.lower())]
    keys: list[JoinKey] = []
    for join in select.args["joins"]:
        _check_join_kind(join)
        right = _table(join.this)
        table = JoinTable(right.name.lower(), right.alias_or_name.lower())
        if table.table in {t.table for t in tables}:
            raise _NotEligible(
                f"it reads {table.table} twice (a self-join); only joins of distinct tables are supported"
            )
        if table.qualifier in {t.qualifier for t in tables}:
            raise _NotEligible(
                f"two tables are read by the same name {table.qualifier}; give them distinct aliases"
            )
        tables.append(table)
        keys.extend(_join_keys(join, tables))
    qualifiers = frozenset(t.qualifier for t in tables)
    where = select.args.get("where")
    where_sql = where.this.sql(dialect=DIALECT) if where is not None else None
    if select.args.get("group") is not None or any(i.find(exp.AggFunc) for i in select.expressions):
        plan = _aggregate_plan(select, tables[0].table, where_sql, qualifiers)
        by_qualifier = {t.qualifier: t.table for t in tables}
        references = {_column_name(c, qualifiers): c for c in select.find_all(exp.Column)}
        inputs = []
        for name in dict.fromkeys([*plan.group_by, *(a.column for a in plan.aggregates if a.column)]):
            node = references[name]
            owner = by_qualifier.get(node.table.lower(), "")
            inputs.append(JoinInput(name, node.sql(dialect=DIALECT), owner, node.name.lower()))
        # ``source`` is replaced by the user's own text when the query text is known.
        source = f"FROM {first.sql(dialect=DIALECT)} " + " ".join(
            j.sql(dialect=DIALECT) for j in select.args["joins"]
        )
        if where_sql is not None:
            source += f" WHERE {where_sql}"
        plan = replace(plan, kind="join_aggregate", inputs=tuple(inputs), source=source)
    else:
        items = tuple(_projection_item(item, qualifiers) for item in select.expressions)
        _check_unique(items)
        plan = FastRefreshPlan("join_projection", tables[0].table, (), items, (), where_sql)
    return replace(plan, qualifier=tables[0].qualifier, tables=tuple(tables), join_keys=tuple(keys))


def _check_join_kind(join: exp.Join) -> None:
    side, kind = (join.side or "").upper(), (join.kind or "").upper()
    if kind in ("SEMI", "ANTI"):
        raise _NotEligible(f"{side} {kind} joins are not supported; {_ACTIONABLE}".lstrip())
    if side:
        raise _NotEligible(f"outer joins ({side} JOIN) are not supported; {_ACTIONABLE}")
    if (join.method or "").upper() == "NATURAL":
        raise _NotEligible("NATURAL joins are not supported; name the join columns with USING (…)")
    on = join.args.get("on")
    if kind == "CROSS" or (not join.args.get("using") and (on is None or isinstance(on, exp.Boolean))):
        raise _NotEligible(
            f"cross joins (CROSS JOIN, FROM a, b, JOIN without ON) are not supported; {_ACTIONABLE}"
        )
    if kind not in ("", "INNER"):
        raise _NotEligible(f"{kind} joins are not supported; {_ACTIONABLE}")
    for clause, value in join.args.items():
        if value and clause not in ("this", "on", "using", "kind"):
            raise _NotEligible(f"{clause.upper()} in a join is not supported")


def _join_keys(join: exp.Join, tables: list[JoinTable]) -> list[JoinKey]:
    """The equalities ``join`` adds; each must involve its (last) table and an earlier one."""
    right = tables[-1]
    using = join.args.get("using")
    if using:
        if len(tables) > 2:  # which earlier table holds the column, Spark decides: no key to narrow by
            return []
        return [JoinKey(tables[0].table, u.name.lower(), right.table, u.name.lower()) for u in using]
    by_qualifier = {t.qualifier: t.table for t in tables}
    keys: list[JoinKey] = []
    for condition in join.args["on"].flatten() if isinstance(join.args["on"], exp.And) else [join.args["on"]]:
        shown = condition.sql(dialect=DIALECT)
        if isinstance(condition, exp.NullSafeEQ):
            raise _NotEligible(
                f"join condition {shown} (<=>) matches NULL keys; use = (NULL keys never match)"
            )
        if not isinstance(condition, exp.EQ):
            raise _NotEligible(
                f"join condition {shown} is not an equality of columns; move it to WHERE ({_ACTIONABLE})"
            )
        sides = []
        for column in (condition.this, condition.expression):
            if (
                not isinstance(column, exp.Column)
                or column.args.get("db")
                or not isinstance(column.this, exp.Identifier)
            ):
                raise _NotEligible(
                    f"join condition {shown} is not an equality of columns; move it to WHERE ({_ACTIONABLE})"
                )
            if column.table.lower() not in by_qualifier:
                raise _NotEligible(
                    f"qualify the columns of the join condition {shown} with their tables (ON a.k = b.k)"
                )
            sides.append((by_qualifier[column.table.lower()], column.name.lower()))
        (left_table, left_column), (right_table, right_column) = sides
        if left_table == right_table:
            raise _NotEligible(f"join condition {shown} compares two columns of one table; move it to WHERE")
        keys.append(JoinKey(left_table, left_column, right_table, right_column))
    if not any(right.table in (k.left_table, k.right_table) for k in keys):
        raise _NotEligible(
            f"the condition of the join with {right.qualifier} does not name it; {_ACTIONABLE}"
        )
    return keys
