"""The operator tree of an MV query (FAST plan kind ``tree``): for the queries the shape planners
(``workers.ddl.fast``) refuse, e.g. CTEs, derived tables, self-joins, GROUP BY expressions,
subqueries, outer joins, aggregates under other operators.

The query is normalized by sqlglot's passes (``normalize``), then read as nested operators
(``nodes``): a block per SELECT over its inputs (scans, derived tables), an aggregate per derived
table that groups, and at the top the root block's rows or an aggregate over them (``aggregate``).
Whatever else remains is refused naming the operator and the way out, at its position in the query.
"""

from __future__ import annotations

from collections.abc import Sequence

from sqlglot import exp

from workers.ddl.dialect import DIALECT
from workers.ddl.fast import FastVerdict
from workers.ddl.fast_rules import CLAUSE_MESSAGES, NotEligible
from workers.ddl.output_names import first_select, spark_name
from workers.ddl.plan import FastRefreshPlan, JoinTable
from workers.ddl.resolve import ColumnsOf
from workers.ddl.tree.aggregate import split_aggregate
from workers.ddl.tree.nodes import Builder, distinct_as_group_by, having_as_filter, is_aggregate
from workers.ddl.tree.normalize import Unresolved, normalized
from workers.ddl.tree.values import ROOT_VIEW, Block, Scan, TreePlan, tree_json
from workers.ddl.tree.window import has_window

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
    select = normalized(_named_outputs(query), known)
    builder = Builder()
    if isinstance(select, exp.SetOperation):  # the MV is the rows of the UNION [ALL] node
        select.set("order", None)  # not stored: a table has no row order
        node, names = builder.set_operation(select)
        listed = ", ".join(exp.column(c, quoted=True).sql(dialect=DIALECT) for c in names)
        root = Block(ROOT_VIEW, f"SELECT {listed} FROM {node.view}", (node,), lineage=())
        return _plan_of(_tree(builder, root, "projection"))
    if not isinstance(select, exp.Select):
        raise NotEligible("only a SELECT is supported", select)
    if has_window(select):  # the MV is the window node's rows
        select.set("order", None)
        node = builder.window(select)
        root = Block(ROOT_VIEW, f"SELECT * FROM {node.view}", (node,), lineage=())
        return _plan_of(_tree(builder, root, "projection"))
    distinct = distinct_as_group_by(select)
    for clause, value in select.args.items():
        if value and clause not in _ALLOWED_CLAUSES:
            shown = _NOT_YET.get(clause) or CLAUSE_MESSAGES.get(clause, f"{clause.upper()} is not supported")
            raise NotEligible(shown, value if isinstance(value, exp.Expr) else None)
    select.set("order", None)  # not stored: a table has no row order
    if not is_aggregate(select):
        root = builder.block(select, ROOT_VIEW)
        tree = _tree(builder, root, "projection")
    elif _subquery_in(select.args.get("having")):
        root = builder.block(having_as_filter(select), ROOT_VIEW)  # a filter above the aggregate
        tree = _tree(builder, root, "projection")
    elif any(isinstance(a.this, exp.Distinct) for a in select.find_all(exp.AggFunc)):
        # Not mergeable (COUNT(DISTINCT …)): recomputed by group, its rows merged into the MV as a
        # projection's are.
        node = builder.aggregate(select, distinct)
        root = Block(ROOT_VIEW, f"SELECT * FROM {node.view}", (node,), lineage=())
        tree = _tree(builder, root, "projection")
    else:
        split = split_aggregate(select)
        block = select.copy()
        block.set("expressions", split.input_items)
        block.set("group", None)
        block.set("having", None)
        root = builder.block(block, ROOT_VIEW)
        tree = _tree(builder, root, "aggregate", split.plan, split.sql, distinct)
    return _plan_of(tree)


def _plan_of(tree: TreePlan) -> FastRefreshPlan:
    tables = tuple(JoinTable(s.table, s.alias) for s in tree.scans)
    return FastRefreshPlan("tree", tree.scans[0].table, (), (), (), None, tables=tables, tree=tree_json(tree))


def _tree(
    builder: Builder,
    root: Block,
    top: str,
    aggregate: FastRefreshPlan | None = None,
    aggregate_sql: str | None = None,
    distinct: bool = False,
) -> TreePlan:
    """The tree over ``root``: in the flat form (no ``root``) when it is one inner join of scans."""
    flat = all(isinstance(n, Scan) for n in root.inputs) and not root.keyed
    scans = tuple(builder.scans)
    assert top in ("projection", "aggregate")
    return TreePlan(
        scans,
        root.keys,
        root.filtered,
        root.sql,
        "projection" if top == "projection" else "aggregate",
        aggregate,
        aggregate_sql,
        distinct,
        None if flat else root,
    )


def _subquery_in(node: exp.Expr | None) -> bool:
    return node is not None and node.find(exp.Query) is not None


def _named_outputs(query: exp.Query) -> exp.Query:
    """A copy of ``query`` whose outer SELECT names every output column: an unaliased expression by
    the name Spark gives it (``output_names.spark_name``: the MV's column, stored through column
    mapping), so the tree's own SQL names its columns as Spark names the query's."""
    query = query.copy()
    outer = first_select(query)  # a set operation's columns are its first branch's
    if outer is None:
        return query
    for item in outer.expressions:
        if isinstance(item, exp.Star) or (isinstance(item, exp.Column) and isinstance(item.this, exp.Star)):
            raise NotEligible("SELECT * is not supported; list the output columns", item)
        if isinstance(item, exp.Alias | exp.Column):
            continue
        name = spark_name(item)
        if name is None:
            raise NotEligible(f"name the output column {item.sql(dialect=DIALECT)} with AS", item)
        item.replace(exp.alias_(item.copy(), name, quoted=True))
    return query
