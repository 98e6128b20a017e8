"""How MV-log change rows become one Delta MERGE into the MV table (used by ``workers.jobs.incremental``).

The MV table holds exactly the query's columns (no hidden helper columns), so every rule here must be
exact from what the MV shows plus the change rows, or else rewrite the affected rows from the base:

* projection/filter: the MV is a bag of rows without identity. Change rows are run through the MV's
  own query (so expressions and types are exactly the complete refresh's), counted per distinct output
  row with a sign (insert/postimage +1, delete/preimage -1), and every distinct output row whose net
  count is negative is rewritten: all its copies are deleted and ``old + net`` copies re-inserted.
  Duplicates therefore stay exact (deleting one of two equal base rows leaves one MV row).
* aggregate: per group, signed deltas are merged algebraically where that is exact from the visible
  columns (COUNT, SUM of integers/decimals, MIN/MAX on inserts); groups where it is not (a delete of
  the current MIN/MAX, AVG, floating-point SUM, SUM without COUNT(col) on delete, a possibly vanishing
  group without COUNT(*)) are recomputed with the MV query over the base at the pinned version,
  restricted to those groups. Recomputing is always exact, so correctness never rests on guessing.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import reduce

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import DataType, DecimalType, IntegralType, MapType, StructType, VariantType

from workers.config import Settings
from workers.ddl.fast import AggregateItem, FastRefreshPlan
from workers.jobs.guard import check_expression
from workers.jobs.refresh import run_query

INSERT_TYPES = ("insert", "update_postimage")
DELETE_TYPES = ("delete", "update_preimage")
_P = "__mvs_"  # prefix of helper columns; never reaches the MV table
SIGN, NET, NEW, OLD = f"{_P}sign", f"{_P}net", f"{_P}new", f"{_P}old"
OP, PRESENT, RECOMPUTE = f"{_P}op", f"{_P}present", f"{_P}recompute"
ROWS, ALL_ROWS = f"{_P}rows", f"{_P}all_rows"


class Inconsistent(Exception):
    """The MV content cannot be what its watermark says (e.g. more deletes than copies)."""


def q(name: str) -> str:
    """Backtick-quote a column name for Spark."""
    return "`" + name.replace("`", "``") + "`"


def col(alias: str, name: str) -> Column:
    return F.col(f"{alias}.{q(name)}")


def null_safe(left: str, right: str, pairs: Sequence[tuple[str, str]]) -> Column:
    """``left.a <=> right.b AND …`` (TRUE for no pairs): MVs may hold NULL keys and values."""
    return reduce(lambda a, b: a & b, [col(left, x).eqNullSafe(col(right, y)) for x, y in pairs], F.lit(True))


def unmatchable_columns(schema: StructType) -> list[str]:
    """Columns that can be neither grouped nor compared (rows holding them cannot be matched)."""
    return [f.name for f in schema.fields if isinstance(f.dataType, MapType | VariantType)]


# The most rows a run holds on the driver (``Scope.in_memory``); beyond it, on the executors.
DRIVER_ROWS_LIMIT = 100_000


@dataclass
class Scope:
    """The run's session and the temp views made in it, dropped by ``close``."""

    session: SparkSession
    settings: Settings
    mv_name: str
    views: set[str] = field(default_factory=set)

    def run_query(self, query: str, base: str, rows: DataFrame) -> DataFrame:
        """The MV query, as written, over ``rows`` as its base table (a temp view named ``base``)."""
        self.views.add(base)
        return run_query(self.session, self.settings, query, {base: rows}, mv_name=self.mv_name)

    def check_expression(self, text: str) -> None:
        """Refuse (QueryRefused) an expression of the MV query that the guard would refuse."""
        check_expression(self.session, text, extra_functions=self.settings.allowed_functions)

    def in_memory(self, frame: DataFrame) -> DataFrame:
        """``frame`` computed once (one Spark job) and held on the driver as a local relation.

        Meant for small frames (the per-group delta, the affected MV rows). Reads of the result run
        no job of their own (filters and projections of it are folded by the optimizer, a collect
        of it is served from the driver), and it has no lineage back to Delta: the MERGE that plans
        its source several times re-reads no change data and rebuilds no time-travel snapshot.
        The rows stay JVM values (no Python round trip: exact for every type)."""
        # At most DRIVER_ROWS_LIMIT rows come to the driver: a large change set (a bulk load, a
        # backfill) is computed once more and kept on the executors instead, so the worker's memory
        # bounds no change size.
        rows = frame._jdf.limit(DRIVER_ROWS_LIMIT + 1).collectAsList()  # noqa: SLF001 - JVM-side collect
        if rows.size() > DRIVER_ROWS_LIMIT:
            return frame.localCheckpoint(eager=True)
        local = self.session._jsparkSession.createDataFrame(rows, frame._jdf.schema())  # noqa: SLF001
        return DataFrame(local, self.session)

    def close(self) -> None:
        for view in self.views:
            self.session.catalog.dropTempView(view)


def _plus(a: str, b: str) -> Column:
    return F.coalesce(F.col(a), F.lit(0)) + F.coalesce(F.col(b), F.lit(0))


def signed(changes: DataFrame) -> DataFrame:
    kind = F.col("_change_type")
    sign = F.when(kind.isin(*INSERT_TYPES), 1).when(kind.isin(*DELETE_TYPES), -1)
    return changes.withColumn(SIGN, sign).where(F.col(SIGN).isNotNull())


@dataclass(frozen=True)
class MergeSpec:
    """A MERGE source and the clauses to apply it with (``s`` = source alias, ``t`` = target)."""

    source: DataFrame
    condition: Column
    delete_when: Column
    update_set: dict[str, str | Column]
    insert_when: Column
    insert_values: dict[str, str | Column]


@dataclass(frozen=True)
class Change:
    """What one run commits, by the plan named ``plan``: ``merge`` applied, else ``appended`` appended."""

    plan: str  # "append", "keyed merge", "rewrite merge" (named in the run message)
    change_rows: int  # change rows read
    summary: str
    merge: MergeSpec | None = None
    appended: DataFrame | None = None


# ---------------------------------------------------------------------------------------- projection


def _copies(frame: DataFrame, cols: Sequence[str], how_many: str) -> DataFrame:
    """``how_many`` copies of each row of ``frame`` (none where it is 0 or less), columns ``cols``."""
    copy = f"{_P}copy"
    repeated = F.explode(F.array_repeat(F.lit(0), F.col(how_many).cast("int"))).alias(copy)
    return frame.where(F.col(how_many) > 0).select(*[F.col(q(c)) for c in cols], repeated).drop(copy)


def projection_change(
    scope: Scope,
    query: str,
    base: str,
    changes: DataFrame,
    mv: DataFrame,
    outputs: tuple[DataFrame, DataFrame] | None = None,
) -> Change:
    """Net copies per distinct output row, in one pass over the change rows. Growth only: the new
    copies are appended. Else every distinct output row whose multiplicity drops is rewritten (all its
    copies deleted, ``old + net`` re-inserted) and the ones that grow are inserted, in one MERGE.

    ``outputs``: the query's rows gained and lost, when the caller derived them (a join's delta rules,
    ``workers.jobs.incremental_join``); ``changes`` then only counts the change rows."""
    cols = mv.columns
    keyed = [F.col(q(c)) for c in cols]
    if outputs is None:
        ins = scope.run_query(query, base, changes.where(F.col("_change_type").isin(*INSERT_TYPES)))
        dels = scope.run_query(query, base, changes.where(F.col("_change_type").isin(*DELETE_TYPES)))
    else:
        ins, dels = outputs
    tally = f"{_P}tally"  # the one extra row counting every change row (the run message reports it)
    counted = changes.agg(F.count(F.lit(1)).alias(NET)).select(
        *[F.lit(None).cast(f.dataType).alias(f.name) for f in mv.schema.fields], NET, F.lit(True).alias(tally)
    )
    net = (
        ins.withColumn(SIGN, F.lit(1))
        .unionByName(dels.withColumn(SIGN, F.lit(-1)))
        .groupBy(*keyed)
        .agg(F.sum(SIGN).alias(NET))
        .where(F.col(NET) != 0)
        .withColumn(tally, F.lit(False))
    )
    net = scope.in_memory(net.unionByName(counted))  # the one pass over the change rows
    change_rows = int(net.where(F.col(tally)).select(NET).collect()[0][0])
    net = net.where(~F.col(tally)).drop(tally)
    shrinking = net.where(F.col(NET) < 0)
    if not shrinking.limit(1).collect():
        added = net.select(F.sum(NET)).collect()[0][0] or 0
        return Change("append", change_rows, f"{added} rows added", appended=_copies(net, cols, NET))
    pairs = [(c, c) for c in cols]
    old = (
        mv.alias("m")
        .join(F.broadcast(shrinking).alias("n"), null_safe("m", "n", pairs), "left_semi")
        .groupBy(*keyed)
        .agg(F.count(F.lit(1)).alias(OLD))
    )
    rewritten = (
        shrinking.alias("n")
        .join(old.alias("o"), null_safe("n", "o", pairs), "left")
        .select(*[col("n", c).alias(c) for c in cols], _plus(OLD, NET).alias(NEW))
        .withColumn(OP, F.lit("rewrite"))
    )
    growing = net.where(F.col(NET) > 0).select(*keyed, F.col(NET).alias(NEW)).withColumn(OP, F.lit("add"))
    changed = scope.in_memory(rewritten.unionByName(growing))  # the MV rows of shrinking output rows
    # One aggregate, not the rows: served from the driver when ``changed`` is held there.
    totals = changed.agg(
        F.count(F.lit(1)).alias("rows"),
        F.sum(F.when(F.col(OP) == "rewrite", 1).otherwise(0)).alias("rewrites"),
        F.sum(F.when(F.col(NEW) < 0, 1).otherwise(0)).alias("negative"),
    ).collect()[0]
    if totals["negative"]:
        raise Inconsistent("the MV holds fewer copies of a row than the change data deletes")
    distinct_rows, rewrites = totals["rows"], totals["rewrites"] or 0
    markers = changed.where(F.col(OP) == "rewrite").select(*keyed).withColumn(OP, F.lit("del"))
    copies = _copies(changed, cols, NEW).withColumn(OP, F.lit("ins"))
    merge = MergeSpec(
        source=markers.unionByName(copies),
        # Only "del" markers match, so they delete every copy; copies never match and are inserted.
        condition=(F.col(f"s.{OP}") == "del") & null_safe("t", "s", pairs),
        delete_when=F.col(f"s.{OP}") == "del",
        update_set={},
        insert_when=F.col(f"s.{OP}") == "ins",
        insert_values={q(c): col("s", c) for c in cols},
    )
    summary = f"{distinct_rows} distinct rows changed, {rewrites} rewritten"
    return Change("rewrite merge", change_rows, summary, merge=merge)


# ----------------------------------------------------------------------------------------- aggregate


@dataclass(frozen=True)
class _Agg:
    item: AggregateItem
    mv_col: str
    dtype: DataType
    index: int

    def name(self, what: str) -> str:
        return f"{_P}{what}{self.index}"


def _layout(plan: FastRefreshPlan, mv_schema: StructType) -> tuple[list[tuple[str, str]], list[_Agg]]:
    """(base key column, MV column) for every selected key column, and the aggregates, by position."""
    keys: list[tuple[str, str]] = []
    aggs: list[_Agg] = []
    by_name = {a.name: a for a in plan.aggregates}
    for index, (item, field_) in enumerate(zip(plan.items, mv_schema.fields, strict=True)):
        if item.column is None:  # the planner gives aggregates no source column, keys their column
            aggs.append(_Agg(by_name[item.name], field_.name, field_.dataType, index))
        else:
            keys.append((item.column, field_.name))
    return keys, aggs


def _exact_sum(agg: _Agg) -> bool:
    return isinstance(agg.dtype, IntegralType | DecimalType)


# The MV query's rows of the groups a frame of MV key values lists (a superset is fine), or of all groups
# for None: how a join (``workers.jobs.incremental_join``) recomputes groups (it has no ``base_at_v``).
GroupRecompute = Callable[[DataFrame | None], DataFrame]


def aggregate_merge(
    scope: Scope,
    query: str,
    plan: FastRefreshPlan,
    changes: DataFrame,
    mv: DataFrame,
    base_at_v: DataFrame | None,
    groups_at_v: GroupRecompute | None = None,
) -> Change:
    """Per-group deltas in one pass over the change rows, joined to the MV rows of those groups only,
    and one MERGE keyed by the GROUP BY columns that touches only them."""
    keys, aggs = _layout(plan, mv.schema)
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
    sign = F.col(SIGN)
    pos, neg = passes & (sign > 0), passes & (sign < 0)
    exprs = [
        F.count(F.lit(1)).alias(ALL_ROWS),
        F.sum(passes.cast("int")).alias(ROWS),
        F.sum(F.when(passes, sign).otherwise(0)).alias(NET),
        F.sum(neg.cast("int")).alias(f"{_P}neg"),
    ]
    for a in aggs:
        c = F.col(q(a.item.column)) if a.item.column else None
        if a.item.function == "COUNT" and c is not None:
            exprs.append(F.sum(F.when(passes & c.isNotNull(), sign).otherwise(0)).alias(a.name("d")))
        elif a.item.function == "SUM" and c is not None and _exact_sum(a):
            exact = c.cast(a.dtype)
            exprs.append(F.sum(F.when(pos, exact).when(neg, -exact)).alias(a.name("d")))
            exprs.append(F.sum((pos & c.isNotNull()).cast("int")).alias(a.name("p")))
            exprs.append(F.sum((neg & c.isNotNull()).cast("int")).alias(a.name("m")))
        elif a.item.function in ("MIN", "MAX") and c is not None:
            fold = F.min if a.item.function == "MIN" else F.max
            exprs.append(fold(F.when(pos, c)).alias(a.name("p")))
            exprs.append(fold(F.when(neg, c)).alias(a.name("m")))
    keyed = [F.col(q(b)).alias(f"{_P}k{i}") for i, (b, _) in enumerate(join_keys)]
    delta = scope.in_memory(signed(changes).groupBy(*keyed).agg(*exprs))  # the one pass over the changes
    dkeys = [(f"{_P}k{i}", m) for i, (_, m) in enumerate(join_keys)]
    # Only the MV rows of changed groups (semi-join against the small delta: the MV is never shuffled).
    touched = mv.alias("m").join(
        F.broadcast(delta).alias("d"), null_safe("m", "d", [(m, k) for k, m in dkeys]), "left_semi"
    )
    marked = touched.withColumn(PRESENT, F.lit(True))
    joined = delta.alias("d").join(marked.alias("m"), null_safe("d", "m", dkeys), "left")

    def old(a: _Agg) -> Column:
        return col("m", a.mv_col)

    def d(a: _Agg, what: str) -> Column:
        return F.col(f"d.{a.name(what)}")

    present = F.coalesce(F.col(f"m.{PRESENT}"), F.lit(False))
    deletes = F.col(f"d.{_P}neg") > 0
    recompute: Column = ~present & (deletes | F.lit(not grouped))  # MV lacks a group it should have
    if grouped and count_star is None:
        recompute = recompute | deletes  # a group may vanish and nothing visible tells
    values: dict[str, Column] = {}
    for a in aggs:
        fn = a.item.function
        if fn == "COUNT":
            counted = d(a, "d") if a.item.column else F.col(f"d.{NET}")
            values[a.mv_col] = F.coalesce(old(a), F.lit(0)) + F.coalesce(counted, F.lit(0))
        elif fn == "SUM" and _exact_sum(a):
            total = F.coalesce(old(a), F.lit(0)) + F.coalesce(d(a, "d"), F.lit(0))
            counter = counts.get(a.item.column or "")
            if counter is not None:  # COUNT(col) says when the sum becomes NULL (no non-NULL value left)
                nonnull = F.coalesce(old(counter), F.lit(0)) + F.coalesce(d(counter, "d"), F.lit(0))
                values[a.mv_col] = F.when(nonnull == 0, F.lit(None)).otherwise(total)
            else:
                recompute = recompute | (d(a, "m") > 0)
                values[a.mv_col] = F.when(d(a, "p") > 0, total).otherwise(old(a))
        elif fn in ("MIN", "MAX"):
            removed, current = d(a, "m"), old(a)
            hits = removed <= current if fn == "MIN" else removed >= current
            extreme_may_go = removed.isNotNull() & (current.isNull() | hits)
            merged = (F.least if fn == "MIN" else F.greatest)(current, d(a, "p"))
            counter = counts.get(a.item.column or "")
            if counter is not None:  # no non-NULL value left: NULL, nothing to recompute
                none_left = (F.coalesce(old(counter), F.lit(0)) + F.coalesce(d(counter, "d"), F.lit(0))) == 0
                extreme_may_go = extreme_may_go & ~none_left
                merged = F.when(none_left, F.lit(None)).otherwise(merged)
            recompute = recompute | extreme_may_go
            values[a.mv_col] = merged
        else:  # AVG and floating-point SUM cannot be updated exactly from their rounded outputs
            recompute = F.lit(True)
            values[a.mv_col] = F.lit(None)
    if count_star is not None:
        remaining = values[count_star.mv_col]
        vanished = F.lit(grouped) & (remaining == 0)  # no row left: the group goes, whatever else
        recompute = (recompute | (remaining < 0)) & ~vanished
        action = F.when(vanished, "delete").otherwise("upsert")
    else:
        action = F.lit("upsert")
    key_values = {m: F.col(f"d.{_P}k{plan.group_by.index(b)}") for b, m in keys}
    outputs = [
        (key_values[f.name] if f.name in key_values else values[f.name].cast(f.dataType)).alias(f.name)
        for f in mv.schema.fields
    ]
    # A NULL decision must never drop a group: when in doubt, recompute.
    decision = F.coalesce(recompute, F.lit(True)).alias(RECOMPUTE)
    row_counts = [F.col(f"d.{ROWS}").alias(ROWS), F.col(f"d.{ALL_ROWS}").alias(ALL_ROWS)]
    # The MV rows of the changed groups, read once (a scan of the MV, no shuffle of it).
    decided = scope.in_memory(joined.select(*outputs, action.alias(OP), decision, *row_counts))
    # A group no change row passing the WHERE reached is untouched (a global aggregate yields its one
    # group even for no rows). One aggregate, not the rows: served from the driver when held there.
    reached = F.coalesce(F.col(ROWS), F.lit(0)) > 0
    stats = decided.agg(
        F.sum(F.coalesce(F.col(ALL_ROWS), F.lit(0))).alias("change_rows"),
        F.sum(F.when(reached, 1).otherwise(0)).alias("groups"),
        F.sum(F.when(reached & F.col(RECOMPUTE), 1).otherwise(0)).alias("recomputed"),
    ).collect()[0]
    change_rows = int(stats["change_rows"] or 0)
    total_groups = int(stats["groups"] or 0)
    recomputed = int(stats["recomputed"] or 0)
    decided = decided.where(F.col(ROWS) > 0).drop(ROWS, ALL_ROWS)
    source = decided.where(~F.col(RECOMPUTE)).drop(RECOMPUTE)
    if recomputed:  # the base at v, restricted to those groups, read once
        fresh = _recomputed(scope, query, plan, join_keys, decided, base_at_v, mv.schema, groups_at_v)
        source = scope.in_memory(source.unionByName(fresh))
    mv_keys = [(m, m) for _, m in join_keys]
    others = [f.name for f in mv.schema.fields if f.name not in {m for _, m in join_keys}]
    merge = MergeSpec(
        source=source,
        condition=null_safe("t", "s", mv_keys),
        delete_when=F.col(f"s.{OP}") == "delete",
        update_set={q(c): col("s", c) for c in others},
        insert_when=F.col(f"s.{OP}") == "upsert",
        insert_values={q(f.name): col("s", f.name) for f in mv.schema.fields},
    )
    summary = f"{total_groups} groups changed, {recomputed} recomputed from the base"
    return Change("keyed merge", change_rows, summary, merge=merge)


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
    elif not join_keys:  # a global aggregate: its single row, over the whole base
        assert base_at_v is not None
        return scope.run_query(query, plan.base_table, base_at_v).withColumn(OP, F.lit("upsert"))
    else:
        assert base_at_v is not None
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
