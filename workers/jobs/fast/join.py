"""FAST refresh of an MV over an inner equi-join of several base tables: the delta rules of a join.

Each base ``T_i`` is read at its old version (the MV's watermark) and its new one (pinned by the run),
and ``ΔT_i`` are its change rows in between, signed (insert/postimage +1, delete/preimage -1). A join
is linear in each input over signed bags, so, exactly (duplicates and NULL keys included):

    Δ(T_1 ⋈ … ⋈ T_n) = Σ_i  T_1' ⋈ … ⋈ T_{i-1}' ⋈ ΔT_i ⋈ T_{i+1} ⋈ … ⋈ T_n      (T' = new version)

Each term is run as the MV query itself (a projection) or the query's own ``FROM … WHERE`` text with
the columns its keys and aggregates read (an aggregate), over temp views named like the bases and
bound to ``ΔT_i``'s insert or delete rows and the other bases at their versions: expressions, join
semantics and types are the complete refresh's. A base without changes in the range adds no term.
The signed rows then go through the one-table machinery (``workers.jobs.fast.apply``): append
when every changed base only appended, else the rewrite merge; an aggregate's keyed merge, whose
groups to recompute are the query over the bases at their new versions, narrowed to those groups.
With HAVING (``join_aggregate_having``), every group the joined change rows reach is recomputed that
way (``workers.jobs.fast.having``).

Cost: ``ΔT_i`` is read once and held (``Scope.in_memory``). A base joined to ``T_i`` by a key equality
is read narrowed to the keys ``ΔT_i`` holds: a filter on their values when there are at most
``KEY_FILTER_LIMIT`` (Delta skips files by their min/max statistics), else a semi-join with them
(broadcast). Bases further away are joined as the query says.
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from functools import reduce

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from workers.ddl.plan import FastRefreshPlan
from workers.jobs.changes.mvlog import CHANGE_COLUMNS
from workers.jobs.changes.reads import Changes
from workers.jobs.complete import run_query
from workers.jobs.delta import files
from workers.jobs.delta.key_filter import among, key_ranges, narrowed_by_values
from workers.jobs.fast import append as incremental_append
from workers.jobs.fast import apply
from workers.jobs.fast.aggregate.inputs import InputAtV
from workers.jobs.request import RunRequest
from workers.jobs.spark.columns import col, q

# The most distinct key values pushed into a read as a filter; more are ranges of them instead
# (``key_ranges``: at most ``KEY_RANGES``, when their type is ordered and there are at most
# ``RANGE_KEYS_LIMIT`` key rows), else a semi-join with them.
KEY_FILTER_LIMIT = 1000
KEY_RANGES = 32
RANGE_KEYS_LIMIT = 100_000
_CHANGE_COLUMNS = CHANGE_COLUMNS.names
_KEY = "__mvs_key"  # a helper column (incremental_apply's prefix): never reaches the MV
# A term's change rows' ``_change_type``, under a name no base has (``signed_delta``).
CHANGE_TYPE = "__mvs_change_type"

Ranges = Mapping[str, tuple[int, int]]
Tables = dict[str, DataFrame]


@dataclass(frozen=True)
class _Bases:
    """The change rows of every base that changed, and for each of those the other bases as its term
    joins them (``_term_tables``); whether all change rows came from another MV's read."""

    deltas: dict[str, DataFrame]
    others: dict[str, Tables]
    new: Tables
    shared: bool


def _bases(scope: apply.Scope, plan: FastRefreshPlan, ranges: Ranges) -> _Bases:
    scope.views.update(plan.base_tables)
    old, new, whole = scope.bases_at(ranges)
    changed = [b for b in plan.base_tables if ranges[b][0] < ranges[b][1]]
    reads = {b: scope.changes(b, *ranges[b]) for b in changed}
    shared = bool(reads) and all(read.shared for read in reads.values())
    deltas = {b: read.frame for b, read in reads.items()}
    scope.step(apply.COMPUTE_STEP)
    return _Bases(deltas, _term_tables(plan, reads, old, new, set(whole)), new, shared)


def _term_tables(
    plan: FastRefreshPlan, reads: Mapping[str, Changes], old: Tables, new: Tables, whole: set[str]
) -> dict[str, Tables]:
    """For each changed base ``T_i``: the bases before it at new, after it at old, each joined to it by
    a key equality narrowed to the keys ``ΔT_i`` holds (once for both signs of its term). An unchanged
    base held whole on the driver (``whole``: small, read by ``Scope.bases_at``, no Delta
    snapshot or scan job per term) is narrowed only by a list of values (no semi-join job for it)."""
    found: dict[str, Tables] = {}
    for i, base in enumerate(plan.base_tables):
        if base not in reads:
            continue
        delta, rows = reads[base].frame, reads[base].rows
        tables = {b: (new if j < i else old)[b] for j, b in enumerate(plan.base_tables) if b != base}
        for key in plan.join_keys:  # the other side of each of base's key equalities, narrowed
            for mine, (other, column) in (
                ((key.left_table, key.left_column), (key.right_table, key.right_column)),
                ((key.right_table, key.right_column), (key.left_table, key.left_column)),
            ):
                if mine[0] == base and other != base:
                    small = other in whole
                    tables[other] = narrowed(
                        tables[other], column, delta, mine[1], nulls=False, held=small, rows=rows
                    )
        found[base] = tables
    return found


def join_change(
    scope: apply.Scope, request: RunRequest, plan: FastRefreshPlan, ranges: Ranges
) -> tuple[apply.Change, bool]:
    """What the run commits for a join projection, by the cheapest exact way (``apply.Change``), and
    whether every base's change rows came from another MV's read (``workers.jobs.changes.reads``).
    (A join aggregate's rows are ``joined_inputs``.)"""
    session, settings = scope.session, scope.settings
    bases = _bases(scope, plan, ranges)
    changed = list(bases.deltas)
    query = request.query

    def rows(tables: Tables) -> DataFrame:
        return run_query(session, settings, query, tables, mv_name=request.mv_name)

    inserted = [incremental_append.inserted_rows(session, settings, b, *ranges[b]) for b in changed]
    if all(n is not None for n in inserted):  # only appends: only gained rows, appended
        gained = _terms(bases, apply.INSERT_TYPES, rows)
        total = sum(n or 0 for n in inserted)
        return apply.Change("append", total, f"{total} rows inserted", appended=gained), bases.shared
    outputs = (
        _terms(bases, apply.INSERT_TYPES, rows),
        _terms(bases, apply.DELETE_TYPES, rows),
    )
    counted = reduce(DataFrame.unionByName, [d.select("_change_type") for d in bases.deltas.values()])
    mv = scope.mv_frame()
    change = apply.projection_change(scope, query, plan.base_table, counted, mv, outputs=outputs)
    return change, bases.shared


def _terms(bases: _Bases, change_types: tuple[str, ...], rows: Callable[[Tables], DataFrame]) -> DataFrame:
    """Σ_i rows(bases before i at new, ΔT_i's rows of ``change_types``, bases after i at old)."""
    terms = []
    for base, tables in bases.others.items():
        delta = bases.deltas[base]
        mine_rows = delta.where(F.col("_change_type").isin(*change_types)).drop(*_CHANGE_COLUMNS)
        terms.append(rows({**tables, base: mine_rows}))
    return reduce(DataFrame.unionByName, terms)


def signed_delta(delta: DataFrame) -> DataFrame:
    """``ΔT_i``'s rows of both signs as a term's input: their change type kept as ``CHANGE_TYPE`` (no
    base has that column, so the term's query can select it unqualified), the other CDF columns
    dropped."""
    return delta.withColumnRenamed("_change_type", CHANGE_TYPE).drop(*_CHANGE_COLUMNS)


def _signed_terms(bases: _Bases, rows: Callable[[Tables], DataFrame]) -> DataFrame:
    """Σ_i rows(bases before i at new, ΔT_i's rows of both signs, bases after i at old): one query
    per changed base, so each term reads the other bases once, not once per sign."""
    terms = [
        rows({**tables, base: signed_delta(bases.deltas[base])}) for base, tables in bases.others.items()
    ]
    return reduce(DataFrame.unionByName, terms).drop(CHANGE_TYPE)


@dataclass(frozen=True)
class JoinedInputs:
    """A join aggregate's change as rows of the join: ``rows`` holds the columns its keys and
    aggregates read (named like ``plan.inputs``), signed by ``_change_type``, the WHERE applied (so
    ``plan`` has none); ``at_v`` is the join at the bases' new versions (the inputs' query over all of
    them, and its groups recomputed by the MV query: ``InputAtV``); ``mv`` is the snapshot MERGE will
    use; ``shared``: every base's change rows came from another MV's read."""

    plan: FastRefreshPlan
    rows: DataFrame
    at_v: InputAtV
    mv: DataFrame
    shared: bool


def joined_inputs(
    scope: apply.Scope, request: RunRequest, plan: FastRefreshPlan, ranges: Ranges
) -> JoinedInputs:
    """The joined change rows of a join aggregate (any ``join_aggregate*`` plan) and its input at the
    bases' new versions."""
    session, settings = scope.session, scope.settings
    bases = _bases(scope, plan, ranges)
    mv = scope.mv_frame()
    assert plan.source is not None
    columns = [f"{i.sql} AS {q(i.name)}" for i in plan.inputs] or [f"TRUE AS {q(_KEY)}"]
    inputs_sql = f"SELECT {', '.join(columns)} {plan.source}"

    signed_sql = f"SELECT {', '.join(columns)}, {q(CHANGE_TYPE)} AS _change_type {plan.source}"

    def signed_inputs(tables: Tables) -> DataFrame:
        return run_query(session, settings, signed_sql, tables, mv_name=request.mv_name)

    new = bases.new
    joined = _signed_terms(bases, signed_inputs)
    inputs = {i.name: i for i in plan.inputs}

    def groups_at_v(wanted: DataFrame | None) -> DataFrame:
        tables = dict(new)
        if wanted is not None:
            for name, key in zip(plan.group_by, wanted.columns, strict=True):
                found = inputs[name]
                if found.table:  # a qualified key: its base narrowed (NULL too)
                    tables[found.table] = narrowed(tables[found.table], found.column, wanted, key, nulls=True)
        return run_query(session, settings, request.query, tables, mv_name=request.mv_name)

    def rows_at_v() -> DataFrame:
        return run_query(session, settings, inputs_sql, dict(new), mv_name=request.mv_name)

    flat = replace(plan, where=None)  # the WHERE was applied by the inputs' query
    at_v = InputAtV(rows_at_v, groups_at_v, "the join's change rows", "the bases")
    return JoinedInputs(flat, joined, at_v, mv, bases.shared)


def narrowed(
    frame: DataFrame,
    column: str,
    keys: DataFrame,
    key: str,
    *,
    nulls: bool,
    held: bool = False,
    rows: int | None = None,
) -> DataFrame:
    """``frame``'s rows whose ``column`` equals a value of ``keys.key`` (NULL-safe when ``nulls``):
    a superset of the rows an equality with those keys can use, the only rows a term needs. A ``held``
    frame (on the driver, small) is narrowed by a list of values or not at all: a semi-join with many
    keys costs more jobs than it saves there. ``rows``: ``keys``' rows (or more), when known: past
    ``KEY_FILTER_LIMIT`` no list of values is collected (it could not be one), but up to
    ``RANGE_KEYS_LIMIT`` the values' ranges are (``key_ranges``: files skipped by their statistics,
    and no broadcast job; the term's own join matches exactly)."""
    wanted = keys.select(F.col(q(key)).alias(_KEY))
    if not nulls:
        wanted = wanted.where(F.col(_KEY).isNotNull())
    target = next((f for f in frame.schema.fields if f.name.lower() == column.lower()), None)
    if target is None:
        return frame  # not a column of the base (Spark resolves the query): nothing to narrow by
    same_type = wanted.schema[_KEY].dataType == target.dataType
    listed = same_type and rows is not None and rows <= RANGE_KEYS_LIMIT and not held
    values = [row[0] for row in wanted.collect()] if listed else None  # held keys: no job
    if values is not None and (read := files.read_within(frame, target.name, values, KEY_RANGES)) is not None:
        distinct = set(values)  # the list's values exactly, where it is short (else the term's join)
        return (
            read.where(among(q(target.name), distinct, target.dataType))
            if len(distinct) <= KEY_FILTER_LIMIT
            else read
        )
    found = narrowed_by_values(frame, [(target.name, _KEY)], wanted, KEY_FILTER_LIMIT, rows)
    if found is not None or held:
        return found if found is not None else frame
    if values is not None:
        spans = key_ranges(q(target.name), target.dataType, values, KEY_RANGES)
        if spans is not None:
            return frame.where(spans)
    return semi_joined(frame, wanted, [(target.name, _KEY)], nulls=nulls)


def semi_joined(
    frame: DataFrame, keys: DataFrame, pairs: Sequence[tuple[str, str]], *, nulls: bool = False
) -> DataFrame:
    """``frame``'s rows whose columns equal those of a row of ``keys`` (``pairs``: a column of
    ``frame``, a column of ``keys``; NULL-safely when ``nulls``): a semi-join with the distinct keys,
    broadcast."""
    wanted = keys.select(*[F.col(q(k)).alias(f"{_KEY}{i}") for i, (_, k) in enumerate(pairs)]).distinct()
    matches = [
        col("f", c).eqNullSafe(F.col(f"k.{_KEY}{i}")) if nulls else col("f", c) == F.col(f"k.{_KEY}{i}")
        for i, (c, _) in enumerate(pairs)
    ]
    return frame.alias("f").join(F.broadcast(wanted).alias("k"), reduce(operator.and_, matches), "left_semi")
