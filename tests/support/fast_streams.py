"""Change streams for the FAST property tests (``fast_shapes`` has the MV shapes): the operations of a
stream, their hypothesis strategies, and a model of a base table that turns each into one Delta commit.

Pure (no Spark). The model only aims the operations (which ids hold the current MIN, which rows
exist); the expected MV content is always the query run by Spark over the base at the watermark.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from hypothesis import strategies as st

from tests.support.fast_shapes import DOMAINS, K1, VALUE_COLUMNS, VALUES, Values

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


@dataclass(frozen=True)
class Recompute:
    """A complete refresh of every MV at the bases' latest versions (REFRESH COMPLETE, or FORCE
    recomputing by cost), each checked; no base commit. It writes no helper state: the next FAST
    run of an aggregate catches its state up from before it (``StateStore.origin``), or rebuilds it."""


Op = Insert | Delete | DeleteGroup | DeleteExtreme | Update | MoveGroup | Bump | DeleteAll | Purge | Recompute


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
    st.just(Recompute()),
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
        if isinstance(op, Purge | Recompute):
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
