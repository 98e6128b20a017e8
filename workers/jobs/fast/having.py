"""GROUP BY … HAVING MVs (plan kinds ``aggregate_having``, ``join_aggregate_having``): the groups change
rows reach are recomputed from the base(s) at the pinned version(s), and one MERGE keyed by the group
writes, replaces or removes their rows (``reached_groups_change``).

Why recompute: the MV holds only the groups whose HAVING holds, so a group it rejects has no row to
read its aggregates from, and a change can lift such a group over the threshold (or drop one below
it). Recomputing those groups with the MV query itself (WHERE, GROUP BY, HAVING, types: the complete
refresh's), over the input restricted to them, is exact; a group the query no longer yields is
deleted. No group the change rows do not reach is read or written.

One table: the change rows are the MV log's, the input is the base at the pinned version. A join:
the change rows are the joined ones of its delta rules, carrying the group keys only
(``join.joined_inputs``), and a group is recomputed over every base at its new version,
the base holding the key narrowed to the reached groups.

Cost: one pass over the change rows (their distinct group keys, held on the driver), one read of the
input narrowed to those keys (a filter on their values when they are few, so Delta skips files by
their statistics; else a broadcast semi-join), one keyed MERGE touching those groups' MV rows only.
Helper state covering every group (``workers.jobs.fast.aggregate.state``) would spare the base read for
shapes without MIN/MAX; that is not done here.
"""

from __future__ import annotations

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from workers.ddl.plan import FastRefreshPlan
from workers.jobs.fast.aggregate.deltas import with_computed_columns
from workers.jobs.fast.aggregate.inputs import GroupRecompute
from workers.jobs.fast.apply import (
    ALL_ROWS,
    OP,
    PRESENT,
    ROWS,
    Change,
    Scope,
    group_columns,
    keyed_upsert,
    null_safe,
)
from workers.jobs.fast.inputs import base_input
from workers.jobs.fast.join import Ranges, joined_inputs
from workers.jobs.request import RunRequest
from workers.jobs.spark.columns import col, q

__all__ = ["having_change", "join_having_change", "reached_groups_change"]


def having_change(
    scope: Scope, query: str, plan: FastRefreshPlan, changes: DataFrame, mv: DataFrame, base_at_v: DataFrame
) -> Change:
    """One table: the groups the MV log's rows (``changes``, any ``_change_type``) reach, recomputed
    from ``base_at_v`` (the base at the pinned version)."""
    at_v = base_input(scope, query, plan, base_at_v)
    return reached_groups_change(scope, plan, changes, mv, at_v.groups)


def join_having_change(
    scope: Scope, request: RunRequest, plan: FastRefreshPlan, ranges: Ranges
) -> tuple[Change, bool]:
    """A join: the groups its joined change rows reach, recomputed over the bases at their new
    versions; and whether every base's change rows came from another MV's read."""
    joined = joined_inputs(scope, request, plan, ranges)
    return reached_groups_change(
        scope, joined.plan, joined.rows, joined.mv, joined.at_v.groups
    ), joined.shared


def reached_groups_change(
    scope: Scope, plan: FastRefreshPlan, changes: DataFrame, mv: DataFrame, groups_at_v: GroupRecompute
) -> Change:
    """Recompute every group a change row passing ``plan.where`` reaches (``changes``: rows holding the
    plan's GROUP BY columns by name, any ``_change_type``) with ``groups_at_v``; one keyed MERGE."""
    keys = group_columns(plan, mv.schema)
    changes = with_computed_columns(scope, plan, changes)  # GROUP BY expressions, before the alias
    if plan.where:  # the user's WHERE text, checked like the query; rows aliased by the query's name
        scope.check_expression(plan.where)
        changes = changes.alias(plan.qualifier or plan.base_table)
    passes = F.coalesce(F.expr(plan.where), F.lit(False)) if plan.where else F.lit(True)
    keyed = [F.col(q(key)).alias(m) for key, m in zip(plan.group_by, keys, strict=True)]
    reached = scope.in_memory(  # the one pass over the change rows
        changes.groupBy(*keyed).agg(
            F.count(F.lit(1)).alias(ALL_ROWS), F.sum(F.when(passes, 1).otherwise(0)).alias(ROWS)
        )
    )
    stats = reached.agg(  # served from the driver: ``reached`` is held there
        F.sum(ALL_ROWS).alias("change_rows"), F.sum(F.when(F.col(ROWS) > 0, 1).otherwise(0)).alias("groups")
    ).collect()[0]
    change_rows, groups = int(stats["change_rows"] or 0), int(stats["groups"] or 0)
    wanted = reached.where(F.col(ROWS) > 0).select(*[F.col(q(m)) for m in keys])
    fresh = groups_at_v(wanted) if groups else mv.limit(0)  # no group reached: nothing to recompute
    pairs = [(m, m) for m in keys]
    joined = wanted.alias("w").join(
        fresh.withColumn(PRESENT, F.lit(True)).alias("r"), null_safe("w", "r", pairs), "left"
    )
    source = scope.in_memory(
        joined.select(
            *[col("w" if f.name in keys else "r", f.name).alias(f.name) for f in mv.schema.fields],
            F.when(F.col(f"r.{PRESENT}").isNull(), "delete").otherwise("upsert").alias(OP),
        )
    )
    kept = source.where(F.col(OP) == "upsert").count()  # served from the driver
    merge = keyed_upsert(source, keys, mv.schema)
    summary = (
        f"{groups} groups changed, {groups} recomputed from the base: "
        f"{kept} pass HAVING, {groups - kept} do not"
    )
    return Change("keyed merge of recomputed groups", change_rows, summary, merge=merge)
