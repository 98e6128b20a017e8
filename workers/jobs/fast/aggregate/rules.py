"""How a group of an aggregate MV gets its new row from its old row and the group's deltas
(``rules``), and when it cannot (the group is recomputed from the base instead).

``incremental_aggregate`` applies the rules two ways: over the MV rows of the changed groups, read
first (two steps: read, then MERGE), or inside the MERGE itself (``one_pass_merge``), where the MERGE's
own read of the MV is the only one. A group the one-pass MERGE finds it cannot derive fails the MERGE
(``RECOMPUTE_NEEDED``: nothing is committed) and the run takes the two steps.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql.types import DataType, DecimalType, IntegralType, StructType

from workers.jobs.delta.key_filter import KeyFilter
from workers.jobs.delta.write import MergeSpec
from workers.jobs.fast.aggregate import values as values_of
from workers.jobs.fast.aggregate.deltas import NEG, S_ROWS, Agg, Tracked, sum_delta
from workers.jobs.fast.apply import NET, RECOMPUTE_NEEDED, null_safe
from workers.jobs.spark.columns import col, q


def exact_type(dtype: DataType) -> bool:
    return isinstance(dtype, IntegralType | DecimalType)


@dataclass(frozen=True)
class Inputs:
    """What the rules read besides a group's old row and deltas."""

    grouped: bool
    aggs: list[Agg]
    tracked: dict[str, Tracked]  # by base column
    counts: dict[str, Agg]  # COUNT(col) by base column
    count_star: Agg | None
    state: dict[str, Column] | None  # the group's new helper state, when the MV keeps one and uses it
    frame: DataFrame  # where the columns live (AVG reads its division's type from Spark's analysis)


@dataclass(frozen=True)
class Rules:
    values: dict[str, Column]  # MV column -> its new value
    recompute: Column  # the values cannot be derived: the group is recomputed (never NULL)
    vanished: Column  # no row is left: the group is deleted


def _sum_left(old: Column, total: Column, inserted: Column, deleted: Column) -> tuple[Column, Column]:
    """(some non-NULL value is left, none is) in a group whose exact SUM of integers or decimals had
    value ``old`` (NULL: no non-NULL value, or no such group yet), now ``total``, after ``inserted``
    and ``deleted`` non-NULL values — without COUNT(col). Where neither holds (values went, none came
    back as many, and the sum came to exactly 0: all gone, or some left that cancel), the group is
    recomputed. So SUM needs no helper state: Oracle asks for COUNT(col) beside it; a sum of 0 after a
    delete is rare enough to re-read."""
    was_empty = old.isNull()
    some_left = F.when(was_empty, inserted > deleted).otherwise((inserted >= deleted) | (total != 0))
    return some_left, was_empty & (inserted == deleted)


def rules(given: Inputs, old: Callable[[Agg], Column], present: Column, delta: str) -> Rules:
    """The new values of a group whose old MV values are ``old(agg)`` (NULL where ``present`` is
    false: a group the MV lacks starts from the empty group's values), and whose deltas are the
    columns of the frame aliased ``delta``."""
    grouped, state, by_column = given.grouped, given.state, given.tracked

    def d(name: str) -> Column:
        return F.col(f"{delta}.{name}")

    def nn_new(column: str) -> Column | None:
        t = by_column[column]
        if state is not None:
            return state[t.name("snn")]
        counter = given.counts.get(column)
        if counter is None:
            return None
        return F.coalesce(old(counter), F.lit(0)) + d(t.name("tp")) - d(t.name("tm"))

    # A global aggregate always has its row.
    recompute: Column = ~present & F.lit(not grouped)
    if state is None and grouped and given.count_star is None:
        recompute = recompute | (d(NEG) > 0)  # a group may vanish and nothing visible tells
    rows_new: Column | None = None
    if state is not None:
        rows_new = state[S_ROWS]
    elif given.count_star is not None:
        rows_new = F.coalesce(old(given.count_star), F.lit(0)) + d(NET)
    values: dict[str, Column] = {}
    for a in given.aggs:
        fn, column = a.item.function, a.item.column
        t = by_column.get(column or "")
        if fn == "COUNT":
            counted = nn_new(column) if column else rows_new
            assert counted is not None  # COUNT(col) counts itself, COUNT(*) is rows_new
            values[a.mv_col] = counted
        elif fn in ("SUM", "AVG") and state is not None and t is not None:
            nn, total = state[t.name("snn")], state[t.name("ssum")]
            if fn == "SUM":
                value, exact = values_of.sum_value(total, a.dtype), F.lit(True)
            else:
                value, exact = values_of.avg_value(given.frame, total, nn, t.dtype)
            usable = (state[t.name("sunfit")] == 0) & value.isNotNull() & exact
            recompute = recompute | ((nn != 0) & ~usable)
            values[a.mv_col] = F.when(nn == 0, F.lit(None)).otherwise(value)
        elif fn == "SUM" and exact_type(a.dtype) and t is not None:
            total = F.try_add(F.coalesce(old(a), F.lit(0)), sum_delta(t, delta))
            value = values_of.sum_value(total, a.dtype)
            unusable = value.isNull() | F.coalesce(d(t.name("tx")), F.lit(False))
            nonnull = nn_new(t.column)
            if nonnull is not None:  # COUNT(col) says when the sum becomes NULL (no non-NULL value left)
                recompute = recompute | ((nonnull != 0) & unusable)
                values[a.mv_col] = F.when(nonnull == 0, F.lit(None)).otherwise(value)
            else:  # NULL once no non-NULL value is left (``_sum_left``)
                some_left, none_left = _sum_left(old(a), total, d(t.name("tp")), d(t.name("tm")))
                recompute = recompute | ~(some_left | none_left) | (some_left & unusable)
                values[a.mv_col] = F.when(none_left, F.lit(None)).otherwise(value)
        elif fn in ("MIN", "MAX") and column:
            removed, current = d(a.name("m")), old(a)
            hits = removed <= current if fn == "MIN" else removed >= current
            extreme_may_go = removed.isNotNull() & (current.isNull() | hits)
            merged = (F.least if fn == "MIN" else F.greatest)(current, d(a.name("p")))
            nonnull = nn_new(column)
            if nonnull is not None:  # no non-NULL value left: NULL, nothing to recompute
                extreme_may_go = extreme_may_go & (nonnull != 0)
                merged = F.when(nonnull == 0, F.lit(None)).otherwise(merged)
            recompute = recompute | extreme_may_go
            values[a.mv_col] = merged
        else:  # AVG and floating-point SUM cannot be updated exactly from their rounded outputs
            recompute = F.lit(True)
            values[a.mv_col] = F.lit(None)
    vanished: Column = F.lit(False)
    if rows_new is not None:
        vanished = F.lit(grouped) & (rows_new == 0)  # no row left: the group goes, whatever else
        recompute = (recompute | (rows_new < 0)) & ~vanished
    # A NULL decision must never drop a group: when in doubt, recompute.
    return Rules(values, F.coalesce(recompute, F.lit(True)), vanished)


def one_pass_merge(
    given: Inputs,
    source: DataFrame,
    dkeys: list[tuple[str, str]],
    key_values: dict[str, str],
    schema: StructType,
    narrow: KeyFilter | None,
) -> MergeSpec:
    """The MERGE that applies ``rules`` to the target's own rows: ``source`` holds one row of deltas
    per changed group (key columns ``dkeys``: (delta key, MV column)); ``key_values`` names the delta
    key of every MV key column. A group the rules cannot derive fails the MERGE (``RECOMPUTE_NEEDED``)
    when its new values are computed. Only there: Delta computes clause conditions on every row of
    its outer join (rows of one side hold NULLs for the other), values only in their clause's branch.
    A group that vanishes is never recomputed (``rules``), so deleting it needs no check."""
    types = {f.name: f.dataType for f in schema.fields}
    matched = rules(given, lambda a: col("t", a.mv_col), F.lit(True), "s")
    inserted = rules(given, lambda a: F.lit(None).cast(types[a.mv_col]), F.lit(False), "s")

    def guarded(r: Rules, value: Column) -> Column:
        return F.when(r.recompute, F.raise_error(F.lit(RECOMPUTE_NEEDED))).otherwise(value)

    condition = null_safe("t", "s", [(m, k) for k, m in dkeys])
    return MergeSpec(
        source=source,
        condition=condition & narrow.on("t") if narrow is not None else condition,
        delete_when=matched.vanished,
        update_set={
            q(f.name): guarded(matched, matched.values[f.name].cast(f.dataType))
            for f in schema.fields
            if f.name not in key_values
        },
        insert_when=~inserted.vanished,
        insert_values={
            q(f.name): F.col(f"s.{key_values[f.name]}")
            if f.name in key_values
            else guarded(inserted, inserted.values[f.name].cast(f.dataType))
            for f in schema.fields
        },
    )
