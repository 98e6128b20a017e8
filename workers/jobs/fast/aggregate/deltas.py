"""The per-group quantities of an aggregate MV's FAST refresh (``workers.jobs.fast.aggregate.merge``):
the aggregates' layout, the one pass of per-group deltas over signed rows, and the helper state rows
(``workers.jobs.fast.aggregate.state``) they give: old state plus delta, or the whole state rebuilt from
the input."""

from __future__ import annotations

from dataclasses import dataclass

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql.types import DataType, DecimalType, StructType

from workers.ddl.fast import AggregateItem, FastRefreshPlan
from workers.ddl.plan import computed_keys
from workers.jobs.delta.key_filter import KeyFilter
from workers.jobs.delta.rs_commit import PlainMerge
from workers.jobs.delta.write import MergeSpec
from workers.jobs.fast.aggregate import values as values_of
from workers.jobs.fast.apply import (
    _P,
    ALL_ROWS,
    NET,
    OP,
    ROWS,
    SIGN,
    Scope,
    StateWrite,
    null_safe,
)
from workers.jobs.spark.columns import col, q

NEG = f"{_P}neg"
IN_STATE = f"{_P}in_state"
S_ROWS = f"{_P}srows"


@dataclass(frozen=True)
class Agg:
    item: AggregateItem
    mv_col: str
    dtype: DataType  # the MV column's (the query's output type)
    index: int

    def name(self, what: str) -> str:
        return f"{_P}{what}{self.index}"


@dataclass(frozen=True)
class Tracked:
    """A base column some aggregate reads: its non-NULL count is tracked, and its exact sum when a
    SUM or AVG reads it."""

    column: str
    index: int
    dtype: DataType  # the input column's
    summed: bool

    def name(self, what: str) -> str:
        return f"{_P}{what}{self.index}"


def with_computed_columns(scope: Scope, plan: FastRefreshPlan, rows: DataFrame) -> DataFrame:
    """``rows`` with the column each GROUP BY expression (``computed_keys``) and each aggregate of an
    expression (``AggregateItem.argument``) is computed into, from the row as the query computes it
    (the guard checks the expression first, like the WHERE); a join's rows have them already, from
    its inputs' query."""
    computed = [*computed_keys(plan.items).items()]
    computed += [(a.column, a.argument) for a in plan.aggregates if a.argument is not None and a.column]
    for column, sql in computed:
        if column not in rows.columns:
            scope.check_expression(sql)
            rows = rows.withColumn(column, F.expr(sql))
    return rows


def layout_of(
    plan: FastRefreshPlan, mv_schema: StructType, rows: DataFrame
) -> tuple[list[tuple[str, str]], list[Agg]]:
    """(base key column, MV column) for every selected key column, and the aggregates, by position;
    then the parts of expressions over aggregates (``FORMULA``), which the MV does not show: named by
    their item, typed as Spark types their aggregate over ``rows`` (the input's signed rows, with
    their computed columns; analysed only, no job)."""
    keys: list[tuple[str, str]] = []
    aggs: list[Agg] = []
    by_name = {a.name: a for a in plan.aggregates}
    for index, (item, field_) in enumerate(zip(plan.items, mv_schema.fields, strict=True)):
        if item.column is None:  # the planner gives aggregates no source column, keys their column
            aggs.append(Agg(by_name[item.name], field_.name, field_.dataType, index))
        else:
            keys.append((item.column, field_.name))
    shown = {item.name for item in plan.items}
    parts = [a for a in plan.aggregates if a.name not in shown]
    if parts:
        calls = [F.expr(f"{a.function}({q(a.column) if a.column else '*'})").alias(a.name) for a in parts]
        types = {f.name: f.dataType for f in rows.select(*calls).schema.fields}
        aggs += [Agg(a, a.name, types[a.name], len(plan.items) + i) for i, a in enumerate(parts)]
    return keys, aggs


def tracked_columns(aggs: list[Agg], schema: StructType) -> list[Tracked]:
    columns: dict[str, bool] = {}
    for a in aggs:
        if a.item.column:
            summed = a.item.function in ("SUM", "AVG")
            columns[a.item.column] = columns.get(a.item.column, False) or summed
    names = {f.name: f.dataType for f in schema.fields}
    return [Tracked(c, i, names[c], summed) for i, (c, summed) in enumerate(columns.items())]


def deltas_of(aggs: list[Agg], tracked: list[Tracked], passes: Column) -> list[Column]:
    """Per-group aggregates of signed rows (``SIGN``): the one pass over them."""
    sign = F.col(SIGN)
    pos, neg = passes & (sign > 0), passes & (sign < 0)
    exprs = [
        F.count(F.lit(1)).alias(ALL_ROWS),
        F.sum(passes.cast("int")).alias(ROWS),
        F.sum(F.when(passes, sign).otherwise(0)).alias(NET),
        F.sum(neg.cast("int")).alias(NEG),
    ]
    for t in tracked:
        c = F.col(q(t.column))
        exprs.append(F.sum((pos & c.isNotNull()).cast("int")).alias(t.name("tp")))
        exprs.append(F.sum((neg & c.isNotNull()).cast("int")).alias(t.name("tm")))
        if t.summed:
            value, fits = values_of.held(c, t.dtype)
            kept = passes & c.isNotNull() & fits
            exprs.append(
                F.try_sum(F.when(kept, F.when(sign > 0, value).otherwise(-value))).alias(t.name("ts"))
            )
            exprs.append(F.sum(F.when(passes & c.isNotNull() & ~fits, sign).otherwise(0)).alias(t.name("tu")))
            exprs.append(F.max(kept).alias(t.name("tf")))
            exprs.append(F.max(passes & c.isNotNull() & ~fits).alias(t.name("tx")))
    for a in aggs:
        if a.item.function in ("MIN", "MAX") and a.item.column:
            fold = F.min if a.item.function == "MIN" else F.max
            c = F.col(q(a.item.column))
            exprs.append(fold(F.when(pos, c)).alias(a.name("p")))
            exprs.append(fold(F.when(neg, c)).alias(a.name("m")))
    return exprs


def sum_delta(t: Tracked, alias: str) -> Column:
    """The delta's exact sum (NULL: it overflowed, the sum is lost)."""
    total, any_fit = F.col(f"{alias}.{t.name('ts')}"), F.col(f"{alias}.{t.name('tf')}")
    return F.when(total.isNull() & F.coalesce(any_fit, F.lit(False)), F.lit(None)).otherwise(
        F.coalesce(total, F.lit(0))
    )


def state_columns(tracked: list[Tracked], old: str | None, delta: str | None) -> dict[str, Column]:
    """The state of a group: ``old`` (an alias of state rows, None: empty) plus ``delta`` (an alias of
    per-group deltas, None: nothing), by the state table's column names."""

    def old_or_zero(name: str) -> Column:
        return F.coalesce(F.col(f"{old}.{name}"), F.lit(0)) if old else F.lit(0)

    def delta_or_zero(what: str, t: Tracked | None = None) -> Column:
        return F.col(f"{delta}.{t.name(what) if t else what}") if delta else F.lit(0)

    out = {S_ROWS: (old_or_zero(S_ROWS) + delta_or_zero(NET)).cast("long")}
    for t in tracked:
        nn = old_or_zero(t.name("snn")) + delta_or_zero("tp", t) - delta_or_zero("tm", t)
        out[t.name("snn")] = nn.cast("long")
        if t.summed:
            storage = values_of.sum_type(t.dtype) or DecimalType(37, 0)
            before = F.lit(0)
            if old is not None:  # a group the state lacks starts from 0; a NULL sum was lost
                before = F.when(F.col(f"{old}.{IN_STATE}"), F.col(f"{old}.{t.name('ssum')}")).otherwise(0)
            after = F.try_add(before, sum_delta(t, delta)) if delta else before
            out[t.name("ssum")] = after.try_cast(storage)
            out[t.name("sunfit")] = (old_or_zero(t.name("sunfit")) + delta_or_zero("tu", t)).cast("long")
    return out


def rebuilt_state(
    scope: Scope, plan: FastRefreshPlan, tracked: list[Tracked], source: DataFrame, keyed: list[Column]
) -> DataFrame:
    """The whole state at the pinned version, from the input in one pass."""
    rows = source.alias(plan.qualifier or plan.base_table).withColumn(SIGN, F.lit(1))
    passes = F.coalesce(F.expr(plan.where), F.lit(False)) if plan.where else F.lit(True)
    delta = rows.groupBy(*keyed).agg(*deltas_of([], tracked, passes)).alias("r")
    keys = [F.col(f"r.{c}") for c in delta.columns if c.startswith(f"{_P}k")]
    columns = state_columns(tracked, None, "r")
    return scope.in_memory(delta.select(*keys, *[c.alias(n) for n, c in columns.items()]))


def state_write(
    decided: DataFrame,
    keys: list[str],
    names: list[str],
    grouped: bool,
    layout: str,
    narrow: KeyFilter | None = None,
) -> StateWrite:
    """The changed groups' new state, merged into the state table by key (an emptied group goes);
    ``narrow``: the state rows those groups may be in (``key_filter``), for delta-rs to skip files by."""
    gone = F.lit(grouped) & (F.col(f"{_P}new_{S_ROWS}") == 0)
    source = decided.select(
        *[F.col(q(k)) for k in keys],
        *[F.col(q(f"{_P}new_{n}")).alias(n) for n in names],
        F.when(gone, "delete").otherwise("upsert").alias(OP),
    )
    merge = MergeSpec(
        source=source,
        condition=null_safe("t", "s", [(k, k) for k in keys]),
        delete_when=F.col(f"s.{OP}") == "delete",
        update_set={q(n): col("s", n) for n in names},
        insert_when=F.col(f"s.{OP}") == "upsert",
        insert_values={q(n): col("s", n) for n in [*keys, *names]},
        plain=PlainMerge(tuple(keys), (*keys, *names), OP, "delete", upsert_op="upsert", narrow=narrow),
    )
    return StateWrite(source, layout, merge=merge)
