"""FAST plan kind ``top_n``: ``Q ORDER BY o LIMIT n`` at the outermost level, around the FAST plan of
``Q`` (any kind: a shape planner's or the operator tree's).

``Q``'s rows are kept FAST in a helper table and the MV is their first n by ``o``
(``workers.jobs.fast.top_n``), so ``o`` may name only ``Q``'s output columns (it is evaluated over
them). ``Q`` is the user's text before the ORDER BY, ``o`` the text between ORDER BY and LIMIT: Spark
reads both as written. LIMIT without ORDER BY (which rows is undefined), OFFSET, and LIMIT inside a
subquery are refused by name with the way out.
"""

from __future__ import annotations

from collections.abc import Callable

import sqlglot
from sqlglot import TokenType, exp

from workers.ddl.dialect import DIALECT
from workers.ddl.fast import FastVerdict, check_deterministic
from workers.ddl.fast_rules import NotEligible
from workers.ddl.output_names import output_columns
from workers.ddl.plan import FastRefreshPlan, TopN

# The verdict on the query without its ORDER BY … LIMIT, from its text.
InnerVerdict = Callable[[str], FastVerdict]

_NO_ORDER = (
    "LIMIT without ORDER BY keeps any n rows, which no refresh can reproduce; add an ORDER BY over "
    "the output columns, drop the LIMIT (limit when reading the MV), or use REFRESH COMPLETE"
)
_OFFSET = (
    "OFFSET is not maintained incrementally; drop it (skip rows when reading the MV) or use REFRESH COMPLETE"
)
_INNER_LIMIT = (
    "LIMIT inside a subquery is not maintained incrementally; move ORDER BY … LIMIT to the outermost "
    "query (the MV keeps its top n FAST) or use REFRESH COMPLETE"
)


def top_n_verdict(tree: exp.Query, sql: str, inner_verdict: InnerVerdict) -> FastVerdict | None:
    """The ``top_n`` plan of ``tree`` (parsed from ``sql``) or why there is none; None when neither
    the query nor a subquery of it has a LIMIT or OFFSET (the other planners decide)."""
    try:
        limit = _top_clauses(tree)
        if limit is None:
            return None
        inner_sql, order_sql = _texts(sql, tree)
    except NotEligible as why:
        return FastVerdict(None, str(why), why.position)
    verdict = inner_verdict(inner_sql)
    if verdict.plan is None:
        return verdict  # the inner query's text is a prefix of the query's: positions hold
    inner = verdict.plan
    plan = FastRefreshPlan(
        "top_n", inner.base_table, (), (), (), None, top_n=TopN(inner, inner_sql, order_sql, limit)
    )
    return FastVerdict(plan)


def _top_clauses(tree: exp.Query) -> int | None:
    """The n of ``tree``'s outermost ``ORDER BY … LIMIT n``, its ORDER BY checked; None without LIMIT."""
    for node in tree.walk():
        if node.parent is not tree and isinstance(node, exp.Limit | exp.Offset | exp.Fetch):
            raise NotEligible(_INNER_LIMIT if not isinstance(node, exp.Offset) else _OFFSET, node)
    offset = tree.args.get("offset")
    if offset is not None:
        raise NotEligible(_OFFSET, offset)
    limit = tree.args.get("limit")
    if limit is None:
        return None
    count = limit.args.get("expression")
    if not isinstance(count, exp.Literal) or not count.is_int:
        raise NotEligible("LIMIT must be a whole number to be maintained FAST", limit)
    order = tree.args.get("order")
    if order is None:
        raise NotEligible(_NO_ORDER, limit)
    _check_order(order, output_columns(tree))
    return int(count.this)


def _check_order(order: exp.Order, outputs: tuple[str, ...] | None) -> None:
    """ORDER BY reads only output columns (it is evaluated over the inner query's rows), by name or
    position, through deterministic scalar expressions."""
    names = {name.lower() for name in outputs or ()}
    for node in order.walk():
        if isinstance(node, exp.AggFunc | exp.Window | exp.Subquery | exp.Query):
            raise NotEligible(
                f"ORDER BY {node.sql(dialect=DIALECT)} is not an output column; name it in the SELECT "
                "list (AS …) and order by that name",
                node,
            )
        if isinstance(node, exp.Column) and (node.table or node.name.lower() not in names):
            raise NotEligible(
                f"ORDER BY {node.sql(dialect=DIALECT)}: with LIMIT, ORDER BY may name only the query's "
                "output columns (unqualified); select the column (AS …) and order by its name",
                node,
            )
    check_deterministic(order)


def _texts(sql: str, tree: exp.Query) -> tuple[str, str]:
    """The user's text before the outermost ORDER BY, and the ORDER BY's own text (up to LIMIT)."""
    tokens = sqlglot.Dialect.get_or_raise(DIALECT).tokenize(sql)
    depth, order_at, limit_at = 0, None, None
    for token in tokens:
        if token.token_type == TokenType.L_PAREN:
            depth += 1
        elif token.token_type == TokenType.R_PAREN:
            depth -= 1
        elif depth == 0 and token.token_type == TokenType.ORDER_BY:
            order_at = token
        elif depth == 0 and token.token_type == TokenType.LIMIT and order_at is not None:
            limit_at = token
    if order_at is None or limit_at is None:  # e.g. inside parentheses: no text to cut at
        raise NotEligible("ORDER BY … LIMIT must end the query, outside parentheses", tree.args.get("limit"))
    return sql[: order_at.start].rstrip(), sql[order_at.end + 1 : limit_at.start].strip()
