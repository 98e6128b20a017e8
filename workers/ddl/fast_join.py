"""Fast-refresh eligibility of a projection or aggregate over an inner equi-join of distinct tables
(kinds ``join_projection``, ``join_aggregate``; applied by ``workers.jobs.fast.join``).

Tables join by ``JOIN … ON a.k = b.k [AND …]``, ``USING (k)``, or as ``FROM a, b WHERE a.k = b.k``
(a comma or CROSS JOIN whose equalities are in WHERE, as TPC-H writes them). Every equality of
columns of two tables among WHERE's top-level conjuncts is a join key too (keys only narrow reads:
the job runs the query's own text); a table that no equality links to the others is a true cross
join, refused."""

from __future__ import annotations

from dataclasses import replace

from sqlglot import exp

from workers.ddl.dialect import DIALECT
from workers.ddl.fast_rules import (
    NotEligible,
    aggregate_plan,
    check_unique,
    column_name,
    projection_item,
    table_of,
)
from workers.ddl.plan import FastRefreshPlan, JoinInput, JoinKey, JoinTable, computed_keys

_ACTIONABLE = "only inner joins on column equalities (ON a.k = b.k [AND …], or USING (k)) are supported"


def join_plan(select: exp.Select, first: exp.Table) -> FastRefreshPlan:
    """A projection or aggregate over an inner equi-join of distinct tables, each read directly
    (``select``'s columns qualified where its tables' columns are known, ``workers.ddl.resolve``)."""
    tables = [JoinTable(first.name.lower(), first.alias_or_name.lower())]
    keys: list[JoinKey] = []
    crossed: list[tuple[JoinTable, exp.Join]] = []  # joined with no condition: linked by WHERE
    for join in select.args["joins"]:
        right = table_of(join.this)
        table = JoinTable(right.name.lower(), right.alias_or_name.lower())
        if table.table in {t.table for t in tables}:
            raise NotEligible(
                f"it reads {table.table} twice (a self-join); only joins of distinct tables are supported",
                right,
            )
        if table.qualifier in {t.qualifier for t in tables}:
            raise NotEligible(
                f"two tables are read by the same name {table.qualifier}; give them distinct aliases", right
            )
        tables.append(table)
        if _check_join_kind(join):
            keys.extend(_join_keys(join, tables))
        else:
            crossed.append((table, join))
    where = select.args.get("where")
    keys.extend(_where_keys(where, tables))
    _check_linked(crossed, tables, keys)
    qualifiers = frozenset(t.qualifier for t in tables)
    where_sql = where.this.sql(dialect=DIALECT) if where is not None else None
    if select.args.get("group") is not None or any(i.find(exp.AggFunc) for i in select.expressions):
        plan = aggregate_plan(select, tables[0].table, where_sql, qualifiers)
        by_qualifier = {t.qualifier: t.table for t in tables}
        references = {column_name(c, qualifiers): c for c in select.find_all(exp.Column)}
        inputs = []
        arguments = {a.column: a.argument for a in plan.aggregates if a.column and a.argument}
        arguments.update(computed_keys(plan.items))
        for name in dict.fromkeys([*plan.group_by, *(a.column for a in plan.aggregates if a.column)]):
            if name in arguments:  # an expression's value, computed by the inputs' query itself
                inputs.append(JoinInput(name, arguments[name], "", name))
                continue
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
        items = tuple(projection_item(item, qualifiers) for item in select.expressions)
        check_unique(items)
        plan = FastRefreshPlan("join_projection", tables[0].table, (), items, (), where_sql)
    return replace(plan, qualifier=tables[0].qualifier, tables=tuple(tables), join_keys=tuple(keys))


def _check_join_kind(join: exp.Join) -> bool:
    """Whether ``join`` has a condition (ON or USING); False for a comma, CROSS JOIN or bare JOIN,
    whose condition is in WHERE."""
    side, kind = (join.side or "").upper(), (join.kind or "").upper()
    if kind in ("SEMI", "ANTI"):
        raise NotEligible(f"{side} {kind} joins are not supported; {_ACTIONABLE}".lstrip(), join)
    if side:
        raise NotEligible(f"outer joins ({side} JOIN) are not supported; {_ACTIONABLE}", join)
    if (join.method or "").upper() == "NATURAL":
        raise NotEligible("NATURAL joins are not supported; name the join columns with USING (…)", join)
    if kind not in ("", "INNER", "CROSS"):
        raise NotEligible(f"{kind} joins are not supported; {_ACTIONABLE}", join)
    for clause, value in join.args.items():
        if value and clause not in ("this", "on", "using", "kind"):
            raise NotEligible(f"{clause.upper()} in a join is not supported", join)
    on = join.args.get("on")
    if kind == "CROSS" and (on is not None or join.args.get("using")):
        raise NotEligible("CROSS JOIN takes no ON or USING; write JOIN … ON", join)
    return bool(join.args.get("using")) or (on is not None and not isinstance(on, exp.Boolean))


def _where_keys(where: exp.Where | None, tables: list[JoinTable]) -> list[JoinKey]:
    """The equalities of columns of two tables among WHERE's top-level conjuncts (``a.k = b.k``), and
    those every branch of a top-level OR has among its own (TPC-H Q19's ``(p_partkey = l_partkey AND
    …) OR (p_partkey = l_partkey AND …)``): every row the WHERE passes satisfies them."""
    return [] if where is None else _conjunct_keys(where.this, {t.qualifier: t.table for t in tables})


def _conjunct_keys(condition: exp.Expr, by_qualifier: dict[str, str]) -> list[JoinKey]:
    keys: list[JoinKey] = []
    for term in condition.flatten() if isinstance(condition, exp.And) else [condition]:
        term = term.unnest()
        if isinstance(term, exp.Or):
            branches = [_conjunct_keys(b.unnest(), by_qualifier) for b in term.flatten()]
            shared = set.intersection(*[{_sides(k) for k in found} for found in branches])
            keys.extend(k for k in branches[0] if _sides(k) in shared)
            continue
        if not isinstance(term, exp.EQ):
            continue
        sides = [
            (by_qualifier[c.table.lower()], c.name.lower())
            for c in (term.this, term.expression)
            if isinstance(c, exp.Column)
            and isinstance(c.this, exp.Identifier)
            and not c.args.get("db")
            and c.table.lower() in by_qualifier
        ]
        if len(sides) == 2 and sides[0][0] != sides[1][0]:
            (left_table, left_column), (right_table, right_column) = sides
            keys.append(JoinKey(left_table, left_column, right_table, right_column))
    return keys


def _sides(key: JoinKey) -> frozenset[tuple[str, str]]:
    """A key's two columns, whichever way round it is written."""
    return frozenset({(key.left_table, key.left_column), (key.right_table, key.right_column)})


def _check_linked(
    crossed: list[tuple[JoinTable, exp.Join]], tables: list[JoinTable], keys: list[JoinKey]
) -> None:
    """Every table joined without a condition (``crossed``) must be linked to the first table by a
    chain of key equalities: else its join is a true cross join."""
    reached, edges = {tables[0].table}, [(k.left_table, k.right_table) for k in keys]
    grown = True
    while grown:
        grown = False
        for left, right in edges:
            if (left in reached) != (right in reached):
                reached |= {left, right}
                grown = True
    for table, join in crossed:
        if table.table not in reached:
            shown = join.this.sql(dialect=DIALECT)
            raise NotEligible(
                f"{shown} is joined to the other tables by no equality of columns (a cross join); "
                f"add the join condition to WHERE ({table.qualifier}.<column> = <table>.<column>) or ON",
                join,
                unqualified=True,  # unqualified equalities in WHERE may link it once resolved
            )


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
            raise NotEligible(
                f"join condition {shown} (<=>) matches NULL keys; use = (NULL keys never match)", condition
            )
        if not isinstance(condition, exp.EQ):
            raise NotEligible(
                f"join condition {shown} is not an equality of columns; move it to WHERE ({_ACTIONABLE})",
                condition,
            )
        sides = []
        for column in (condition.this, condition.expression):
            if (
                not isinstance(column, exp.Column)
                or column.args.get("db")
                or not isinstance(column.this, exp.Identifier)
            ):
                raise NotEligible(
                    f"join condition {shown} is not an equality of columns; move it to WHERE ({_ACTIONABLE})",
                    condition,
                )
            if column.table.lower() not in by_qualifier:
                raise NotEligible(
                    f"qualify the columns of the join condition {shown} with their tables (ON a.k = b.k)",
                    column,
                    unqualified=True,
                )
            sides.append((by_qualifier[column.table.lower()], column.name.lower()))
        (left_table, left_column), (right_table, right_column) = sides
        if left_table == right_table:
            raise NotEligible(
                f"join condition {shown} compares two columns of one table; move it to WHERE", condition
            )
        keys.append(JoinKey(left_table, left_column, right_table, right_column))
    if not any(right.table in (k.left_table, k.right_table) for k in keys):
        raise NotEligible(
            f"the condition of the join with {right.qualifier} does not name it; {_ACTIONABLE}", join
        )
    return keys
