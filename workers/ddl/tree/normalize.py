"""The query normalized by sqlglot's own optimizer passes before it becomes an operator tree.

``qualify`` (every column with its table's alias, every table with an alias, against the base
tables' columns as the coordinator read them from the Delta logs), then every non-recursive CTE
inlined as a derived table at each place it is read (a CTE read twice is a self-join of two
copies), then ``merge_subqueries``: derived tables that only filter and project fold into the
query that reads them. What cannot fold (an aggregate, DISTINCT or LIMIT under another operator, a
subquery in an expression) is left for the planner to refuse by name.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from sqlglot import exp
from sqlglot.errors import OptimizeError
from sqlglot.optimizer.merge_subqueries import merge_subqueries
from sqlglot.optimizer.qualify import qualify

from workers.ddl.dialect import DIALECT
from workers.ddl.fast_rules import NotEligible


class Unresolved(NotEligible):
    """sqlglot could not resolve the query's columns (ambiguous, unknown): the shape planners say
    which column, and where."""


# Column types do not matter to the passes used here (they rename and move, never coerce).
_ANY_TYPE = "string"


def normalized(tree: exp.Query, columns: Mapping[str, Sequence[str]]) -> exp.Query:
    """A copy of ``tree`` qualified, its CTEs inlined and its mergeable derived tables merged;
    ``columns``: each base table's column names. NotEligible when sqlglot cannot qualify it."""
    schema: dict[str, object] = {
        table: {c.lower(): _ANY_TYPE for c in names} for table, names in columns.items()
    }
    try:
        qualified = qualify(
            _exists_of_one(tree.copy()), schema=schema, dialect=DIALECT, quote_identifiers=True
        )
    except OptimizeError as error:
        raise Unresolved(f"the query's columns could not be resolved against its tables ({error})") from error
    assert isinstance(qualified, exp.Query)
    inlined = _ctes_inlined(qualified)
    merged = merge_subqueries(inlined)
    assert isinstance(merged, exp.Query)
    return merged


def exists_of_star(select: exp.Select) -> bool:
    """``select`` is the ``SELECT *`` of an ``EXISTS (SELECT * …)``: it asks whether a row exists,
    whatever its columns."""
    return isinstance(select.parent, exp.Exists) and [type(e) for e in select.expressions] == [exp.Star]


def _exists_of_one(query: exp.Query) -> exp.Query:
    """``query`` with each ``EXISTS (SELECT * …)`` selecting 1 instead: the same rows exist, and
    ``qualify`` does not expand the star into every column of the subquery's tables, which the run
    would then hold (``workers.ddl.read_names``: TPC-H Q4, Q21, Q22)."""
    for select in list(query.find_all(exp.Select)):
        if exists_of_star(select):
            select.set("expressions", [exp.Literal.number(1)])
    return query


def _ctes_inlined(query: exp.Query) -> exp.Query:
    """``query`` with each CTE of its WITH replaced by a copy of its body at every table reference to
    it (in later CTEs too), keeping the reference's alias."""
    with_ = query.args.get("with_")
    if with_ is None:
        return query
    if with_.args.get("recursive"):
        raise NotEligible("recursive CTEs are not supported", with_)
    bodies: dict[str, exp.Expr] = {}
    for cte in with_.expressions:
        body = _replaced(cte.this, bodies)
        bodies[cte.alias_or_name] = body
    query.set("with_", None)
    replaced = _replaced(query, bodies)
    assert isinstance(replaced, exp.Query)
    return replaced


def _replaced(node: exp.Expr, bodies: Mapping[str, exp.Expr]) -> exp.Expr:
    def inline(found: exp.Expr) -> exp.Expr:
        if isinstance(found, exp.Table) and not found.args.get("db") and found.name in bodies:
            alias = found.alias_or_name
            return exp.Subquery(
                this=bodies[found.name].copy(),
                alias=exp.TableAlias(this=exp.to_identifier(alias, quoted=True)),
            )
        return found

    return node.transform(inline)
