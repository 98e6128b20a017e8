"""Inner join (with its filter and projection: the tree's linear block), by its delta rule.

Over signed bags a join is linear in each input, so with T the scans at the MV's watermark, T' at
the pinned version and ΔT their change rows, exactly (duplicates, NULL keys and self-joins included,
as the sum runs over occurrences, not tables):

    Δ(T_1 ⋈ … ⋈ T_n) = Σ_i  T_1' ⋈ … ⋈ T_{i-1}' ⋈ ΔT_i ⋈ T_{i+1} ⋈ … ⋈ T_n

Filter and projection are linear too: each term is the block's own SQL (the user's expressions, join
semantics and types) over the scans' views bound to those frames. The other side of each key
equality of the changed occurrence is narrowed to the keys its change rows hold
(``workers.jobs.fast.join.narrowed``: a filter Delta skips files by, or a broadcast semi-join).
"""

from __future__ import annotations

from collections.abc import Callable
from functools import reduce

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from workers.ddl.tree.values import TreePlan
from workers.jobs.complete import run_query
from workers.jobs.fast import apply
from workers.jobs.fast.join import CHANGE_TYPE, narrowed, signed_delta
from workers.jobs.fast.operators.scan import ScanFrames
from workers.jobs.spark.columns import q

_CHANGE_COLUMNS = ("_change_type", "_commit_version", "_commit_timestamp")


def block_at_new(scope: apply.Scope, tree: TreePlan, frames: ScanFrames) -> DataFrame:
    """The block's rows over every scan at the pinned version (lazy: read only where used)."""
    tables = {s.view: frames.new[s.table] for s in tree.scans}
    return run_query(scope.session, scope.settings, tree.block_sql, tables, mv_name=scope.mv_name)


def block_delta(
    scope: apply.Scope, tree: TreePlan, frames: ScanFrames, change_types: tuple[str, ...]
) -> DataFrame | None:
    """Σ_i over the changed occurrences of the block with occurrence i's change rows of
    ``change_types`` (the rows the block gains, or loses); None when no scan changed."""

    def rows(read: DataFrame) -> DataFrame:
        return read.where(F.col("_change_type").isin(*change_types)).drop(*_CHANGE_COLUMNS)

    return _terms(scope, tree, frames, tree.block_sql, rows)


def block_signed_delta(scope: apply.Scope, tree: TreePlan, frames: ScanFrames) -> DataFrame | None:
    """Σ_i over the changed occurrences of the block with occurrence i's change rows of both signs,
    each output row with the ``_change_type`` of the change row it came from: one query per changed
    occurrence, reading the other scans once rather than once per sign. None when no scan changed."""
    head = "SELECT "  # the block is sqlglot's rendering of a plain SELECT (its projection is linear)
    assert tree.block_sql.startswith(head) and not tree.block_sql.startswith(f"{head}DISTINCT ")
    signed_sql = f"{head}{q(CHANGE_TYPE)} AS _change_type, {tree.block_sql.removeprefix(head)}"
    found = _terms(scope, tree, frames, signed_sql, signed_delta)
    return None if found is None else found.drop(CHANGE_TYPE)  # a ``*`` of the block selects it too


def _terms(
    scope: apply.Scope,
    tree: TreePlan,
    frames: ScanFrames,
    sql: str,
    rows: Callable[[DataFrame], DataFrame],
) -> DataFrame | None:
    """Σ_i ``sql`` over scan i bound to ``rows`` of its change rows, the scans before it at the
    pinned version and after it at the watermark."""
    terms = []
    for index, scan in enumerate(tree.scans):
        read = frames.reads.get(scan.table)
        if read is None:
            continue
        tables = {
            other.view: (frames.new if j < index else frames.old)[other.table]
            for j, other in enumerate(tree.scans)
            if j != index
        }
        for key in tree.keys:  # the other side of each of this occurrence's key equalities, narrowed
            for mine, (view, column) in (
                ((key.left_table, key.left_column), (key.right_table, key.right_column)),
                ((key.right_table, key.right_column), (key.left_table, key.left_column)),
            ):
                if mine[0] == scan.view and view != scan.view:
                    tables[view] = narrowed(
                        tables[view], column, read.frame, mine[1], nulls=False, rows=read.rows
                    )
        tables[scan.view] = rows(read.frame)
        terms.append(run_query(scope.session, scope.settings, sql, tables, mv_name=scope.mv_name))
    return reduce(DataFrame.unionByName, terms) if terms else None
