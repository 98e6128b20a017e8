"""What the FAST property tests generate: MV query shapes over bases of one schema, and the values
their rows hold (the change streams on those bases are ``fast_streams``). Pure (no Spark).

Shapes are the ones FAST supports today:

* projection/filter: ``SELECT <columns/expressions> FROM t [WHERE p]`` (without ``id`` the MV holds
  duplicate rows);
* aggregate: ``SELECT <keys and aggregates, any order> FROM t [WHERE p] [GROUP BY k1 | k2 | k1, k2]``
  with COUNT(*), COUNT(1), COUNT(col), SUM, AVG, MIN, MAX over NULL-able BIGINT, DECIMAL, DOUBLE (and
  a STRING for MIN/MAX), and over expressions of the row (``SUM(d * (1 - d))``, ``SUM(CASE …)``);
* aggregate with HAVING (``aggregate_having``): the aggregates above, ``HAVING`` over aggregates
  selected or not, thresholds the small domains cross both ways (a group enters and leaves the MV);
* either over an inner equi-join of two or three bases of the same schema (``{t0} a JOIN {t1} b ON
  a.k1 = b.k1 …``; ``Shape.bases`` > 1), aggregates with HAVING too (``join_aggregate_having``):
  keys with NULLs and few values, so rows join many-to-many and NULL keys are always there to (not)
  match. Their streams name the base of each operation (``On``), one model per base.

* UNION ALL (``union_projection``) of two to four projection/filter branches over one base or several
  (each base read at least once, some twice): columns line up by position with types that widen (an
  INT under a BIGINT), later branches unnamed; duplicates within and across branches.
"""

from __future__ import annotations

import re
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

    kind: str  # the FastRefreshPlan kind: projection | aggregate | aggregate_having | join_…
    template: str
    bases: int = 1
    # Base i's columns are named with its letter (``a_k1``, ``b_k1``…, ``prefixed_columns``), as
    # TPC-H names them, so that the query may leave them unqualified.
    prefixed: bool = False

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
    # Aggregates of expressions (issue 28): computed from each change row as the query computes them.
    "SUM(v * 2 + k2) AS s_e",
    "SUM(d * (1 - d)) AS s_dd",
    "SUM(CASE WHEN k2 = 1 THEN d ELSE 0 END) AS s_case",
    "AVG(coalesce(x, 0) / 4) AS a_e",
    "MIN(v - k2) AS lo_e",
    "MAX(CASE WHEN v > 0 THEN x END) AS hi_e",
    "COUNT(v + k2) AS n_e",
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


# ---------------------------------------------------------------- HAVING (issue 10, item 2: HAVING)
# Thresholds the streams cross both ways: groups enter and leave the MV. Aggregates in HAVING need not
# be selected; NULL sums and averages make the condition NULL (the group is out).
HAVINGS = (
    "COUNT(*) > 1",
    "SUM(v) > 3",
    "COUNT(*) >= 2 AND MIN(x) < 0.5",
    "AVG(d) >= 1 OR MAX(k1) = 'a'",
    "COUNT(v) = 0",
    "SUM(x) IS NULL OR SUM(x) < 100",
    "MAX(v) - MIN(v) >= 2",
)


@st.composite
def having_aggregates(draw: st.DrawFn) -> Shape:
    group_by = draw(st.sampled_from(GROUPINGS))
    chosen = draw(st.lists(st.sampled_from(AGGREGATES), min_size=1, max_size=4, unique=True))
    items = draw(st.permutations([*group_by, *chosen]))
    query = _query(items, draw(st.sampled_from(FILTERS)), draw(st.booleans()), group_by)
    return Shape("aggregate_having", f"{query} HAVING {draw(st.sampled_from(HAVINGS))}")


# ------------------------------------------------------------------------- end of HAVING shapes


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
    "SUM(a.v * b.k2) AS s_ab",
    "SUM(b.d * (1 - b.d)) AS s_dd",
    "AVG(a.x + b.v) AS a_xv",
    "MIN(CASE WHEN a.k2 = 1 THEN b.v END) AS lo_e",
)


# Over a join: thresholds the joined rows cross both ways, aggregates of either side, selected or not.
JOIN_HAVINGS = (
    "COUNT(*) >= 2",
    "SUM(b.v) > 4 OR MIN(a.x) < 0",
    "COUNT(a.d) = 0",
    "MAX(b.v) - MIN(a.v) >= 2 AND AVG(a.x) < 100",
)


# The same joins as TPC-H writes them (issue 28): the tables listed in FROM, their equalities in WHERE.
COMMA_JOINS = {
    "{t0} a JOIN {t1} b ON a.k1 = b.k1": ("{t0} a, {t1} b", "a.k1 = b.k1"),
    "{t0} a JOIN {t1} b ON a.k2 = b.k2 AND b.k1 = a.k1": ("{t0}, {t1}", "a.k2 = b.k2 AND b.k1 = a.k1"),
    "{t0} a INNER JOIN {t1} b USING (k2)": ("{t0} a CROSS JOIN {t1} b", "b.k2 = a.k2"),
    "{t0} a JOIN {t1} b ON a.k1 = b.k1 JOIN {t2} c ON b.k2 = c.k2": (
        "{t0} a, {t1} b, {t2} c",
        "a.k1 = b.k1 AND b.k2 = c.k2",
    ),
    "{t0} a JOIN {t1} b ON a.k2 = b.k2 JOIN {t2} c ON c.k1 = a.k1": (
        "{t0}, {t1}, {t2}",
        "c.k1 = a.k1 AND a.k2 = b.k2",
    ),
}
_QUALIFIED = re.compile(r"\b([abc])\.(\w+)")


def unqualified(text: str) -> str:
    """``text`` over the bases with prefixed columns: ``a.k1`` becomes the unqualified ``a_k1``."""
    return _QUALIFIED.sub(r"\1_\2", text)


def prefixed_columns(index: int, columns: list[str]) -> list[str]:
    """The names base ``index`` gives ``columns`` when its columns are prefixed (``Shape.prefixed``)."""
    return [f"{'abc'[index]}_{c}" for c in columns]


def _join_query(
    items: list[str], source: str, where: str | None, group_by: tuple[str, ...] = (), *, written: bool = False
) -> str:
    """``written``: as TPC-H writes it, a comma join with its equalities in WHERE and every column
    unqualified (over bases with prefixed columns)."""
    if written:
        source, condition = COMMA_JOINS[source]
        where = condition if where is None else f"{condition} AND ({where})"
    text = f"SELECT {', '.join(items)} FROM {source}"
    if where is not None:
        text += f" WHERE {where}"
    if group_by:
        text += " GROUP BY " + ", ".join(group_by)
    return unqualified(text) if written else text


def join_shapes(bases: int, *, written: bool = False) -> st.SearchStrategy[Shape]:
    """Projections and aggregates (with HAVING or not) over a join of ``bases`` tables; ``written``:
    as TPC-H writes them (``_join_query``)."""

    @st.composite
    def projection(draw: st.DrawFn) -> Shape:
        items = draw(st.lists(st.sampled_from(JOIN_PROJECTED), min_size=1, max_size=4, unique=True))
        source, where = draw(st.sampled_from(JOINS[bases])), draw(st.sampled_from(JOIN_FILTERS))
        return Shape("join_projection", _join_query(items, source, where, written=written), bases, written)

    @st.composite
    def aggregate(draw: st.DrawFn) -> Shape:
        group_by = draw(st.sampled_from(JOIN_GROUPINGS))
        chosen = draw(st.lists(st.sampled_from(JOIN_AGGREGATES), min_size=1, max_size=4, unique=True))
        items = draw(st.permutations([*(JOIN_KEYS[k] for k in group_by), *chosen]))
        source, where = draw(st.sampled_from(JOINS[bases])), draw(st.sampled_from(JOIN_FILTERS))
        query = _join_query(items, source, where, group_by, written=written)
        return Shape("join_aggregate", query, bases, written)

    @st.composite
    def having(draw: st.DrawFn) -> Shape:
        shape = draw(aggregate())
        condition = draw(st.sampled_from(JOIN_HAVINGS))
        condition = unqualified(condition) if written else condition
        return Shape("join_aggregate_having", f"{shape.template} HAVING {condition}", bases, written)

    return st.one_of(projection(), aggregate(), having())


# ------------------------------------------------------------ UNION ALL (issue 10, item 2: UNION ALL)
# One slot per output column: what each branch may put there (same type family, so positions line up).
UNION_SLOTS = (
    ("k1", "coalesce(k1, 'none')", "upper(k1)"),
    ("k2", "v", "v * 2", "id"),
    ("d", "d + 1", "-d"),
    ("x", "x / 4", "x + 1"),
)


def union_shapes(bases: int) -> st.SearchStrategy[Shape]:
    """UNION ALL of 2..4 projections; branch i reads base i (so every base is read), then any base."""

    @st.composite
    def union(draw: st.DrawFn) -> Shape:
        slots = draw(st.lists(st.sampled_from(UNION_SLOTS), min_size=1, max_size=3, unique=True))
        extra = draw(st.lists(st.integers(0, bases - 1), min_size=max(0, 2 - bases), max_size=2))
        branches = []
        for number, base in enumerate([*range(bases), *extra]):
            items = [draw(st.sampled_from(slot)) for slot in slots]
            if number == 0:  # the first branch names the columns
                items = [f"{item} AS c{i}" for i, item in enumerate(items)]
            where = draw(st.sampled_from(FILTERS))
            text = f"SELECT {', '.join(items)} FROM {{t{base}}}"
            branches.append(text if where is None else f"{text} WHERE {where.replace('{q}', '')}")
        return Shape("union_projection", " UNION ALL ".join(branches), bases)

    return union()


# -------------------------------------------------------------------------- end of UNION ALL shapes
