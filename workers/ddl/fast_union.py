"""Fast-refresh eligibility of a UNION ALL of projections (kind ``union_projection``; applied by
``workers.jobs.fast.union``).

Each branch must be a projection/filter of one table (``SELECT cols FROM t [WHERE …]``, the rules of a
one-table projection); branches may read the same table or different ones. Such a branch is linear in
its table (each row of it maps to at most one output row), so the MV's change is the query itself run
over every table's change rows, a multiset that keeps duplicates within and across branches. Columns
line up by position and are named by the first branch (as Spark does). The plan lists the tables
read (``tables``, in branch order) and the first branch's output columns (``items``).
"""

from __future__ import annotations

from collections.abc import Callable

from sqlglot import exp

from workers.ddl.fast_rules import CLAUSE_MESSAGES, NotEligible
from workers.ddl.plan import FastRefreshPlan, JoinTable

_BRANCH = "each branch must be a projection/filter of one table (SELECT cols FROM t [WHERE …])"


def union_plan(
    node: exp.SetOperation, branch_plan: Callable[[exp.Select], FastRefreshPlan]
) -> FastRefreshPlan:
    """The plan of ``node``, each of whose branches ``branch_plan`` plans (or refuses) on its own."""
    plans: list[FastRefreshPlan] = []
    for number, select in enumerate(_branches(node), 1):
        try:
            plan = branch_plan(select if number == 1 else _named(select))
        except NotEligible as why:
            raise NotEligible(f"UNION ALL branch {number}: {why}") from why
        if plan.kind != "projection":
            shown = plan.kind.replace("_", " ")
            raise NotEligible(
                f"UNION ALL branch {number} is not a projection of one table ({shown}); {_BRANCH}"
            )
        if plans and len(plan.items) != len(plans[0].items):
            raise NotEligible(
                f"UNION ALL branch {number} has {len(plan.items)} columns, branch 1 {len(plans[0].items)}"
            )
        plans.append(plan)
    bases = dict.fromkeys(p.base_table for p in plans)
    first = plans[0]
    tables = tuple(JoinTable(base, base) for base in bases)
    return FastRefreshPlan("union_projection", first.base_table, (), first.items, (), None, tables=tables)


def _branches(node: exp.Expr) -> list[exp.Select]:
    """The SELECTs of a tree of UNION ALLs, left to right."""
    if isinstance(node, exp.Subquery):
        for clause, value in node.args.items():
            if value and clause != "this":
                raise NotEligible(
                    CLAUSE_MESSAGES.get(clause, f"{clause.upper()} in a UNION is not supported")
                )
        return _branches(node.this)
    if isinstance(node, exp.Union):
        if node.args.get("distinct"):
            raise NotEligible("UNION (without ALL) is not supported; use UNION ALL, which keeps duplicates")
        for clause, value in node.args.items():
            if value and clause not in ("this", "expression", "distinct"):
                raise NotEligible(
                    CLAUSE_MESSAGES.get(clause, f"{clause.upper()} on a UNION is not supported")
                )
        return _branches(node.this) + _branches(node.expression)
    if isinstance(node, exp.SetOperation):
        raise NotEligible(f"{node.key.upper()} is not supported; only UNION ALL is")
    if isinstance(node, exp.Select):
        return [node]
    raise NotEligible(f"only UNION ALL of plain SELECTs is supported; {_BRANCH}")


def _named(select: exp.Select) -> exp.Select:
    """A copy of a later branch whose unnamed expressions are named: the first branch names columns."""
    copy = select.copy()
    copy.set(
        "expressions",
        [
            item if isinstance(item, exp.Alias | exp.Column) else exp.alias_(item, f"_c{i}")
            for i, item in enumerate(copy.expressions)
        ],
    )
    return copy
