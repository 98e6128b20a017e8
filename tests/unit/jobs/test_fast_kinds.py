"""Every FAST plan kind the planner can make has its rule in the run's one table of kinds."""

from __future__ import annotations

from workers.ddl.plan import FAST_KINDS
from workers.jobs.fast.kinds import KINDS


def test_every_plan_kind_has_one_rule() -> None:
    assert sorted(KINDS) == sorted(FAST_KINDS)


def test_rows_are_matched_by_value_exactly_for_projections() -> None:
    # A projection's MV rows have no key: its rule matches them by every column's value. A tree may
    # have a projection at its top (counted as matching rows, so MAP columns are refused for it).
    assert {kind for kind, rule in KINDS.items() if rule.matches_rows} == {
        "projection",
        "join_projection",
        "union_projection",
        "tree",
        "top_n",  # the MV's rows against the new top n
    }
