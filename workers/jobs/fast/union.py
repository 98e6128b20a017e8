"""FAST refresh of a UNION ALL of projections (plan kind ``union_projection``, ``workers.ddl.fast_union``).

Every branch is a projection/filter of one base, linear in it over signed bags, so the change of the
union is the union of the branches' changes, which is the MV query itself run with each base bound to
its change rows (an unchanged base bound to no rows):

    Δ(B_1(T_a) ∪all B_2(T_b) ∪all …) = B_1(ΔT_a) ∪all B_2(ΔT_b) ∪all …

run once over the inserted rows (insert/postimage) and once over the deleted ones (delete/preimage),
so expressions, filters and the union's column types are the complete refresh's. A base read by two
branches feeds both; duplicates within and across branches stay counted. The signed rows then go
through the one-table machinery (``workers.jobs.fast.apply``): append when every changed base
only appended, else the rewrite merge that counts copies.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from functools import reduce

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from workers.ddl.plan import FastRefreshPlan
from workers.jobs.complete import read_at, run_query
from workers.jobs.fast import append as incremental_append
from workers.jobs.fast import apply
from workers.jobs.request import RunRequest

__all__ = ["union_change"]


def union_change(
    scope: apply.Scope, request: RunRequest, plan: FastRefreshPlan, ranges: Mapping[str, tuple[int, int]]
) -> tuple[apply.Change, bool]:
    """What the run commits for a union plan (``apply.Change``), and whether every base's change rows
    came from another MV's read (``workers.jobs.changes.reads``)."""
    session, settings, query = scope.session, scope.settings, request.query
    scope.views.update(plan.base_tables)
    changed = [b for b in plan.base_tables if ranges[b][0] < ranges[b][1]]
    reads = {b: scope.changes(b, *ranges[b]) for b in changed}
    shared = bool(reads) and all(read.shared for read in reads.values())
    scope.step(apply.COMPUTE_STEP)
    # An unchanged base contributes no rows, only its columns (a snapshot load, no Spark job).
    unchanged = {b: read_at(session, settings, b, u).limit(0) for b, (s, u) in ranges.items() if s == u}

    def rows(change_types: tuple[str, ...]) -> DataFrame:
        tables = {b: read.frame.where(F.col("_change_type").isin(*change_types)) for b, read in reads.items()}
        return run_query(session, settings, query, {**unchanged, **tables}, mv_name=request.mv_name)

    branches = f"UNION ALL over {len(plan.base_tables)} bases"
    inserted = [incremental_append.inserted_rows(session, settings, b, *ranges[b]) for b in changed]
    if all(n is not None for n in inserted):  # only appends: only gained rows, appended
        total = sum(n or 0 for n in inserted)
        return apply.Change(
            f"{branches}, append", total, f"{total} rows inserted", appended=rows(apply.INSERT_TYPES)
        ), shared
    outputs = (rows(apply.INSERT_TYPES), rows(apply.DELETE_TYPES))
    counted = reduce(DataFrame.unionByName, [read.frame.select("_change_type") for read in reads.values()])
    mv = scope.mv_frame()
    change = apply.projection_change(scope, query, plan.base_table, counted, mv, outputs=outputs)
    return replace(change, plan=f"{branches}, {change.plan}"), shared
