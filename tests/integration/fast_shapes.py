"""What the FAST property tests generate: MV query shapes, and change streams on their base table.

Pure (no Spark): hypothesis strategies, the operations of a change stream, and a model of the base
table that turns each operation into one Delta commit (SQL text or rows to append). The model only
aims the operations (which ids hold the current MIN, which rows exist); the tests never trust it for
the expected MV content — that is always the query run by Spark over the base at the MV's watermark.

Shapes are the ones FAST supports today:

* projection/filter: ``SELECT <columns/expressions> FROM t [WHERE p]`` (without ``id`` the MV holds
  duplicate rows);
* aggregate: ``SELECT <keys and aggregates, any order> FROM t [WHERE p] [GROUP BY k1 | k2 | k1, k2]``
  with COUNT(*), COUNT(1), COUNT(col), SUM, AVG, MIN, MAX over NULL-able BIGINT, DECIMAL, DOUBLE (and
  a STRING for MIN/MAX);
* either over an inner equi-join of two or three bases of the same schema (``{t0} a JOIN {t1} b ON
  a.k1 = b.k1 …``; ``Shape.bases`` > 1): keys with NULLs and few values, so rows join many-to-many
  and NULL keys are always there to (not) match. Their streams name the base of each operation
  (``On``), one model per base.

UNION ALL (issue 10, item 2) is not FAST-eligible yet.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from hypothesis import strategies as st

SCHEMA = "id bigint, k1 string, k2 int, v bigint, d decimal(10,2), x double"
VALUE_COLUMNS = ("k1", "k2", "v", "d", "x")
Values = tuple[Any, ...]  # one value per VALUE_COLUMNS (the id is assigned by the model)

# Small domains: groups collide, MIN/MAX tie, and NULL is always a candidate.
DOMAINS: dict[str, st.SearchStrategy[Any]] = {
    "k1": st.sampled_from(["a", "b", "c", None]),
    "k2": st.sampled_from([0, 1, None]),
    "v": st.one_of(st.none(), st.integers(-4, 6)),
    "d": st.one_of(
        st.none(), st.sampled_from([Decimal(t) for t in ("-2.50", "0.00", "1.25", "3.10", "99.99")])
    ),
    # Non-dyadic values too (0.1, 2/3): sums differ in the last bits with the order of addition.
    "x": st.one_of(st.none(), st.sampled_from([0.0, 0.1, 0.25, -1.5, 2 / 3, 1000.0, -7.75])),
}
VALUES: st.SearchStrategy[Values] = st.tuples(*(DOMAINS[c] for c in VALUE_COLUMNS))
K1 = DOMAINS["k1"]


# ---------------------------------------------------------------------------------------------- shapes


@dataclass(frozen=True)
class Shape:
    """One MV query; ``template`` reads its base table as ``{t}``, or its ``bases`` as ``{t0}``, ``{t1}``…"""

    kind: str  # projection | aggregate | join_projection | join_aggregate (the FastRefreshPlan kind)
    template: str
    bases: int = 1

    def sql(self, *bases: str) -> str:
        return self.template.format(t=bases[0], **{f"t{i}": base for i, base in enumerate(bases)})


# Filters, with ``{q}`` for the optional table alias qualifier ("s." or "").
FILTERS = (
    None,
    "{q}v > 0",
    "{q}k1 IS NULL OR {q}x >= 0",
    "{q}d <> 0 AND {q}k2 = 1",
    "{q}v IS NOT NULL",
)
PROJECTED = (
    "id",
    "k1",
    "k2",
    "v",
    "d",
    "x",
    "v * 2 AS v2",
    "d + 1 AS d1",
    "x / 4 AS x4",
    "coalesce(k1, 'none') AS k1n",
)
GROUPINGS: tuple[tuple[str, ...], ...] = ((), ("k1",), ("k2",), ("k1", "k2"))
AGGREGATES = (
    "COUNT(*) AS n",
    "COUNT(1) AS n1",
    "COUNT(v) AS n_v",
    "COUNT(d) AS n_d",
    "COUNT(x) AS n_x",
    "SUM(v) AS s_v",
    "SUM(d) AS s_d",
    "SUM(x) AS s_x",
    "AVG(v) AS a_v",
    "AVG(d) AS a_d",
    "AVG(x) AS a_x",
    "MIN(v) AS lo_v",
    "MAX(v) AS hi_v",
    "MIN(d) AS lo_d",
    "MAX(d) AS hi_d",
    "MIN(x) AS lo_x",
    "MAX(x) AS hi_x",
    "MAX(k1) AS hi_k1",
)


def _query(items: list[str], where: str | None, aliased: bool, group_by: tuple[str, ...] = ()) -> str:
    source = "{t} s" if aliased else "{t}"
    text = f"SELECT {', '.join(items)} FROM {source}"
    if where is not None:
        text += " WHERE " + where.replace("{q}", "s." if aliased else "")
    if group_by:
        text += " GROUP BY " + ", ".join(group_by)
    return text


@st.composite
def projections(draw: st.DrawFn) -> Shape:
    items = draw(st.lists(st.sampled_from(PROJECTED), min_size=1, max_size=4, unique=True))
    return Shape("projection", _query(items, draw(st.sampled_from(FILTERS)), draw(st.booleans())))


@st.composite
def aggregates(draw: st.DrawFn) -> Shape:
    group_by = draw(st.sampled_from(GROUPINGS))
    chosen = draw(st.lists(st.sampled_from(AGGREGATES), min_size=1, max_size=5, unique=True))
    items = draw(st.permutations([*group_by, *chosen]))  # keys need not come first
    where = draw(st.sampled_from(FILTERS))
    return Shape("aggregate", _query(items, where, draw(st.booleans()), group_by))


# ------------------------------------------------ helper-state shapes (issue 10, item 1: helper state)
# AVG, SUM of doubles and COUNT(col), with no COUNT(*) (a vanished group shows only in the state) and
# no MIN/MAX: refreshed from the MV's helper state alone, so a run never reads the base
# (``fast_checks.reads_no_base``).
STATE_AGGREGATES = (
    "AVG(v) AS a_v",
    "AVG(d) AS a_d",
    "AVG(x) AS a_x",
    "SUM(x) AS s_x",
    "SUM(v) AS s_v",
    "SUM(d) AS s_d",
    "COUNT(x) AS n_x",
    "COUNT(v) AS n_v",
)


@st.composite
def state_aggregates(draw: st.DrawFn) -> Shape:
    group_by = draw(st.sampled_from(GROUPINGS))
    chosen = draw(st.lists(st.sampled_from(STATE_AGGREGATES), min_size=1, max_size=4, unique=True))
    items = draw(st.permutations([*group_by, *chosen]))
    where = draw(st.sampled_from(FILTERS))
    return Shape("aggregate", _query(items, where, draw(st.booleans()), group_by))


# ---------------------------------------------------------------------------- end of helper-state shapes

SHAPES: st.SearchStrategy[Shape] = st.one_of(projections(), aggregates(), state_aggregates())

# Joins: every base has SCHEMA; ``a``/``b``/``c`` are {t0}/{t1}/{t2}.
JOINS = {
    2: (
        "{t0} a JOIN {t1} b ON a.k1 = b.k1",
        "{t0} a JOIN {t1} b ON a.k2 = b.k2 AND b.k1 = a.k1",
        "{t0} a INNER JOIN {t1} b USING (k2)",
    ),
    3: (
        "{t0} a JOIN {t1} b ON a.k1 = b.k1 JOIN {t2} c ON b.k2 = c.k2",
        "{t0} a JOIN {t1} b ON a.k2 = b.k2 JOIN {t2} c ON c.k1 = a.k1",
    ),
}
JOIN_FILTERS = (None, "a.v > b.v", "b.k2 = 1 OR a.x >= 0", "a.d IS NOT NULL AND b.v IS NOT NULL")
JOIN_PROJECTED = (
    "a.id",
    "b.id AS b_id",
    "a.k1",
    "b.k2",
    "a.v",
    "b.d",
    "a.x + b.x AS xx",
    "coalesce(b.k1, 'none') AS bk1",
)
# Group keys (as selected: ``a.k2`` is renamed, else two columns would be named k2).
JOIN_KEYS = {"a.k1": "a.k1", "b.k2": "b.k2", "a.k2": "a.k2 AS ak2", "b.k1": "b.k1 AS bk1"}
JOIN_GROUPINGS: tuple[tuple[str, ...], ...] = ((), ("b.k2",), ("a.k1",), ("a.k2", "b.k2"), ("b.k1",))
JOIN_AGGREGATES = (
    "COUNT(*) AS n",
    "COUNT(b.v) AS n_bv",
    "SUM(a.v) AS s_v",
    "SUM(b.d) AS s_d",
    "SUM(a.x) AS s_x",
    "AVG(b.v) AS a_bv",
    "MIN(a.v) AS lo_v",
    "MAX(b.x) AS hi_bx",
    "MIN(b.d) AS lo_d",
)


def _join_query(items: list[str], source: str, where: str | None, group_by: tuple[str, ...] = ()) -> str:
    text = f"SELECT {', '.join(items)} FROM {source}"
    if where is not None:
        text += f" WHERE {where}"
    if group_by:
        text += " GROUP BY " + ", ".join(group_by)
    return text


def join_shapes(bases: int) -> st.SearchStrategy[Shape]:
    """Projections and aggregates over a join of ``bases`` tables."""

    @st.composite
    def projection(draw: st.DrawFn) -> Shape:
        items = draw(st.lists(st.sampled_from(JOIN_PROJECTED), min_size=1, max_size=4, unique=True))
        source, where = draw(st.sampled_from(JOINS[bases])), draw(st.sampled_from(JOIN_FILTERS))
        return Shape("join_projection", _join_query(items, source, where), bases)

    @st.composite
    def aggregate(draw: st.DrawFn) -> Shape:
        group_by = draw(st.sampled_from(JOIN_GROUPINGS))
        chosen = draw(st.lists(st.sampled_from(JOIN_AGGREGATES), min_size=1, max_size=4, unique=True))
        items = draw(st.permutations([*(JOIN_KEYS[k] for k in group_by), *chosen]))
        source, where = draw(st.sampled_from(JOINS[bases])), draw(st.sampled_from(JOIN_FILTERS))
        return Shape("join_aggregate", _join_query(items, source, where, group_by), bases)

    return st.one_of(projection(), aggregate())


# ------------------------------------------------------------------------------------ change streams


@dataclass(frozen=True)
class Insert:
    """New rows, plus exact copies (same id) of rows picked by ``copies`` (existing or new)."""

    rows: tuple[Values, ...]
    copies: tuple[int, ...] = ()


@dataclass(frozen=True)
class Delete:
    """Delete one row (every copy of it)."""

    pick: int


@dataclass(frozen=True)
class DeleteGroup:
    """Delete every row whose k1 is ``k1`` (NULL-safe): the group vanishes."""

    k1: str | None


@dataclass(frozen=True)
class DeleteExtreme:
    """Delete the rows holding the current MIN/MAX of ``column``, in k1's group or the whole table."""

    function: str  # MIN | MAX
    column: str
    k1: str | None
    whole_table: bool = False


@dataclass(frozen=True)
class Update:
    """Set some columns of one row (a new k1/k2 moves it to another group)."""

    pick: int
    values: tuple[tuple[str, Any], ...]


@dataclass(frozen=True)
class MoveGroup:
    """``UPDATE SET k1 = target WHERE k1 <=> source``: a whole group moves into another."""

    source: str | None
    target: str | None


@dataclass(frozen=True)
class Bump:
    """``UPDATE SET v = v + by WHERE k2 <=> k2``: values shift, MIN/MAX change hands."""

    k2: int | None
    by: int


@dataclass(frozen=True)
class DeleteAll:
    pass


@dataclass(frozen=True)
class Purge:
    """Purge the MV log below the MVs' watermark, as the product's purge task does (no base commit)."""


Op = Insert | Delete | DeleteGroup | DeleteExtreme | Update | MoveGroup | Bump | DeleteAll | Purge


@dataclass(frozen=True)
class On:
    """``op`` on base number ``base`` (``{t0}``, ``{t1}``…); a bare operation is on base 0."""

    base: int
    op: Op


@dataclass(frozen=True)
class Stream:
    """The bases' first rows (base 0's, then ``others``), then rounds: each round is some operations,
    then every MV refreshes."""

    initial: Insert
    rounds: tuple[tuple[Op | On, ...], ...]
    others: tuple[Insert, ...] = ()


def _updates(draw: st.DrawFn) -> tuple[tuple[str, Any], ...]:
    columns = draw(st.lists(st.sampled_from(VALUE_COLUMNS), min_size=1, max_size=3, unique=True))
    return tuple((c, draw(DOMAINS[c])) for c in columns)


PICK = st.integers(0, 50)
INSERTS = st.builds(Insert, st.lists(VALUES, max_size=4).map(tuple), st.lists(PICK, max_size=2).map(tuple))
OPS: st.SearchStrategy[Op] = st.one_of(
    INSERTS,
    st.builds(Delete, PICK),
    st.builds(DeleteGroup, K1),
    st.builds(
        DeleteExtreme,
        st.sampled_from(["MIN", "MAX"]),
        st.sampled_from(["v", "d", "x"]),
        K1,
        st.booleans(),
    ),
    st.composite(lambda draw: Update(draw(PICK), _updates(draw)))(),
    st.builds(MoveGroup, K1, K1),
    st.builds(Bump, DOMAINS["k2"], st.integers(-3, 3)),
    st.just(DeleteAll()),
    st.just(Purge()),
)


FIRST = st.builds(Insert, st.lists(VALUES, max_size=8).map(tuple), st.lists(PICK, max_size=2).map(tuple))


def streams(max_rounds: int, bases: int = 1) -> st.SearchStrategy[Stream]:
    """Up to 8 first rows per base, then 1..``max_rounds`` rounds of 1..5 operations (on any base)."""
    ops: st.SearchStrategy[Op | On] = OPS if bases == 1 else st.builds(On, st.integers(0, bases - 1), OPS)
    rounds = st.lists(st.lists(ops, min_size=1, max_size=5).map(tuple), min_size=1, max_size=max_rounds)
    others = st.tuples(*[FIRST] * (bases - 1))
    return st.builds(Stream, FIRST, rounds.map(tuple), others)


# ------------------------------------------------------------------------------------ the base model


def literal(value: Any) -> str:
    """``value`` as Spark SQL (doubles and decimals round-trip through a string cast)."""
    if value is None:
        return "NULL"
    if isinstance(value, str):
        return "'" + value.replace("'", "''") + "'"
    if isinstance(value, Decimal):
        return f"CAST('{value}' AS DECIMAL(10,2))"
    if isinstance(value, float):
        return f"CAST('{value!r}' AS DOUBLE)"
    return str(int(value))


@dataclass(frozen=True)
class Commit:
    """One Delta commit on the base: rows to append, or a statement over ``{t}`` (the table)."""

    rows: tuple[dict[str, Any], ...] = ()
    statement: str | None = None


class BaseModel:
    """The base table's rows as the operations leave them (to aim the next operations)."""

    def __init__(self) -> None:
        self.rows: list[dict[str, Any]] = []
        self._next_id = 0

    def commit_for(self, op: Op) -> Commit | None:
        """The commit that applies ``op`` (None: ``op`` commits nothing to the base), applied here too."""
        if isinstance(op, Purge):
            return None
        if isinstance(op, Insert):
            return self._insert(op)
        if isinstance(op, Update | Bump | MoveGroup):
            return self._update(op)
        doomed = self._doomed(op)
        ids = sorted({r["id"] for r in self.rows if doomed(r)})
        self.rows = [r for r in self.rows if not doomed(r)]
        if isinstance(op, DeleteAll):
            return Commit(statement="DELETE FROM {t}")
        if isinstance(op, DeleteGroup):
            return Commit(statement=f"DELETE FROM {{t}} WHERE k1 <=> {literal(op.k1)}")
        where = f"id IN ({', '.join(map(str, ids))})" if ids else "FALSE"  # FALSE: an empty DELETE
        return Commit(statement=f"DELETE FROM {{t}} WHERE {where}")

    def _insert(self, op: Insert) -> Commit:
        fresh = []
        for values in op.rows:
            fresh.append({"id": self._next_id, **dict(zip(VALUE_COLUMNS, values, strict=True))})
            self._next_id += 1
        pool = [*self.rows, *fresh]  # a copy of a row of this very commit is a duplicate too
        copies = [dict(pool[p % len(pool)]) for p in op.copies] if pool else []
        self.rows.extend([*fresh, *copies])
        return Commit(rows=tuple(fresh + copies))

    def _picked(self, pick: int) -> int | None:
        ids = sorted({r["id"] for r in self.rows})
        return ids[pick % len(ids)] if ids else None

    def _doomed(self, op: Op) -> Callable[[dict[str, Any]], bool]:
        if isinstance(op, DeleteAll):
            return lambda r: True
        if isinstance(op, DeleteGroup):
            return lambda r: r["k1"] == op.k1
        if isinstance(op, Delete):
            picked = self._picked(op.pick)
            return lambda r: r["id"] == picked
        assert isinstance(op, DeleteExtreme)
        scope = [r for r in self.rows if op.whole_table or r["k1"] == op.k1]
        present = [r[op.column] for r in scope if r[op.column] is not None]
        if not present:
            return lambda r: False
        extreme = min(present) if op.function == "MIN" else max(present)
        ids = {r["id"] for r in scope if r[op.column] == extreme}
        return lambda r: r["id"] in ids

    def _update(self, op: Update | Bump | MoveGroup) -> Commit:
        if isinstance(op, MoveGroup):
            for r in self.rows:
                if r["k1"] == op.source:
                    r["k1"] = op.target
            where = f"k1 <=> {literal(op.source)}"
            return Commit(statement=f"UPDATE {{t}} SET k1 = {literal(op.target)} WHERE {where}")
        if isinstance(op, Bump):
            for r in self.rows:
                if r["k2"] == op.k2 and r["v"] is not None:
                    r["v"] += op.by
            sets = f"v = v + {op.by}"
            return Commit(statement=f"UPDATE {{t}} SET {sets} WHERE k2 <=> {literal(op.k2)}")
        picked = self._picked(op.pick)
        for r in self.rows:
            if r["id"] == picked:
                r.update(op.values)
        sets = ", ".join(f"{c} = {literal(v)}" for c, v in op.values)
        return Commit(statement=f"UPDATE {{t}} SET {sets} WHERE id <=> {literal(picked)}")
