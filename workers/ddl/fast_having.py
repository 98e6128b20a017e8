"""Fast-refresh eligibility of a GROUP BY aggregate with HAVING: kind ``aggregate_having`` over one
base table, ``join_aggregate_having`` over an inner equi-join (both applied by
``workers.jobs.fast.having``).

The MV holds exactly the groups whose HAVING condition holds at the watermark; a change can move a
group in or out. The job recomputes every group a change row reaches (for a join: a joined change row)
with the MV query itself over the base(s) at the pinned version(s), restricted to those groups, so a
group's fate never depends on values the MV does not show (a group that fails HAVING has no row to
read them from).

The condition may compare what the plan's state could keep exactly: SUM, COUNT, AVG, MIN or MAX of a
plain column, COUNT(*), GROUP BY columns and output names (``HAVING n > 2``), with any deterministic
operators and functions between them. Anything else is refused with the reason.
"""

from __future__ import annotations

from dataclasses import replace

from sqlglot import exp

from workers.ddl.dialect import DIALECT
from workers.ddl.fast_rules import NotEligible, aggregate_call, column_name
from workers.ddl.plan import FastKind, FastRefreshPlan

_SUPPORTED = (
    "HAVING may use SUM, COUNT, AVG, MIN or MAX of a plain column, COUNT(*), "
    "GROUP BY columns and output names"
)
_HAVING_KINDS: dict[str, FastKind] = {
    "aggregate": "aggregate_having",
    "join_aggregate": "join_aggregate_having",
}


def having_plan(having: exp.Having, plan: FastRefreshPlan) -> FastRefreshPlan:
    """``plan`` (an aggregate's, over one table or a join) as the plan of the same query with ``having``."""
    kind = _HAVING_KINDS.get(plan.kind)
    if kind is None:
        raise NotEligible("HAVING without GROUP BY or an aggregate is not supported; use WHERE")
    qualifiers = frozenset(t.qualifier for t in plan.tables)  # a join's columns are ``q.column``
    condition = having.this
    for node in condition.walk():
        if isinstance(node, exp.AggFunc):
            shown = node.sql(dialect=DIALECT)
            if aggregate_call(node, qualifiers) is None:
                raise NotEligible(f"HAVING {shown} is not supported; {_SUPPORTED}")
        elif isinstance(node, exp.Column) and node.find_ancestor(exp.AggFunc) is None:
            name, shown = column_name(node, qualifiers), node.sql(dialect=DIALECT)
            if name is None or (name not in plan.group_by and name not in {i.name for i in plan.items}):
                raise NotEligible(f"HAVING column {shown} is neither grouped nor an output; {_SUPPORTED}")
    # A join's change rows need only carry the group keys: the query recomputes every value.
    inputs = tuple(i for i in plan.inputs if i.name in plan.group_by)
    return replace(plan, kind=kind, inputs=inputs)
