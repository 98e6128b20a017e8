"""GROUP BY aggregate MVs: signed change rows in, one MERGE keyed by the group out (``aggregate_merge``).

One pass over the change rows gives per-group deltas (signed row counts, per tracked column the
non-NULL counts inserted/deleted, the exact sum and MIN/MAX of what was inserted/deleted). They are
joined to the MV rows of those groups only (and to their helper state, when the MV keeps one), and
each group's new row is derived:

* with helper state (``state``; kept when ``needs_state``: AVG, SUM of floating point,
  GROUP BY without COUNT(*)): COUNT(*), COUNT(col), SUM and AVG come from the new
  state (old + delta), exactly (``values``), and a group whose COUNT(*) reaches 0 is
  deleted — no base read. When the state cannot be trusted it is rebuilt from the input at the pinned
  version in one pass, and the new state of the changed groups is read from it instead.
* without (every value visible in the MV suffices): COUNT and SUM of integers/decimals are merged
  from the MV's own columns. A SUM without its COUNT(col) is NULL exactly when no non-NULL value is
  left, which its old value and the deltas tell but in one rare case (``rules``): recomputed.

MIN/MAX of a group whose current extreme is deleted, a floating sum holding a value too large or too
fine to keep exactly, and the odd case the rules cannot prove exact are recomputed with the MV query
over the input at the pinned version, restricted to those groups. Recomputing is always exact.

The rules (``rules``) run inside the MERGE when no value can need the base or the state
(one pass: the MERGE's own read of the MV is the only one); else, or when the MERGE finds a group it
cannot derive after all, the MV rows of the changed groups are read first (two steps).
"""

from __future__ import annotations

from functools import reduce

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql.types import StructType

from workers.ddl.fast import FastRefreshPlan
from workers.ddl.plan import FORMULA, FORMULA_PART
from workers.jobs.delta.key_filter import KeyFilter, key_filter
from workers.jobs.fast import apply
from workers.jobs.fast.aggregate.deltas import (
    IN_STATE,
    Agg,
    deltas_of,
    layout_of,
    rebuilt_state,
    state_columns,
    state_write,
    tracked_columns,
    with_computed_columns,
)
from workers.jobs.fast.aggregate.inputs import InputAtV
from workers.jobs.fast.aggregate.rules import Inputs, exact_type, one_pass_merge, rules
from workers.jobs.fast.aggregate.state import CatchUpDeclined, StateStore, layout_id
from workers.jobs.fast.apply import (
    _P,
    ALL_ROWS,
    OP,
    PRESENT,
    RECOMPUTE,
    ROWS,
    Change,
    Scope,
    StateWrite,
    keyed_upsert,
    null_safe,
    signed,
)
from workers.jobs.spark import held
from workers.jobs.spark.columns import col, q

__all__ = ["aggregate_merge", "needs_state"]


def needs_state(plan: FastRefreshPlan, aggs: list[Agg]) -> bool:
    """Whether some value cannot be derived from what the MV shows (then the MV keeps helper state)."""
    if plan.group_by and not any(a.item.function == "COUNT" and a.item.column is None for a in aggs):
        return True  # nothing visible says a group vanished
    for a in aggs:
        if a.item.function in ("AVG", FORMULA):  # a formula's parts live in the state alone
            return True
        if a.item.function == "SUM" and not exact_type(a.dtype):
            return True
    return False


def aggregate_merge(
    scope: Scope,
    query: str,
    plan: FastRefreshPlan,
    changes: DataFrame,
    mv: DataFrame,
    at_v: InputAtV,
    state: StateStore | None = None,
    *,
    change_rows: int | None = None,
    catching_up: bool = False,
) -> Change:
    """Per-group deltas in one pass over the change rows (signed by ``_change_type``) and one MERGE
    keyed by the GROUP BY columns that touches only those groups: it derives their new rows itself
    when no value can need the base or the state (one pass), else they are derived from the MV rows
    of those groups, read first (two steps; also the fallback of a one-pass MERGE that fails).
    ``changes`` are signed rows of the aggregate's input, whatever produced them (one base's MV log, a
    join's delta rules, an operator tree); ``at_v`` is that input at the pinned version(s), the one
    seam (``workers.jobs.fast.aggregate.inputs``): read only for groups to recompute, or to rebuild
    the state. ``state`` is the MV's helper state (None: none kept, values come from the MV alone).
    ``catching_up``: ``changes`` run from the state's watermark, before the MV's (``StateStore.origin``):
    exact only where every value is derived from the kept state (a MIN/MAX too: a removed value at or
    beyond the MV's extreme recomputes it, an inserted one is merged idempotently); else it declines
    (``CatchUpDeclined``) before anything is committed."""
    changes = with_computed_columns(scope, plan, changes)  # before the WHERE's alias, which drops new columns
    keys, aggs = layout_of(plan, mv.schema, changes)
    formulas = {a.mv_col: a for a in aggs if a.item.function == FORMULA}
    ruled_aggs = [a for a in aggs if a.item.function != FORMULA]  # a formula is computed from its parts
    if catching_up and (state is None or not needs_state(plan, aggs)):
        raise CatchUpDeclined("the MV's values are not all derived from a helper state")
    assert state is not None or not formulas, "a formula's parts are kept in the helper state"
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
    # The one pass over the changes. Held (a job) where its keys narrow what is read next; not where
    # delta-rs reads the small MV whole, no state is read and the groups may be more than are ever
    # listed (``change_rows``, or more): it is then computed in the job that joins it to the MV rows.
    inline = (
        scope.delta_rs_reads
        and not needs_state(plan, aggs)
        and change_rows is not None
        and change_rows > apply.GROUP_FILTER_LIMIT
    )
    delta = signed(changes).groupBy(*keyed).agg(*deltas)
    delta = delta if inline else scope.in_memory(delta)
    dkeys = [(f"{_P}k{i}", m) for i, (_, m) in enumerate(join_keys)]
    # Only the MV rows of changed groups: a filter on their key values, or a semi-join against the
    # small delta (broadcast). Either way the MV is never shuffled whole.
    mv_pairs = [(m, k) for k, m in dkeys]
    # The changed groups' key values, also the MERGE's narrowing (none listed for an inline pass).
    listed = None if inline else key_filter(mv.schema, mv_pairs, delta, limit=apply.GROUP_FILTER_LIMIT)

    def two_step(retried: bool = False) -> Change:
        """The MV rows of the changed groups read first, then the MERGE of their new rows (``retried``:
        after the one-pass MERGE met a group to recompute)."""
        touched = _touched(scope, mv, mv_pairs, delta, listed)
        marked = touched.withColumn(PRESENT, F.lit(True))
        joined = delta.alias("d").join(marked.alias("m"), null_safe("d", "m", dkeys), "left")

        use_state = state is not None and needs_state(plan, aggs)
        write: StateWrite | None = None
        state_listed: KeyFilter | None = None  # the kept state's rows of the changed groups
        new: dict[str, Column] = {}
        note = ""
        if state is not None and use_state:
            columns = [(t.column, t.summed, t.dtype.simpleString()) for t in tracked]
            layout = layout_id(query, plan.group_by, plan.where, columns)
            skeys = [(k, k) for k, _ in dkeys]
            kept = state.read(layout)
            if kept is None and catching_up:
                raise CatchUpDeclined("the helper state was kept for another layout")
            if kept is not None:  # the state of the changed groups, plus the deltas
                state_listed = key_filter(kept.schema, skeys, delta, limit=apply.GROUP_FILTER_LIMIT)
                kept_rows = _of_groups(kept, skeys, delta, state_listed).withColumn(IN_STATE, F.lit(True))
                joined = joined.join(kept_rows.alias("st"), null_safe("d", "st", skeys), "left")
                new = state_columns(tracked, "st", "d")
                note = f", state {'caught up' if catching_up else 'kept'} in {state.table}"
            else:  # rebuilt at the pinned version: the changed groups' new state is read from it
                with scope.rebuilding():
                    input_rows = with_computed_columns(scope, plan, at_v.rows())
                    rebuilt = rebuilt_state(scope, plan, tracked, input_rows, keyed)
                rebuilt_rows = rebuilt.withColumn(IN_STATE, F.lit(True)).alias("st")
                joined = joined.join(rebuilt_rows, null_safe("d", "st", skeys), "left")
                new = state_columns(tracked, "st", None)
                write = StateWrite(rebuilt, layout)
                note = f", state rebuilt from {at_v.source} in {state.table}"

        given = Inputs(grouped, ruled_aggs, by_column, counts, count_star, new if use_state else None, joined)
        present = F.coalesce(F.col(f"m.{PRESENT}"), F.lit(False))
        ruled = rules(given, lambda a: col("m", a.mv_col), present, "d")
        values, recompute = ruled.values, ruled.recompute
        action = F.when(ruled.vanished, "delete").otherwise("upsert")

        def d(name: str) -> Column:
            return F.col(f"d.{name}")

        key_values = {m: d(f"{_P}k{plan.group_by.index(b)}") for b, m in keys}
        outputs = [
            (
                key_values[f.name]
                if f.name in key_values
                else F.lit(None)  # a formula: computed from its parts below
                if f.name in formulas
                else values[f.name].cast(f.dataType)
            ).alias(f.name)
            for f in mv.schema.fields
        ]
        parts = [values[a.mv_col].cast(a.dtype).alias(a.mv_col) for a in aggs if a.index >= len(plan.items)]
        decision = recompute.alias(RECOMPUTE)
        row_counts = [d(ROWS).alias(ROWS), d(ALL_ROWS).alias(ALL_ROWS)]
        state_keys = [d(k).alias(k) for k, _ in dkeys] if use_state else []
        state_values = [c.alias(f"{_P}new_{name}") for name, c in new.items()]
        # The MV rows of the changed groups, read once (a scan of the MV, no shuffle of it; the narrowed
        # sides are joined to the delta in the same job, no broadcast job each).
        found = joined.select(
            *outputs, *parts, action.alias(OP), decision, *row_counts, *state_keys, *state_values
        )
        decided = scope.in_memory(_with_formulas(found, formulas, aggs), shuffled_joins=True)
        change_rows, total_groups, recomputed = _counts(decided)
        decided = decided.where(F.col(ROWS) > 0).drop(ROWS, ALL_ROWS)
        if state is not None and use_state and write is None:
            write = state_write(decided, [k for k, _ in dkeys], list(new), grouped, layout, state_listed)
        decided = decided.drop(*[k for k, _ in dkeys if use_state], *[f"{_P}new_{n}" for n in new])
        source = decided.where(~F.col(RECOMPUTE)).drop(RECOMPUTE)
        if recomputed:  # the base at v, restricted to those groups, read once
            fresh = _recomputed(join_keys, decided, at_v, mv.schema)
            source = scope.in_memory(source.unionByName(fresh))
        merge = keyed_upsert(source, [m for _, m in join_keys], mv.schema, listed)
        summary = (
            f"linear over {at_v.changes}: {total_groups} groups changed, "
            f"{recomputed} recomputed from {at_v.source}{note}"
        )
        if retried:
            summary += " (the one-pass MERGE met a group to recompute)"
        return Change("keyed merge", change_rows, summary, merge=merge, state=write)

    # One pass: the rules applied inside the MERGE, which reads the MV rows of the changed groups
    # itself. Not when a value may need the base (no state to read there): a kept state, AVG or a
    # floating sum, or a deleted MIN/MAX value (it is often the extreme).
    # Nor where delta-rs reads the changed groups and commits (``rs_commit``): two steps cost less then.
    if needs_state(plan, aggs) or not aggs or scope.delta_rs_reads:
        return two_step()
    reached = F.coalesce(F.col(ROWS), F.lit(0)) > 0
    extremes = [F.col(a.name("m")).isNotNull() for a in aggs if a.item.function in ("MIN", "MAX")]
    removed = reduce(lambda x, y: x | y, extremes, F.lit(False))
    change_rows, total_groups, extremes_removed = held.sums(
        delta, F.col(ALL_ROWS), F.when(reached, 1), F.when(reached & removed, 1)
    )
    if extremes_removed:
        return two_step()
    given = Inputs(grouped, ruled_aggs, by_column, counts, count_star, None, delta)
    key_values = {m: f"{_P}k{plan.group_by.index(b)}" for b, m in keys}
    merge = one_pass_merge(given, delta.where(reached), dkeys, key_values, mv.schema, listed)
    summary = (
        f"linear over {at_v.changes}: {total_groups} groups changed in one pass, "
        f"0 recomputed from {at_v.source}"
    )
    return Change("keyed merge", change_rows, summary, merge=merge, fallback=lambda: two_step(retried=True))


def _with_formulas(rows: DataFrame, formulas: dict[str, Agg], aggs: list[Agg]) -> DataFrame:
    """``rows`` with each expression over aggregates (``FORMULA``) computed from its parts' new values
    (columns named by the parts), as the query computes it (same operand types, so the same result
    type and rounding), the parts then dropped."""
    if not formulas:
        return rows
    computed = {name: F.expr(a.item.argument or "NULL").cast(a.dtype) for name, a in formulas.items()}
    return rows.withColumns(computed).drop(*[a.mv_col for a in aggs if a.mv_col.startswith(FORMULA_PART)])


def _touched(
    scope: Scope, mv: DataFrame, pairs: list[tuple[str, str]], delta: DataFrame, listed: KeyFilter | None
) -> DataFrame:
    """The MV rows of the groups ``delta`` lists, or a superset: read by delta-rs where it may
    (``rs_commit.read_rows``: no Spark job), else by Spark (``_of_groups``)."""
    read = scope.mv_rows_by_delta_rs(mv.schema, listed)
    return read if read is not None else _of_groups(scope.mv_snapshot(), pairs, delta, listed)


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
    join_keys: list[tuple[str, str]], decided: DataFrame, at_v: InputAtV, mv_schema: StructType
) -> DataFrame:
    """The MV query over the input at v, restricted to the groups to recompute; groups it no longer
    yields become "delete" rows."""
    if not join_keys:  # a global aggregate: its single row, over the whole input
        return at_v.groups(None).withColumn(OP, F.lit("upsert"))
    wanted = decided.where(F.col(RECOMPUTE)).select(*[F.col(q(m)) for _, m in join_keys])
    fresh = at_v.groups(wanted).withColumn(PRESENT, F.lit(True))
    pairs = [(m, m) for _, m in join_keys]
    keyset = {m for _, m in join_keys}
    joined = wanted.alias("w").join(fresh.alias("r"), null_safe("w", "r", pairs), "left")
    return joined.select(
        *[col("w" if f.name in keyset else "r", f.name).alias(f.name) for f in mv_schema.fields],
        F.when(F.col(f"r.{PRESENT}").isNull(), "delete").otherwise("upsert").alias(OP),
    )
