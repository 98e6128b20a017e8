"""FAST refresh of an MV over an inner equi-join of several base tables: the delta rules of a join.

Each base ``T_i`` is read at its old version (the MV's watermark) and its new one (pinned by the run),
and ``ΔT_i`` are its change rows in between, signed (insert/postimage +1, delete/preimage -1). A join
is linear in each input over signed bags, so, exactly (duplicates and NULL keys included):

    Δ(T_1 ⋈ … ⋈ T_n) = Σ_i  T_1' ⋈ … ⋈ T_{i-1}' ⋈ ΔT_i ⋈ T_{i+1} ⋈ … ⋈ T_n      (T' = new version)

Each term is run as the MV query itself (a projection) or the query's own ``FROM … WHERE`` text with
the columns its keys and aggregates read (an aggregate), over temp views named like the bases and
bound to ``ΔT_i``'s insert or delete rows and the other bases at their versions: expressions, join
semantics and types are the complete refresh's. A base without changes in the range adds no term.
The signed rows then go through the one-table machinery (``workers.jobs.incremental_apply``): append
when every changed base only appended, else the rewrite merge; an aggregate's keyed merge, whose
groups to recompute are the query over the bases at their new versions, narrowed to those groups.
With HAVING (``join_aggregate_having``), every group the joined change rows reach is recomputed that
way (``workers.jobs.incremental_having``).

Cost: ``ΔT_i`` is read once and held (``Scope.in_memory``). A base joined to ``T_i`` by a key equality
is read narrowed to the keys ``ΔT_i`` holds: a filter on their values when there are at most
``KEY_FILTER_LIMIT`` (Delta skips files by their min/max statistics), else a semi-join with them
(broadcast). Bases further away are joined as the query says.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from functools import reduce

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from workers import warehouse
from workers.ddl.plan import FastRefreshPlan
from workers.jobs import changes as change_rows
from workers.jobs import incremental_append, rs_arrow
from workers.jobs import incremental_apply as apply
from workers.jobs.columns import col, q
from workers.jobs.incremental_aggregate import GroupRecompute, aggregate_merge
from workers.jobs.key_filter import narrowed_by_values
from workers.jobs.refresh import read_at, run_query
from workers.worker.request import RunRequest

# The most distinct key values pushed into a read as a filter; more are a semi-join instead.
KEY_FILTER_LIMIT = 1000
_CHANGE_COLUMNS = ("_change_type", "_commit_version", "_commit_timestamp")
_KEY = "__mvs_key"  # a helper column (incremental_apply's prefix): never reaches the MV

Ranges = Mapping[str, tuple[int, int]]
Tables = dict[str, DataFrame]


@dataclass(frozen=True)
class _Bases:
    """Every base at its old and new version, the change rows of those that changed, and whether all
    of those came from another MV's read."""

    old: Tables
    new: Tables
    deltas: dict[str, DataFrame]
    shared: bool


def _bases(scope: apply.Scope, plan: FastRefreshPlan, ranges: Ranges) -> _Bases:
    session, settings = scope.session, scope.settings
    scope.views.update(plan.base_tables)
    old = {
        b: _unchanged(scope, b, s) if s == u else read_at(session, settings, b, s)
        for b, (s, u) in ranges.items()
    }
    new = {b: old[b] if s == u else read_at(session, settings, b, u) for b, (s, u) in ranges.items()}
    changed = [b for b in plan.base_tables if ranges[b][0] < ranges[b][1]]
    reads = {b: change_rows.read(session, settings, b, *ranges[b]) for b in changed}
    shared = bool(reads) and all(read.shared for read in reads.values())
    return _Bases(old, new, {b: read.frame for b, read in reads.items()}, shared)


def _unchanged(scope: apply.Scope, base: str, version: int) -> DataFrame:
    """A base without changes in the range, at ``version``: held whole if delta-rs may read it (small,
    ``rs_arrow.read_small``: no Delta snapshot or scan job for each term's read), else Spark's read."""
    held = rs_arrow.read_small(scope.session, scope.settings, base, version)
    return held if held is not None else read_at(scope.session, scope.settings, base, version)


def join_change(
    scope: apply.Scope, request: RunRequest, plan: FastRefreshPlan, ranges: Ranges
) -> tuple[apply.Change, bool]:
    """What the run commits for a join projection or aggregate, by the cheapest exact way
    (``apply.Change``), and whether every base's change rows came from another MV's read
    (``workers.jobs.changes``)."""
    if plan.kind == "join_aggregate":
        joined = joined_inputs(scope, request, plan, ranges)
        change = aggregate_merge(
            scope, request.query, joined.plan, joined.rows, joined.mv, None, groups_at_v=joined.groups_at_v
        )
        return change, joined.shared
    session, settings = scope.session, scope.settings
    bases = _bases(scope, plan, ranges)
    deltas, old, new = bases.deltas, bases.old, bases.new
    changed = list(deltas)
    query = request.query

    def rows(tables: Tables) -> DataFrame:
        return run_query(session, settings, query, tables, mv_name=request.mv_name)

    inserted = [incremental_append.inserted_rows(session, settings, b, *ranges[b]) for b in changed]
    if all(n is not None for n in inserted):  # only appends: only gained rows, appended
        gained = _terms(plan, deltas, old, new, apply.INSERT_TYPES, rows)
        total = sum(n or 0 for n in inserted)
        return apply.Change("append", total, f"{total} rows inserted", appended=gained), bases.shared
    outputs = (
        _terms(plan, deltas, old, new, apply.INSERT_TYPES, rows),
        _terms(plan, deltas, old, new, apply.DELETE_TYPES, rows),
    )
    counted = reduce(DataFrame.unionByName, [d.select("_change_type") for d in deltas.values()])
    path = warehouse.table_path(settings, request.mv_name)
    mv = session.read.format("delta").load(path)  # the snapshot MERGE will use (as for one base)
    change = apply.projection_change(scope, query, plan.base_table, counted, mv, outputs=outputs)
    return change, bases.shared


def _terms(
    plan: FastRefreshPlan,
    deltas: Mapping[str, DataFrame],
    old: Tables,
    new: Tables,
    change_types: tuple[str, ...],
    rows: Callable[[Tables], DataFrame],
) -> DataFrame:
    """Σ_i rows(bases before i at new, ΔT_i's rows of ``change_types``, bases after i at old)."""
    terms = []
    for i, base in enumerate(plan.base_tables):
        if base not in deltas:
            continue
        delta = deltas[base]
        tables = {b: (new if j < i else old)[b] for j, b in enumerate(plan.base_tables) if b != base}
        for key in plan.join_keys:  # the other side of each of base's key equalities, narrowed
            for mine, (other, column) in (
                ((key.left_table, key.left_column), (key.right_table, key.right_column)),
                ((key.right_table, key.right_column), (key.left_table, key.left_column)),
            ):
                if mine[0] == base and other != base:
                    tables[other] = narrowed(tables[other], column, delta, mine[1], nulls=False)
        mine_rows = delta.where(F.col("_change_type").isin(*change_types)).drop(*_CHANGE_COLUMNS)
        terms.append(rows({**tables, base: mine_rows}))
    return reduce(DataFrame.unionByName, terms)


@dataclass(frozen=True)
class JoinedInputs:
    """A join aggregate's change as rows of the join: ``rows`` holds the columns its keys and
    aggregates read (named like ``plan.inputs``), signed by ``_change_type``, the WHERE applied (so
    ``plan`` has none); ``groups_at_v`` recomputes groups over the bases at their new versions; ``mv``
    is the snapshot MERGE will use; ``shared``: every base's change rows came from another MV's read."""

    plan: FastRefreshPlan
    rows: DataFrame
    groups_at_v: GroupRecompute
    mv: DataFrame
    shared: bool


def joined_inputs(
    scope: apply.Scope, request: RunRequest, plan: FastRefreshPlan, ranges: Ranges
) -> JoinedInputs:
    """The joined change rows of a join aggregate (any ``join_aggregate*`` plan) and how to recompute
    its groups."""
    session, settings = scope.session, scope.settings
    bases = _bases(scope, plan, ranges)
    mv = session.read.format("delta").load(warehouse.table_path(settings, request.mv_name))
    assert plan.source is not None
    columns = [f"{i.sql} AS {q(i.name)}" for i in plan.inputs] or [f"TRUE AS {q(_KEY)}"]
    inputs_sql = f"SELECT {', '.join(columns)} {plan.source}"

    def signed_inputs(kind: str) -> Callable[[Tables], DataFrame]:
        def rows(tables: Tables) -> DataFrame:
            found = run_query(session, settings, inputs_sql, tables, mv_name=request.mv_name)
            return found.withColumn("_change_type", F.lit(kind))

        return rows

    deltas, old, new = bases.deltas, bases.old, bases.new
    joined = _terms(plan, deltas, old, new, apply.INSERT_TYPES, signed_inputs("insert")).unionByName(
        _terms(plan, deltas, old, new, apply.DELETE_TYPES, signed_inputs("delete"))
    )
    # The MV key column of each GROUP BY input (the planner names keys by their input).
    keys = dict(zip(plan.group_by, apply.group_columns(plan, mv.schema), strict=True))
    inputs = {i.name: i for i in plan.inputs}

    def groups_at_v(wanted: DataFrame | None) -> DataFrame:
        tables = dict(new)
        for name in plan.group_by:
            found = inputs[name]
            if wanted is not None and found.table:  # a qualified key: its base narrowed (NULL too)
                tables[found.table] = narrowed(
                    tables[found.table], found.column, wanted, keys[name], nulls=True
                )
        return run_query(session, settings, request.query, tables, mv_name=request.mv_name)

    flat = replace(plan, where=None)  # the WHERE was applied by the inputs' query
    return JoinedInputs(flat, joined, groups_at_v, mv, bases.shared)


def narrowed(frame: DataFrame, column: str, keys: DataFrame, key: str, *, nulls: bool) -> DataFrame:
    """``frame``'s rows whose ``column`` equals a value of ``keys.key`` (NULL-safe when ``nulls``):
    a superset of the rows an equality with those keys can use, the only rows a term needs."""
    wanted = keys.select(F.col(q(key)).alias(_KEY))
    if not nulls:
        wanted = wanted.where(F.col(_KEY).isNotNull())
    target = next((f for f in frame.schema.fields if f.name.lower() == column.lower()), None)
    if target is None:
        return frame  # not a column of the base (Spark resolves the query): nothing to narrow by
    found = narrowed_by_values(frame, [(target.name, _KEY)], wanted, KEY_FILTER_LIMIT)
    if found is not None:
        return found
    same = col("f", target.name).eqNullSafe if nulls else col("f", target.name).__eq__
    condition = same(F.col(f"k.{_KEY}"))
    return frame.alias("f").join(F.broadcast(wanted.distinct()).alias("k"), condition, "left_semi")
