"""The operator tree of an MV query (FAST plan kind ``tree``): for the queries the shape planners
(``workers.ddl.fast``) refuse, e.g. CTEs, derived tables, self-joins, GROUP BY expressions.

The query is normalized by sqlglot's passes (``normalize``), then read as operators: one scan per
table occurrence, their inner join with its filter and projection (one linear block, whose delta is
the sum over the occurrences of the block with that occurrence's change rows), and at the top the
block itself or an aggregate over it (``aggregate``). Whatever else remains is refused naming the
operator and the way out, at its position in the query text.
"""

from __future__ import annotations

from collections.abc import Sequence

from sqlglot import exp

from workers.ddl.dialect import DIALECT
from workers.ddl.fast import FastVerdict, check_deterministic
from workers.ddl.fast_rules import CLAUSE_MESSAGES, NotEligible
from workers.ddl.plan import FastRefreshPlan, JoinKey, JoinTable
from workers.ddl.resolve import ColumnsOf
from workers.ddl.tree.aggregate import split_aggregate
from workers.ddl.tree.normalize import Unresolved, normalized
from workers.ddl.tree.values import Scan, TreePlan, scan_view, tree_json

_ALLOWED_CLAUSES = frozenset({"expressions", "from_", "joins", "where", "group", "having", "hint", "order"})
_NOT_YET = {
    "limit": "LIMIT (top-N) is not yet FAST in the operator tree; drop the LIMIT (limit when reading "
    "the MV) or use REFRESH COMPLETE",
}


def plan_tree(tree: exp.Query, base_tables: Sequence[str], columns_of: ColumnsOf) -> FastVerdict | None:
    """The ``tree`` plan of the query ``tree`` (which reads ``base_tables``), or why there is none;
    None when the tree has nothing to say (a table's columns unknown, or the query's columns not
    resolved by them: the shape planners' reason names the column)."""
    try:
        return FastVerdict(_plan(tree, base_tables, columns_of))
    except Unresolved:
        return None
    except NotEligible as why:
        if why.needs_columns:
            return None
        return FastVerdict(None, str(why), why.position, why.needs_columns)


def _plan(query: exp.Query, base_tables: Sequence[str], columns_of: ColumnsOf) -> FastRefreshPlan:
    columns = {table: columns_of(table) for table in base_tables}
    known = {table: names for table, names in columns.items() if names is not None}
    if len(known) != len(columns):
        why = NotEligible("the operator tree needs the tables' columns (the coordinator reads them)")
        why.needs_columns = True
        raise why
    _check_output_names(query)
    select = normalized(query, known)
    distinct = isinstance(select, exp.Select) and _distinct_as_group_by(select)
    if isinstance(select, exp.SetOperation):
        raise NotEligible("set operations inside the operator tree are not yet FAST", select)
    if not isinstance(select, exp.Select):
        raise NotEligible("only a SELECT is supported", select)
    for clause, value in select.args.items():
        if value and clause not in _ALLOWED_CLAUSES:
            shown = _NOT_YET.get(clause) or CLAUSE_MESSAGES.get(clause, f"{clause.upper()} is not supported")
            raise NotEligible(shown, value if isinstance(value, exp.Expr) else None)
    for node in select.walk():
        if node is not select and isinstance(node, exp.Query | exp.Subquery):
            raise NotEligible(
                "a subquery that does not fold into its query (an EXISTS / IN / scalar subquery, or a "
                "derived table or CTE with GROUP BY, DISTINCT or LIMIT under another operator) is not "
                "yet FAST: write it as a join, or use REFRESH COMPLETE",
                node,
            )
    window = select.find(exp.Window)
    if window is not None:
        raise NotEligible("window functions are not yet FAST in the operator tree", window)
    check_deterministic(select)
    select.set("order", None)  # not stored: a table has no row order
    scans = _scans(select)
    keys, filtered = _keys(select, {s.alias: s.view for s in scans})
    aggregate = select.args.get("group") is not None or any(i.find(exp.AggFunc) for i in select.expressions)
    if not aggregate:
        tree = TreePlan(scans, keys, filtered, select.sql(dialect=DIALECT), "projection")
    else:
        split = split_aggregate(select)
        block = select.copy()
        block.set("expressions", split.input_items)
        block.set("group", None)
        block.set("having", None)
        block_sql = block.sql(dialect=DIALECT)
        tree = TreePlan(scans, keys, filtered, block_sql, "aggregate", split.plan, split.sql, distinct)
    tables = tuple(JoinTable(s.table, s.alias) for s in scans)
    return FastRefreshPlan("tree", scans[0].table, (), (), (), None, tables=tables, tree=tree_json(tree))


def _distinct_as_group_by(select: exp.Select) -> bool:
    """A ``SELECT DISTINCT`` without aggregates made a GROUP BY of its output expressions (the same
    rows: one per distinct output row), so the aggregate at the top maintains it; whether it was."""
    found = select.args.get("distinct")
    if found is None:
        return False
    if found.args.get("on") is not None:
        raise NotEligible("DISTINCT ON is not supported", found)
    if select.args.get("group") is not None or any(i.find(exp.AggFunc) for i in select.expressions):
        raise NotEligible(
            "DISTINCT over an aggregate is not yet FAST in the operator tree; use REFRESH COMPLETE", found
        )
    select.set("distinct", None)
    keys = [item.this if isinstance(item, exp.Alias) else item for item in select.expressions]
    select.set("group", exp.Group(expressions=[key.copy() for key in keys]))
    return True


def _check_output_names(query: exp.Query) -> None:
    """Every output column of the outer SELECT is named (AS, or a column): the tree's own SQL names
    it the same as Spark names the query's."""
    outer: exp.Expr = query
    while isinstance(outer, exp.Subquery):
        outer = outer.this
    if not isinstance(outer, exp.Select):
        return  # a set operation: refused after normalizing
    for item in outer.expressions:
        if isinstance(item, exp.Star) or (isinstance(item, exp.Column) and isinstance(item.this, exp.Star)):
            raise NotEligible("SELECT * is not supported; list the output columns", item)
        if not isinstance(item, exp.Alias | exp.Column):
            raise NotEligible(f"name the output column {item.sql(dialect=DIALECT)} with AS", item)


def _scans(select: exp.Select) -> tuple[Scan, ...]:
    """One scan per table occurrence, in FROM order; each table renamed to its scan's view (its
    alias kept, which the columns use). NotEligible at a join other than an inner one."""
    source = select.args.get("from_")
    sources = [source.this] if source is not None else []
    for join in select.args.get("joins") or []:
        side, kind = (join.args.get("side") or "").upper(), (join.args.get("kind") or "").upper()
        if side or kind not in ("", "INNER", "CROSS") or join.args.get("method"):
            shown = " ".join(w for w in (join.args.get("method") or "", side, kind) if w).upper() or "this"
            raise NotEligible(
                f"{shown} JOIN is not yet FAST in the operator tree (only inner joins); use REFRESH COMPLETE",
                join,
            )
        sources.append(join.this)
    scans = []
    for index, table in enumerate(sources):
        if not isinstance(table, exp.Table):
            raise NotEligible("only tables can be joined here", table)
        scans.append(Scan(table.name.lower(), table.alias_or_name, scan_view(index)))
        table.set("this", exp.to_identifier(scan_view(index)))
    return tuple(scans)


def _keys(select: exp.Select, views: dict[str, str]) -> tuple[tuple[JoinKey, ...], bool]:
    """The equalities of columns of two scans among the top-level AND terms of WHERE and the ON
    conditions, and whether any other condition filters."""
    conditions = [c.this for c in [select.args.get("where")] if c is not None]
    conditions += [j.args["on"] for j in select.args.get("joins") or [] if j.args.get("on") is not None]
    keys: list[JoinKey] = []
    filtered = False
    for condition in conditions:
        for term in condition.flatten() if isinstance(condition, exp.And) else [condition]:
            left, right = (term.this, term.expression) if isinstance(term, exp.EQ) else (None, None)
            if (
                isinstance(left, exp.Column)
                and isinstance(right, exp.Column)
                and left.table in views
                and right.table in views
                and left.table != right.table
            ):
                keys.append(JoinKey(views[left.table], left.name, views[right.table], right.name))
            else:
                filtered = True
    return tuple(keys), filtered
