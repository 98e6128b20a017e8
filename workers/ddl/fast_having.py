"""Fast-refresh eligibility of a GROUP BY aggregate with HAVING (kind ``aggregate_having``, one base
table; applied by ``workers.jobs.incremental_having``).

The MV holds exactly the groups whose HAVING condition holds at the watermark; a change can move a
group in or out. The job recomputes every group a change row reaches with the MV query itself over the
base at the pinned version, restricted to those groups, so a group's fate never depends on values the
MV does not show (a group that fails HAVING has no row to read them from).

The condition may compare what the plan's state could keep exactly: SUM, COUNT, AVG, MIN or MAX of a
plain column, COUNT(*), GROUP BY columns and output names (``HAVING n > 2``), with any deterministic
operators and functions between them. Anything else is refused with the reason.
"""

from __future__ import annotations

from dataclasses import replace

from sqlglot import exp

from workers.ddl.dialect import DIALECT
from workers.ddl.fast_rules import NotEligible, aggregate_call, column_name
from workers.ddl.plan import FastRefreshPlan

_SUPPORTED = (
    "HAVING may use SUM, COUNT, AVG, MIN or MAX of a plain column, COUNT(*), "
    "GROUP BY columns and output names"
)


def having_plan(having: exp.Having, plan: FastRefreshPlan) -> FastRefreshPlan:
    """``plan`` (a one-table aggregate's) as the plan of the same query with ``having``."""
    condition = having.this
    for node in condition.walk():
        if isinstance(node, exp.AggFunc):
            shown = node.sql(dialect=DIALECT)
            if aggregate_call(node, frozenset()) is None:
                raise NotEligible(f"HAVING {shown} is not supported; {_SUPPORTED}")
        elif isinstance(node, exp.Column) and node.find_ancestor(exp.AggFunc) is None:
            name, shown = column_name(node), node.sql(dialect=DIALECT)
            if name is None or (name not in plan.group_by and name not in {i.name for i in plan.items}):
                raise NotEligible(f"HAVING column {shown} is neither grouped nor an output; {_SUPPORTED}")
    return replace(plan, kind="aggregate_having")
