"""Fast-refresh eligibility of a projection or aggregate over an inner equi-join of distinct tables
(kinds ``join_projection``, ``join_aggregate``; applied by ``workers.jobs.fast.join``)."""

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
from workers.ddl.plan import FastRefreshPlan, JoinInput, JoinKey, JoinTable

_ACTIONABLE = "only inner joins on column equalities (ON a.k = b.k [AND …], or USING (k)) are supported"


def join_plan(select: exp.Select, first: exp.Table) -> FastRefreshPlan:
    """A projection or aggregate over an inner equi-join of distinct tables, each read directly."""
    tables = [JoinTable(first.name.lower(), first.alias_or_name.lower())]
    keys: list[JoinKey] = []
    for join in select.args["joins"]:
        _check_join_kind(join)
        right = table_of(join.this)
        table = JoinTable(right.name.lower(), right.alias_or_name.lower())
        if table.table in {t.table for t in tables}:
            raise NotEligible(
                f"it reads {table.table} twice (a self-join); only joins of distinct tables are supported"
            )
        if table.qualifier in {t.qualifier for t in tables}:
            raise NotEligible(
                f"two tables are read by the same name {table.qualifier}; give them distinct aliases"
            )
        tables.append(table)
        keys.extend(_join_keys(join, tables))
    qualifiers = frozenset(t.qualifier for t in tables)
    where = select.args.get("where")
    where_sql = where.this.sql(dialect=DIALECT) if where is not None else None
    if select.args.get("group") is not None or any(i.find(exp.AggFunc) for i in select.expressions):
        plan = aggregate_plan(select, tables[0].table, where_sql, qualifiers)
        by_qualifier = {t.qualifier: t.table for t in tables}
        references = {column_name(c, qualifiers): c for c in select.find_all(exp.Column)}
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
        items = tuple(projection_item(item, qualifiers) for item in select.expressions)
        check_unique(items)
        plan = FastRefreshPlan("join_projection", tables[0].table, (), items, (), where_sql)
    return replace(plan, qualifier=tables[0].qualifier, tables=tuple(tables), join_keys=tuple(keys))


def _check_join_kind(join: exp.Join) -> None:
    side, kind = (join.side or "").upper(), (join.kind or "").upper()
    if kind in ("SEMI", "ANTI"):
        raise NotEligible(f"{side} {kind} joins are not supported; {_ACTIONABLE}".lstrip())
    if side:
        raise NotEligible(f"outer joins ({side} JOIN) are not supported; {_ACTIONABLE}")
    if (join.method or "").upper() == "NATURAL":
        raise NotEligible("NATURAL joins are not supported; name the join columns with USING (…)")
    on = join.args.get("on")
    if kind == "CROSS" or (not join.args.get("using") and (on is None or isinstance(on, exp.Boolean))):
        raise NotEligible(
            f"cross joins (CROSS JOIN, FROM a, b, JOIN without ON) are not supported; {_ACTIONABLE}"
        )
    if kind not in ("", "INNER"):
        raise NotEligible(f"{kind} joins are not supported; {_ACTIONABLE}")
    for clause, value in join.args.items():
        if value and clause not in ("this", "on", "using", "kind"):
            raise NotEligible(f"{clause.upper()} in a join is not supported")


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
                f"join condition {shown} (<=>) matches NULL keys; use = (NULL keys never match)"
            )
        if not isinstance(condition, exp.EQ):
            raise NotEligible(
                f"join condition {shown} is not an equality of columns; move it to WHERE ({_ACTIONABLE})"
            )
        sides = []
        for column in (condition.this, condition.expression):
            if (
                not isinstance(column, exp.Column)
                or column.args.get("db")
                or not isinstance(column.this, exp.Identifier)
            ):
                raise NotEligible(
                    f"join condition {shown} is not an equality of columns; move it to WHERE ({_ACTIONABLE})"
                )
            if column.table.lower() not in by_qualifier:
                raise NotEligible(
                    f"qualify the columns of the join condition {shown} with their tables (ON a.k = b.k)"
                )
            sides.append((by_qualifier[column.table.lower()], column.name.lower()))
        (left_table, left_column), (right_table, right_column) = sides
        if left_table == right_table:
            raise NotEligible(f"join condition {shown} compares two columns of one table; move it to WHERE")
        keys.append(JoinKey(left_table, left_column, right_table, right_column))
    if not any(right.table in (k.left_table, k.right_table) for k in keys):
        raise NotEligible(f"the condition of the join with {right.qualifier} does not name it; {_ACTIONABLE}")
    return keys
