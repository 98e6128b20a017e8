"""The building blocks of fast-refresh eligibility (``workers.ddl.fast``): table references, plain
column names, output items, and the aggregate plan of a GROUP BY select list (one table or a join).

A rule that does not hold raises ``NotEligible`` with a reason the user can act on.
"""

from __future__ import annotations

from sqlglot import exp

from workers.ddl.dialect import DIALECT
from workers.ddl.errors import start_of
from workers.ddl.plan import (
    FORMULA,
    FORMULA_PART,
    AggregateItem,
    FastRefreshPlan,
    SelectItem,
    derived_column,
    formula_part,
)

AGGREGATES: dict[type[exp.Expr], str] = {
    exp.Sum: "SUM",
    exp.Count: "COUNT",
    exp.Avg: "AVG",
    exp.Min: "MIN",
    exp.Max: "MAX",
}

CLAUSE_MESSAGES = {
    "with_": "WITH clauses (CTEs) are not supported",
    "distinct": "DISTINCT is not supported",
    "laterals": "LATERAL VIEW is not supported",
    "qualify": "QUALIFY is not supported",
    "windows": "WINDOW clauses are not supported",
    "distribute": "DISTRIBUTE BY is not supported",
    "sort": "SORT BY is not supported",
    "cluster": "CLUSTER BY is not supported",
    "limit": "LIMIT (top-N) is not maintained incrementally; drop the LIMIT (and limit when reading the MV) "
    "or use REFRESH COMPLETE",
    "offset": "OFFSET is not maintained incrementally; drop it or use REFRESH COMPLETE",
    "pivots": "PIVOT is not supported",
    "sample": "TABLESAMPLE is not supported",
    "version": "time travel (VERSION/TIMESTAMP AS OF) is not supported",
}


class NotEligible(Exception):
    """A rule that does not hold; ``node`` is the construct it names (its place in the query text is
    where an error points, ``position``)."""

    def __init__(self, message: str, node: exp.Expr | None = None, *, unqualified: bool = False) -> None:
        super().__init__(message)
        self.node = node
        # The rule failed on an unqualified column, which the tables' columns might resolve.
        self.unqualified = unqualified
        # ... and some were not given: the analysis that has them decides (``FastVerdict``).
        self.needs_columns = False

    @property
    def position(self) -> int | None:
        """The 0-based offset in the query text of the first token of ``node``, when sqlglot kept it."""
        return None if self.node is None else start_of(self.node)


def table_of(node: exp.Expr | None) -> exp.Table:
    """``node`` when it is a plain table reference (with an alias at most)."""
    if not isinstance(node, exp.Table):
        raise NotEligible("the query must read its tables directly in FROM and JOIN", node)
    for clause, value in node.args.items():
        if value and clause not in ("this", "alias"):
            shown = CLAUSE_MESSAGES.get(clause, f"{clause.upper()} on the table is not supported")
            raise NotEligible(shown, value if isinstance(value, exp.Expr) else node)
    return node


def projection_item(item: exp.Expression, qualifiers: frozenset[str] = frozenset()) -> SelectItem:
    inner = item.unalias()
    column = column_name(inner, qualifiers)
    if isinstance(item, exp.Alias):
        name = item.alias
    elif column is not None:
        name = inner.name  # Spark names a column, qualified or not, by itself
    else:
        raise NotEligible(f"expression {item.sql(dialect=DIALECT)} needs an output name (AS <name>)", item)
    return SelectItem(name.lower(), inner.sql(dialect=DIALECT), column)


def aggregate_plan(
    select: exp.Select, base_table: str, where_sql: str | None, qualifiers: frozenset[str] = frozenset()
) -> FastRefreshPlan:
    """``qualifiers``: the names a join reads its tables by; columns are then named ``q.column``."""
    group = select.args.get("group")
    group_by: list[str] = []
    computed: dict[str, str] = {}  # the SQL of each GROUP BY expression → the column it is computed into
    if group is not None:
        if any(group.args.get(k) for k in ("grouping_sets", "cube", "rollup", "totals", "all")):
            raise NotEligible("GROUP BY ALL, ROLLUP, CUBE and GROUPING SETS are not supported", group)
        for key in group.expressions:
            key_name = column_name(key, qualifiers)
            if key_name is None:
                key_name = _computed_key(select, key)
                computed[key.sql(dialect=DIALECT)] = key_name
            group_by.append(key_name)
    items: list[SelectItem] = []
    aggregates: list[AggregateItem] = []
    for item in select.expressions:
        inner = item.unalias()
        key_name = computed.get(inner.sql(dialect=DIALECT))
        if key_name is not None and isinstance(item, exp.Alias):  # a GROUP BY expression's value
            items.append(SelectItem(item.alias.lower(), inner.sql(dialect=DIALECT), key_name))
            continue
        if isinstance(inner, exp.Column):
            if column_name(inner, qualifiers) not in group_by:
                raise NotEligible(
                    f"column {inner.sql(dialect=DIALECT)} is neither grouped nor aggregated",
                    inner,
                    unqualified=not inner.table,
                )
            items.append(projection_item(item, qualifiers))
            continue
        if not isinstance(inner, exp.AggFunc) and inner.find(exp.AggFunc) is not None:
            found = formula_items(item, inner, qualifiers)  # an expression over aggregates
        else:
            found = [aggregate_item(item, inner, qualifiers)]
        aggregates.extend(found)
        items.append(SelectItem(found[0].name, inner.sql(dialect=DIALECT), None))
    selected = {i.column for i in items if i.column is not None}
    for key_name in group_by:
        if key_name not in selected:
            raise NotEligible(
                f"GROUP BY column {key_name} must also be selected", group, unqualified="." not in key_name
            )
    check_unique(items)
    return FastRefreshPlan(
        "aggregate", base_table, tuple(group_by), tuple(items), tuple(aggregates), where_sql
    )


def _computed_key(select: exp.Select, key: exp.Expr) -> str:
    """The column a GROUP BY expression (``year(o_orderdate)``) is computed into, as an aggregate's
    argument is (``derived_column``), named by the select item that shows it (``… AS o_year``)."""
    shown = key.sql(dialect=DIALECT)
    if isinstance(key, exp.Rollup | exp.Cube | exp.GroupingSets):
        raise NotEligible("GROUP BY ALL, ROLLUP, CUBE and GROUPING SETS are not supported", key)
    if isinstance(key, exp.Literal) or key.find(exp.Column) is None:
        raise NotEligible(
            f"GROUP BY must list columns or expressions of the row's columns, found {shown}", key
        )
    nested = next(iter(key.find_all(exp.AggFunc, exp.Window)), None)
    if nested is not None:
        raise NotEligible(f"GROUP BY {shown} holds an aggregate or window function", nested)
    for item in select.expressions:
        if isinstance(item, exp.Alias) and item.this.sql(dialect=DIALECT) == shown:
            return derived_column(item.alias.lower())
    raise NotEligible(
        f"GROUP BY expression {shown} must also be selected, with an output name ({shown} AS <name>)", key
    )


def aggregate_item(item: exp.Expression, inner: exp.Expression, qualifiers: frozenset[str]) -> AggregateItem:
    call = aggregate_call(inner, qualifiers)
    if call is None:
        raise NotEligible(
            f"{item.sql(dialect=DIALECT)} is not supported; select GROUP BY columns and "
            "SUM, COUNT, AVG, MIN or MAX of a column or expression",
            inner,
        )
    function, column, argument = call
    if not isinstance(item, exp.Alias):
        raise NotEligible(f"aggregate {inner.sql(dialect=DIALECT)} needs an output name (AS <name>)", inner)
    name = item.alias.lower()
    if argument is not None:  # the job computes the expression into a column of its own
        column = derived_column(name)
    return AggregateItem(function, column, name, function in ("MIN", "MAX"), argument)


def formula_items(
    item: exp.Expression, inner: exp.Expression, qualifiers: frozenset[str]
) -> list[AggregateItem]:
    """An expression over aggregates (``100.00 * SUM(a) / SUM(b) AS share``): the output's
    ``FORMULA`` item (its expression over the parts' names), then each aggregate in it as a part the
    MV does not show (``formula_part``), kept in the helper state and combined per changed group."""
    if not isinstance(item, exp.Alias):
        raise NotEligible(f"expression {inner.sql(dialect=DIALECT)} needs an output name (AS <name>)", inner)
    name = item.alias.lower()
    formula = inner.copy()
    calls = [n for n in formula.find_all(exp.AggFunc) if n.find_ancestor(exp.AggFunc) is None]
    parts: list[AggregateItem] = []
    for number, node in enumerate(calls):
        call = aggregate_call(node, qualifiers)
        shown = node.sql(dialect=DIALECT)
        if call is None or call[0] in ("MIN", "MAX"):
            raise NotEligible(
                f"{shown} in the expression {inner.sql(dialect=DIALECT)} is not supported; an expression "
                "over aggregates may combine SUM, COUNT and AVG (of a column or expression) and constants",
                node,
            )
        function, column, argument = call
        part = formula_part(name, number)
        parts.append(
            AggregateItem(function, derived_column(part) if argument else column, part, False, argument)
        )
        node.replace(exp.column(part, quoted=True))
    outside = next((c for c in formula.find_all(exp.Column) if not c.name.startswith(FORMULA_PART)), None)
    if outside is not None:
        raise NotEligible(
            f"column {outside.sql(dialect=DIALECT)} outside the aggregates of {inner.sql(dialect=DIALECT)} "
            "is not supported; an expression over aggregates may combine them with constants only",
            outside,
            unqualified=not outside.table,
        )
    return [AggregateItem(FORMULA, None, name, False, formula.sql(dialect=DIALECT)), *parts]


def aggregate_call(inner: exp.Expr, qualifiers: frozenset[str]) -> tuple[str, str | None, str | None] | None:
    """(function, column, argument) of SUM/COUNT/AVG/MIN/MAX of a plain column (column None:
    COUNT(*) or COUNT(1)), or of a deterministic expression of the row (column None, ``argument``
    its SQL); None for any other function; NotEligible for another argument."""
    function = AGGREGATES.get(type(inner))
    if function is None:
        return None
    argument = inner.this
    if inner.expressions:
        raise NotEligible(f"{inner.sql(dialect=DIALECT)} takes extra arguments; not supported", inner)
    if column_name(argument, qualifiers) is not None:
        return function, column_name(argument, qualifiers), None
    if function == "COUNT" and (
        isinstance(argument, exp.Star) or (isinstance(argument, exp.Literal) and not argument.is_string)
    ):
        return function, None, None  # COUNT(*) and the COUNT(1) idiom count rows
    if isinstance(argument, exp.Distinct):
        raise NotEligible(f"{function}(DISTINCT ...) is not supported", inner)
    nested = next(iter(argument.find_all(exp.AggFunc, exp.Window, exp.Star)), None)
    if nested is not None or argument.find(exp.Column) is None:
        raise NotEligible(
            f"the argument of {inner.sql(dialect=DIALECT)} must be an expression of the row's columns "
            "(no aggregate, window or *)",
            nested or argument,
        )
    return function, None, argument.sql(dialect=DIALECT)


def column_name(node: exp.Expr, qualifiers: frozenset[str] = frozenset()) -> str | None:
    """The lower-case name when ``node`` is a plain column reference: unqualified, or (in a join)
    qualified by one of ``qualifiers``, then named ``qualifier.column``."""
    if not isinstance(node, exp.Column) or not isinstance(node.this, exp.Identifier) or node.args.get("db"):
        return None
    if not node.table:
        return node.name.lower()
    if node.table.lower() in qualifiers:
        return f"{node.table.lower()}.{node.name.lower()}"
    return None


def check_unique(items: tuple[SelectItem, ...] | list[SelectItem]) -> None:
    seen: set[str] = set()
    for item in items:
        if item.name in seen:
            raise NotEligible(f"output column name {item.name} is used twice")
        seen.add(item.name)
