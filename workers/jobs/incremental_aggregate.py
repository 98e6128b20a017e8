"""GROUP BY aggregate MVs: signed change rows in, one MERGE keyed by the group out (``aggregate_merge``).

One pass over the change rows gives per-group deltas (signed row counts, per tracked column the
non-NULL counts inserted/deleted, the exact sum and MIN/MAX of what was inserted/deleted). They are
joined to the MV rows of those groups only (and to their helper state, when the MV keeps one), and
each group's new row is derived:

* with helper state (``aggregate_state``; kept when ``needs_state``: AVG, SUM of floating point,
  GROUP BY without COUNT(*)): COUNT(*), COUNT(col), SUM and AVG come from the new
  state (old + delta), exactly (``aggregate_values``), and a group whose COUNT(*) reaches 0 is
  deleted — no base read. When the state cannot be trusted it is rebuilt from the input at the pinned
  version in one pass, and the new state of the changed groups is read from it instead.
* without (every value visible in the MV suffices): COUNT and SUM of integers/decimals are merged
  from the MV's own columns. A SUM without its COUNT(col) is NULL exactly when no non-NULL value is
  left, which its old value and the deltas tell but in one rare case (``_sum_left``): recomputed.

MIN/MAX of a group whose current extreme is deleted, a floating sum holding a value too large or too
fine to keep exactly, and the odd case the rules cannot prove exact are recomputed with the MV query
over the input at the pinned version, restricted to those groups. Recomputing is always exact.
"""

from __future__ import annotations

from collections.abc import Callable

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql.types import DataType, DecimalType, IntegralType, StructType

from workers.ddl.fast import FastRefreshPlan
from workers.jobs import aggregate_values as values_of
from workers.jobs import held
from workers.jobs import incremental_apply as apply
from workers.jobs.aggregate_deltas import (
    IN_STATE,
    NEG,
    S_ROWS,
    Agg,
    deltas_of,
    layout_of,
    rebuilt_state,
    state_columns,
    state_write,
    sum_delta,
    tracked_columns,
)
from workers.jobs.aggregate_state import StateStore, StateWrite, layout_id
from workers.jobs.columns import col, q
from workers.jobs.incremental_apply import (
    _P,
    ALL_ROWS,
    NET,
    OP,
    PRESENT,
    RECOMPUTE,
    ROWS,
    Change,
    Scope,
    keyed_upsert,
    null_safe,
    signed,
)
from workers.jobs.key_filter import KeyFilter, key_filter

__all__ = ["GroupRecompute", "aggregate_merge", "needs_state"]

# The MV query's rows of the groups a frame of MV key values lists (a superset is fine), or of all groups
# for None: how a join (``workers.jobs.incremental_join``) recomputes groups (it has no ``base_at_v``).
GroupRecompute = Callable[[DataFrame | None], DataFrame]


def _exact_type(dtype: DataType) -> bool:
    return isinstance(dtype, IntegralType | DecimalType)


def needs_state(plan: FastRefreshPlan, aggs: list[Agg]) -> bool:
    """Whether some value cannot be derived from what the MV shows (then the MV keeps helper state)."""
    if plan.group_by and not any(a.item.function == "COUNT" and a.item.column is None for a in aggs):
        return True  # nothing visible says a group vanished
    for a in aggs:
        if a.item.function == "AVG":
            return True
        if a.item.function == "SUM" and not _exact_type(a.dtype):
            return True
    return False


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


def aggregate_merge(
    scope: Scope,
    query: str,
    plan: FastRefreshPlan,
    changes: DataFrame,
    mv: DataFrame,
    base_at_v: DataFrame | None,
    state: StateStore | None = None,
    groups_at_v: GroupRecompute | None = None,
) -> Change:
    """Per-group deltas in one pass over the change rows (signed by ``_change_type``), joined to the
    MV rows of those groups only, and one MERGE keyed by the GROUP BY columns that touches only them.
    ``base_at_v`` is the input at the pinned version (read only for groups to recompute, or to rebuild
    the state); ``state`` the MV's helper state (None: none kept, values come from the MV alone).
    A join has no one input at v: it passes ``groups_at_v`` instead (and keeps no state)."""
    keys, aggs = layout_of(plan, mv.schema)
    join_keys: list[tuple[str, str]] = []  # one MV column per group key (a key may be selected twice)
    for key in plan.group_by:
        join_keys.append(next((b, m) for b, m in keys if b == key))
    grouped = bool(plan.group_by)
    count_star = next((a for a in aggs if a.item.function == "COUNT" and a.item.column is None), None)
    counts = {a.item.column: a for a in aggs if a.item.function == "COUNT" and a.item.column}

    # Change rows the WHERE drops still count as change rows (the run reports them) but touch nothing.
    # The user's own WHERE text, as Spark reads it (checked by the guard like the whole query); the
    # change rows are aliased by the name the query reads the table by, so qualified columns resolve.
    if plan.where:
        scope.check_expression(plan.where)
        changes = changes.alias(plan.qualifier or plan.base_table)
    passes = F.coalesce(F.expr(plan.where), F.lit(False)) if plan.where else F.lit(True)
    tracked = tracked_columns(aggs, changes.schema)
    by_column = {t.column: t for t in tracked}
    keyed = [F.col(q(b)).alias(f"{_P}k{i}") for i, (b, _) in enumerate(join_keys)]
    deltas = deltas_of(aggs, tracked, passes)
    delta = scope.in_memory(signed(changes).groupBy(*keyed).agg(*deltas))  # the one pass over the changes
    dkeys = [(f"{_P}k{i}", m) for i, (_, m) in enumerate(join_keys)]
    # Only the MV rows of changed groups: a filter on their key values, or a semi-join against the
    # small delta (broadcast). Either way the MV is never shuffled whole.
    mv_pairs = [(m, k) for k, m in dkeys]
    listed = key_filter(mv.schema, mv_pairs, delta, limit=apply.GROUP_FILTER_LIMIT)  # also the MERGE's
    touched = _of_groups(mv, mv_pairs, delta, listed)
    marked = touched.withColumn(PRESENT, F.lit(True))
    joined = delta.alias("d").join(marked.alias("m"), null_safe("d", "m", dkeys), "left")

    use_state = state is not None and needs_state(plan, aggs)
    write: StateWrite | None = None
    new: dict[str, Column] = {}
    note = ""
    if state is not None and use_state:
        columns = [(t.column, t.summed, t.dtype.simpleString()) for t in tracked]
        layout = layout_id(query, plan.group_by, plan.where, columns)
        skeys = [(k, k) for k, _ in dkeys]
        kept = state.read(layout)
        if kept is not None:  # the state of the changed groups, plus the deltas
            state_listed = key_filter(kept.schema, skeys, delta, limit=apply.GROUP_FILTER_LIMIT)
            held = _of_groups(kept, skeys, delta, state_listed).withColumn(IN_STATE, F.lit(True)).alias("st")
            joined = joined.join(held, null_safe("d", "st", skeys), "left")
            new = state_columns(tracked, "st", "d")
            note = f", state kept in {state.table}"
        else:  # rebuilt at the pinned version: the changed groups' new state is read from it
            assert base_at_v is not None, "state is kept for one-base MVs only"
            rebuilt = rebuilt_state(scope, plan, tracked, base_at_v, keyed)
            at_v = rebuilt.withColumn(IN_STATE, F.lit(True)).alias("st")
            joined = joined.join(at_v, null_safe("d", "st", skeys), "left")
            new = state_columns(tracked, "st", None)
            write = StateWrite(rebuilt, layout)
            note = f", state rebuilt from the base in {state.table}"

    def old(a: Agg) -> Column:
        return col("m", a.mv_col)

    def d(name: str) -> Column:
        return F.col(f"d.{name}")

    def nn_new(column: str) -> Column | None:
        t = by_column[column]
        if use_state:
            return new[t.name("snn")]
        counter = counts.get(column)
        if counter is None:
            return None
        return F.coalesce(old(counter), F.lit(0)) + d(t.name("tp")) - d(t.name("tm"))

    present = F.coalesce(F.col(f"m.{PRESENT}"), F.lit(False))
    deletes = d(NEG) > 0
    # A global aggregate always has its row. A group the MV lacks starts from the empty group's
    # values (COUNT 0, NULL otherwise), which the rules below merge like any other.
    recompute: Column = ~present & F.lit(not grouped)
    if not use_state and grouped and count_star is None:
        recompute = recompute | deletes  # a group may vanish and nothing visible tells
    rows_new: Column | None = None
    if use_state:
        rows_new = new[S_ROWS]
    elif count_star is not None:
        rows_new = F.coalesce(old(count_star), F.lit(0)) + d(NET)
    values: dict[str, Column] = {}
    for a in aggs:
        fn, column = a.item.function, a.item.column
        t = by_column.get(column or "")
        if fn == "COUNT":
            counted = nn_new(column) if column else rows_new
            assert counted is not None  # COUNT(col) counts itself, COUNT(*) is rows_new
            values[a.mv_col] = counted
        elif fn in ("SUM", "AVG") and use_state and t is not None:
            nn, total = new[t.name("snn")], new[t.name("ssum")]
            if fn == "SUM":
                value, exact = values_of.sum_value(total, a.dtype), F.lit(True)
            else:
                value, exact = values_of.avg_value(joined, total, nn, t.dtype)
            usable = (new[t.name("sunfit")] == 0) & value.isNotNull() & exact
            recompute = recompute | ((nn != 0) & ~usable)
            values[a.mv_col] = F.when(nn == 0, F.lit(None)).otherwise(value)
        elif fn == "SUM" and _exact_type(a.dtype) and t is not None:
            total = F.try_add(F.coalesce(old(a), F.lit(0)), sum_delta(t, "d"))
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
    if rows_new is not None:
        vanished = F.lit(grouped) & (rows_new == 0)  # no row left: the group goes, whatever else
        recompute = (recompute | (rows_new < 0)) & ~vanished
        action = F.when(vanished, "delete").otherwise("upsert")
    else:
        action = F.lit("upsert")
    key_values = {m: d(f"{_P}k{plan.group_by.index(b)}") for b, m in keys}
    outputs = [
        (key_values[f.name] if f.name in key_values else values[f.name].cast(f.dataType)).alias(f.name)
        for f in mv.schema.fields
    ]
    # A NULL decision must never drop a group: when in doubt, recompute.
    decision = F.coalesce(recompute, F.lit(True)).alias(RECOMPUTE)
    row_counts = [d(ROWS).alias(ROWS), d(ALL_ROWS).alias(ALL_ROWS)]
    state_keys = [d(k).alias(k) for k, _ in dkeys] if use_state else []
    state_values = [c.alias(f"{_P}new_{name}") for name, c in new.items()]
    # The MV rows of the changed groups, read once (a scan of the MV, no shuffle of it; the narrowed
    # sides are joined to the delta in the same job, no broadcast job each).
    decided = scope.in_memory(
        joined.select(*outputs, action.alias(OP), decision, *row_counts, *state_keys, *state_values),
        shuffled_joins=True,
    )
    change_rows, total_groups, recomputed = _counts(decided)
    decided = decided.where(F.col(ROWS) > 0).drop(ROWS, ALL_ROWS)
    if state is not None and use_state and write is None:
        write = state_write(decided, [k for k, _ in dkeys], list(new), grouped, layout)
    decided = decided.drop(*[k for k, _ in dkeys if use_state], *[f"{_P}new_{n}" for n in new])
    source = decided.where(~F.col(RECOMPUTE)).drop(RECOMPUTE)
    if recomputed:  # the base at v, restricted to those groups, read once
        fresh = _recomputed(scope, query, plan, join_keys, decided, base_at_v, mv.schema, groups_at_v)
        source = scope.in_memory(source.unionByName(fresh))
    merge = keyed_upsert(source, [m for _, m in join_keys], mv.schema, listed)
    summary = f"{total_groups} groups changed, {recomputed} recomputed from the base{note}"
    return Change("keyed merge", change_rows, summary, merge=merge, state=write)


def _of_groups(
    frame: DataFrame, pairs: list[tuple[str, str]], delta: DataFrame, listed: KeyFilter | None
) -> DataFrame:
    """The rows of ``frame`` (the MV, or its state) of the groups ``delta`` lists, or a superset:
    pairs are (column of ``frame``, key column of ``delta``), matched NULL-safely. ``listed``: the
    IN lists of ``delta``'s keys on ``frame`` (``key_filter``), enough alone when complete."""
    if listed is not None and listed.complete:
        return frame.where(listed.on())
    return frame.alias("o").join(F.broadcast(delta).alias("b"), null_safe("o", "b", pairs), "left_semi")


def _counts(decided: DataFrame) -> tuple[int, int, int]:
    """(change rows, groups changed, groups to recompute) of the held ``decided`` rows. A group no
    change row passing the WHERE reached is untouched (a global aggregate yields its one group even for
    no rows)."""
    reached = F.coalesce(F.col(ROWS), F.lit(0)) > 0
    one = F.lit(1)
    rows, groups, recomputed = held.sums(
        decided, F.col(ALL_ROWS), F.when(reached, one), F.when(reached & F.col(RECOMPUTE), one)
    )
    return rows, groups, recomputed


def _recomputed(
    scope: Scope,
    query: str,
    plan: FastRefreshPlan,
    join_keys: list[tuple[str, str]],
    decided: DataFrame,
    base_at_v: DataFrame | None,
    mv_schema: StructType,
    groups_at_v: GroupRecompute | None,
) -> DataFrame:
    """The MV query over the base at v, restricted to the groups to recompute; groups it no longer
    yields become "delete" rows."""
    wanted = decided.where(F.col(RECOMPUTE)).select(*[F.col(q(m)) for _, m in join_keys])
    if groups_at_v is not None:  # a join's groups, not one base's (workers.jobs.incremental_join)
        if not join_keys:
            return groups_at_v(None).withColumn(OP, F.lit("upsert"))
        fresh = groups_at_v(wanted).withColumn(PRESENT, F.lit(True))
    else:
        assert base_at_v is not None, "one base: its input at v"
        if not join_keys:  # a global aggregate: its single row, over the whole base
            return scope.run_query(query, plan.base_table, base_at_v).withColumn(OP, F.lit("upsert"))
        wanted_keys = F.broadcast(wanted).alias("w")
        subset = base_at_v.alias("b").join(wanted_keys, null_safe("b", "w", join_keys), "left_semi")
        fresh = scope.run_query(query, plan.base_table, subset).withColumn(PRESENT, F.lit(True))
    pairs = [(m, m) for _, m in join_keys]
    keyset = {m for _, m in join_keys}
    joined = wanted.alias("w").join(fresh.alias("r"), null_safe("w", "r", pairs), "left")
    return joined.select(
        *[col("w" if f.name in keyset else "r", f.name).alias(f.name) for f in mv_schema.fields],
        F.when(F.col(f"r.{PRESENT}").isNull(), "delete").otherwise("upsert").alias(OP),
    )
