"""One base table as an aggregate's input at the pinned version (``InputAtV``, the seam of
``workers.jobs.fast.aggregate.inputs``): the rows are the base at v; a group is recomputed by the MV
query over the base narrowed to the wanted keys (a filter on their values when they are few, so
Delta skips files by their statistics; else a semi-join with them), whole groups kept."""

from __future__ import annotations

from pyspark.sql import DataFrame

from workers.ddl.plan import FastRefreshPlan
from workers.jobs.fast.aggregate.inputs import InputAtV
from workers.jobs.fast.apply import Scope
from workers.jobs.fast.join import narrowed

__all__ = ["base_input"]


def base_input(scope: Scope, query: str, plan: FastRefreshPlan, base_at_v: DataFrame) -> InputAtV:
    """``base_at_v`` (the base at the pinned version, not filtered) as the input of ``plan``'s
    aggregate (``plan.where`` is applied by the caller of ``rows``)."""

    def groups_at_v(wanted: DataFrame | None) -> DataFrame:
        subset = base_at_v
        if wanted is not None:
            for key, column in zip(plan.group_by, wanted.columns, strict=True):  # each key narrows
                subset = narrowed(subset, key, wanted, column, nulls=True)
        return scope.run_query(query, plan.base_table, subset)

    return InputAtV(lambda: base_at_v, groups_at_v, "the base's change rows", "the base")
