"""FAST refresh is proven equal to recomputation: property tests over random change streams.

Per example hypothesis draws one to three MV queries of the shapes FAST supports (projection/filter,
GROUP BY with COUNT/SUM/AVG/MIN/MAX over NULL-able BIGINT, DECIMAL and DOUBLE; ``fast_shapes``) over
one fresh base table, and a change stream: inserts, exact duplicate rows, updates that move rows
between groups, deletes of the current MIN/MAX, delete-all then re-insert, NULL keys and values,
several commits between two refreshes, and MV-log purges below the MVs' watermark. After every
refresh, through the real jobs on real Spark and Delta (``fast_checks``), each MV must hold exactly
the multiset its query returns over the base ``VERSION AS OF`` the MV's watermark (doubles within
1e-9 relative), and the run must have been incremental.

The same over inner equi-joins of two or three bases (projections and aggregates over ``{t0} a JOIN
{t1} b ON a.k1 = b.k1 …``): random change streams on every base, both sides changing between two
refreshes, many-to-many keys, NULL keys that must never match, purges of any base's log.

The same over joins as TPC-H writes them: unqualified columns (resolved against the bases' columns
read from their Delta logs), comma joins with their equalities in WHERE, ORDER BY.

The same for GROUP BY … HAVING (``aggregate_having``; over a two-table join ``join_aggregate_having``):
groups cross the HAVING threshold both ways between refreshes (they enter and leave the MV), HAVING over
aggregates that are not selected.

Default (``ci`` profile): per property its explicit examples only (every shape over the stream with
every kind of change; ``fast_checks.phases_for_ci``), for the suite's time budget.
A fuzzing session, thousands of examples (hours; new ones every run):

    HYPOTHESIS_PROFILE=long .venv/bin/python -m pytest -q tests/integration/jobs/test_fast_properties.py

The same for GROUP BY expressions (``GROUP BY upper(k1)``) and expressions over aggregates in the
select list (``100.00 * SUM(…) / NULLIF(SUM(d), 0)``, ``SUM(x) / 7.0``), over one table and a join,
grouped or not: their parts kept in the helper state, a join aggregate's too (no group recomputed from
the bases unless a MIN/MAX needs it).

The same for UNION ALL of projections (``union_projection``) over one base or several, a base read by
two branches (duplicates across branches), changes on some bases only.
"""

from __future__ import annotations

from decimal import Decimal
from pathlib import Path
from typing import Any
from unittest import mock

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from tests.support.fast_checks import Scenario, multiset_difference, phases_for_ci
from tests.support.fast_shapes import SHAPES, Shape, having_aggregates, join_shapes, union_shapes
from tests.support.fast_streams import (
    Bump,
    Delete,
    DeleteAll,
    DeleteExtreme,
    DeleteGroup,
    Insert,
    MoveGroup,
    On,
    Purge,
    Stream,
    Update,
    streams,
)
from workers.config import Settings
from workers.jobs.fast import apply as incremental_apply

pytestmark = pytest.mark.integration

# Under the ci profile only the explicit examples run (each a real-Spark stream costing minutes: the
# suite's time budget); every other profile generates too, bigger (MVs per example, rounds per stream).
PHASES = phases_for_ci()
MAX_MVS, MAX_ROUNDS = 3, 4  # generated examples (not under ci)
MAX_JOIN_MVS, MAX_JOIN_ROUNDS = 3, 4


@pytest.fixture(scope="module")
def warehouse_settings(tmp_path_factory: pytest.TempPathFactory) -> Settings:
    """One warehouse for the module: every example makes its own uniquely named tables (and drops them)."""
    return Settings(warehouse=str(Path(tmp_path_factory.mktemp("fast-properties")) / "warehouse"))


# What the run message of an incremental refresh of these kinds says of its plan.
PLAN_WORDS = {
    "aggregate": "linear over the base's change rows",
    "join_aggregate": "linear over the join's change rows",
    "aggregate_having": "keyed merge of recomputed groups",
    "join_aggregate_having": "keyed merge of recomputed groups",
    "union_projection": "UNION ALL over",
    "tree": "operator tree [scan",  # the tree's rules, operator by operator (test_fast_tree)
    "top_n": "top-N over maintained state (",  # and the inner query's rule (test_fast_top_n)
}


def run_stream(spark: Any, settings: Settings, shapes: list[Shape], stream: Stream) -> None:
    scenario = Scenario(spark, settings, shapes)
    try:
        scenario.create(stream.initial, stream.others)
        for ops in stream.rounds:
            for op in ops:
                scenario.apply(op)
            scenario.refresh_all()
    finally:
        scenario.drop()
    for mv, kind in scenario.kinds.items():  # every run message states the plan used
        runs = [line for line in scenario.log if line.startswith(f"refresh {mv} ") and "incremental:" in line]
        assert all(PLAN_WORDS.get(kind, "") in line for line in runs), runs


def agg(template: str) -> Shape:
    return Shape("aggregate", template)


def proj(template: str) -> Shape:
    return Shape("projection", template)


# Every kind of change at least once, on every aggregate function and NULL-able column type.
EVERYTHING = Stream(
    Insert(
        (
            ("a", 0, 5, Decimal("1.25"), 0.1),
            ("a", 1, 2, Decimal("3.10"), 2 / 3),
            ("a", None, 8, None, -1.5),
            ("b", 0, 3, Decimal("-2.50"), None),
            (None, 1, None, Decimal("0.00"), 1000.0),
            (None, None, 4, None, 0.25),
        ),
        copies=(0, 3),  # exact duplicates of two rows
    ),
    (
        (  # several commits, then one refresh: new groups, MIN/MAX losing their extreme, a moved row
            Insert((("c", 0, -4, Decimal("99.99"), -7.75), (None, 0, 6, None, None))),
            DeleteExtreme("MIN", "v", "a"),
            DeleteExtreme("MAX", "x", None, whole_table=True),
            Update(1, (("k1", "b"), ("v", None))),
            Purge(),
            Bump(0, 2),
        ),
        (  # a group vanishes, another merges into it, then everything goes and comes back
            Purge(),
            DeleteGroup("b"),
            MoveGroup(None, "a"),
            Delete(0),
            DeleteAll(),
            Insert((("a", 0, 1, Decimal("1.25"), 0.1), (None, None, None, None, None)), copies=(0,)),
        ),
    ),
)
EVERY_SHAPE = [
    # Keys after aggregates, a table alias in WHERE, COUNT(*) present (vanishing groups are visible).
    Shape(
        "aggregate",
        "SELECT SUM(x) AS s_x, k2, COUNT(*) AS n, AVG(d) AS a_d, MIN(v) AS lo_v, MAX(x) AS hi_x, k1, "
        "SUM(d) AS s_d, COUNT(v) AS n_v, SUM(v) AS s_v, AVG(x) AS a_x, MAX(k1) AS hi_k1, "
        "SUM(s.d * (1 - d)) AS s_dd, COUNT(v + k2) AS n_e, AVG(CASE WHEN k2 = 1 THEN v END) AS a_case "
        "FROM {t} s WHERE s.d IS NOT NULL OR s.v > 0 GROUP BY k1, k2",
    ),
    # No COUNT(*): nothing visible says a group vanished.
    Shape(
        "aggregate",
        "SELECT k1, SUM(v) AS s_v, MAX(v) AS hi_v, AVG(v) AS a_v, MIN(d) AS lo_d, MIN(x) AS lo_x, "
        "SUM(v * 2 + k2) AS s_e, MAX(CASE WHEN v > 0 THEN x END) AS hi_e FROM {t} GROUP BY k1",
    ),
    Shape("projection", "SELECT k1, v * 2 AS v2, d, x / 4 AS x4 FROM {t}"),  # no id: duplicate rows
]
# The same stream as a large change set (no key lists): a projection's key ranges, and an aggregate
# keeping no helper state (exact sums, COUNT(*) present), whose delta pass then runs in the job that
# joins it to the MV rows.
LARGE_CHANGE_SHAPES = [
    EVERY_SHAPE[2],
    Shape(
        "aggregate",
        "SELECT k1, k2, COUNT(*) AS n, SUM(v) AS s_v, MIN(v) AS lo_v, MAX(d) AS hi_d, SUM(d) AS s_d "
        "FROM {t} GROUP BY k1, k2",
    ),
]


@settings(
    phases=PHASES,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@example(shapes=EVERY_SHAPE, stream=EVERYTHING, listed=True)
@example(shapes=LARGE_CHANGE_SHAPES, stream=EVERYTHING, listed=False)
@given(
    shapes=st.lists(SHAPES, min_size=1, max_size=MAX_MVS), stream=streams(MAX_ROUNDS), listed=st.booleans()
)
def test_fast_refresh_equals_the_query_at_its_watermark(
    spark: Any, warehouse_settings: Settings, shapes: list[Shape], stream: Stream, listed: bool
) -> None:
    # ``listed``: changed keys listed as values where they are few, as here; else every change set
    # counts as large (no key lists: ranges, semi-joins, an aggregate's delta pass not held apart).
    with mock.patch.object(
        incremental_apply, "GROUP_FILTER_LIMIT", incremental_apply.GROUP_FILTER_LIMIT if listed else 0
    ):
        run_stream(spark, warehouse_settings, shapes, stream)


def test_the_comparison_sees_a_lost_duplicate_a_null_and_float_drift() -> None:
    """The oracle's multiset comparison itself (no Spark): strict except for float noise."""
    rows = [("a", 1, 0.1 + 0.2), ("a", 1, 0.1 + 0.2), (None, None, None)]
    assert multiset_difference(rows, [("a", 1, 0.3), ("a", 1, 0.3), (None, None, None)]) is None
    assert multiset_difference(rows[1:], rows) is not None  # one copy of a duplicate row lost
    assert multiset_difference(rows, [*rows[:2], (None, None, 0.0)]) is not None  # NULL vs 0
    assert multiset_difference(rows, [("a", 1, 0.3 + 1e-6), *rows[1:]]) is not None
    assert multiset_difference([(Decimal("1.25"),)], [(Decimal("1.26"),)]) is not None


# Joins: both sides in one range, a join key moved, NULL keys, a many-to-many key, a side emptied and
# refilled, a purge of each log.
JOINED = Stream(
    Insert(
        (("a", 0, 5, Decimal("1.25"), 0.1), ("a", 1, 2, None, 2 / 3), (None, 1, 3, Decimal("0.00"), None)),
        (0,),
    ),
    (
        (
            On(1, Insert((("a", 1, 4, Decimal("3.10"), -1.5), (None, 0, 1, None, 1000.0)))),
            On(0, Update(0, (("k1", "b"),))),  # a row moves to another join partner (or none)
            On(2, Insert((("c", 1, 7, Decimal("99.99"), 0.25),))),
            On(1, DeleteExtreme("MIN", "v", "a")),
            On(0, Insert((("b", 0, -4, Decimal("-2.50"), 0.1),), (1,))),
            On(0, Purge()),
        ),
        (
            On(1, MoveGroup("a", "b")),
            On(2, Bump(1, 2)),
            On(0, DeleteGroup("a")),
            On(1, DeleteAll()),
            On(1, Insert((("b", 1, 6, Decimal("1.25"), 2 / 3), ("b", None, 2, None, None)))),
            On(1, Purge()),
            On(2, Delete(0)),
        ),
    ),
    others=(
        Insert((("a", 0, 1, Decimal("1.25"), 0.25), ("a", 1, 8, None, -7.75), (None, 1, 2, None, 0.0)), (1,)),
        Insert((("a", 0, 2, None, 0.1), ("b", 1, 3, Decimal("3.10"), None), (None, None, 5, None, 2 / 3))),
    ),
)
JOINED_SHAPES = [
    Shape(
        "join_aggregate",
        "SELECT b.k2, COUNT(*) AS n, SUM(a.v) AS s_v, AVG(b.v) AS a_bv, MIN(a.v) AS lo_v, SUM(a.x) AS s_x, "
        "MAX(c.d) AS hi_cd FROM {t0} a JOIN {t1} b ON a.k1 = b.k1 JOIN {t2} c ON b.k2 = c.k2 "
        "WHERE a.v IS NOT NULL GROUP BY b.k2",
        3,
    ),
    Shape(
        "join_projection",
        "SELECT a.id, b.v, c.x + a.x AS xx FROM {t0} a JOIN {t1} b ON a.k1 = b.k1 JOIN {t2} c ON c.k2 = b.k2",
        3,
    ),
]


# The joins as TPC-H writes them (issue 28): columns unqualified (each base names its own, ``a_k1``,
# ``b_k1``…, resolved against the bases' columns from their Delta logs), tables listed in FROM with
# their equalities in WHERE, or joined ON unqualified columns; ORDER BY (not stored).
WRITTEN_SHAPES = [
    Shape(
        "join_aggregate",
        "SELECT b_k2, COUNT(*) AS n, SUM(a_v) AS s_v, AVG(b_v) AS a_bv, MIN(a_v) AS lo_v, SUM(a_x) AS s_x, "
        "MAX(c_d) AS hi_cd, SUM(c_d * (1 - a_v)) AS rev, "
        "SUM(CASE WHEN b_k1 = 'a' THEN a_v ELSE 0 END) AS s_a "
        "FROM {t0}, {t1}, {t2} WHERE a_k1 = b_k1 AND b_k2 = c_k2 AND a_v IS NOT NULL "
        "GROUP BY b_k2 ORDER BY n DESC",
        3,
        prefixed=True,
    ),
    Shape(
        "join_projection",
        "SELECT a_id, b_v, c_x + a_x AS xx FROM {t0} JOIN {t1} ON a_k1 = b_k1 JOIN {t2} ON c_k2 = b_k2 "
        "ORDER BY a_id",
        3,
        prefixed=True,
    ),
]


@settings(
    phases=PHASES,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
# ``JOINED_SHAPES`` run in the expression test's CI example under ``JOINED`` (one scenario).
@example(case=(WRITTEN_SHAPES, JOINED))
@given(
    case=st.tuples(st.sampled_from([2, 3]), st.booleans()).flatmap(
        lambda drawn: st.tuples(
            st.lists(join_shapes(drawn[0], written=drawn[1]), min_size=1, max_size=MAX_JOIN_MVS),
            streams(MAX_JOIN_ROUNDS, drawn[0]),
        )
    )
)
def test_fast_refresh_of_a_join_equals_the_query_at_its_watermark(
    spark: Any, warehouse_settings: Settings, case: tuple[list[Shape], Stream]
) -> None:
    shapes, stream = case
    run_stream(spark, warehouse_settings, shapes, stream)


# HAVING: thresholds crossed both ways by the EVERYTHING stream (groups grow, lose rows, vanish, merge,
# all go and come back), aggregates in HAVING that are not selected (MIN/MAX too), an output name and a
# key in HAVING, a global aggregate whose one row comes and goes.
HAVING_SHAPES = [
    Shape(
        "aggregate_having",
        "SELECT k1, COUNT(*) AS n, SUM(v) AS s_v, AVG(x) AS a_x FROM {t} s WHERE s.v IS NOT NULL OR s.x > 0 "
        "GROUP BY k1 HAVING COUNT(*) >= 2 AND n < 5 OR k1 IS NULL",
    ),
    Shape(
        "aggregate_having",
        "SELECT COUNT(*) AS n, MIN(x) AS lo_x FROM {t} HAVING SUM(v) > 5 AND MAX(v) - MIN(v) >= 2",
    ),
]


# HAVING over a two-table join (``join_aggregate_having``): by the b.k2 key of the second base, groups
# k2 = 0 and 1 are in, then out (k2 = 0 loses its only partner row, k2 = 1 gains a MAX(a.x) of 1000)
# while a NULL-key group comes in, then all swap back (the second base emptied and refilled); the join's
# one group (no GROUP BY) is out, in, out. Duplicate rows, rows the WHERE drops, a purge of each log.
JOINED_HAVING = Stream(
    Insert(
        (
            ("a", 0, 5, Decimal("1.25"), 0.1),
            ("a", 1, 2, None, 2 / 3),
            ("b", 1, 3, Decimal("0.00"), None),
            (None, 0, 1, None, 0.25),
        ),
        copies=(0,),
    ),
    (
        (
            On(0, Insert((("b", 0, 4, None, 1000.0),))),
            On(1, Delete(0)),
            On(1, Insert(((None, None, 3, None, None), ("c", 0, 1, None, None), ("a", None, 4, None, None)))),
            On(0, Insert((("c", 1, 7, None, -1.5), ("c", None, None, None, None)))),
            On(0, Purge()),
        ),
        (
            On(0, DeleteExtreme("MAX", "x", None, whole_table=True)),
            On(0, Insert((("c", 1, 2, None, 0.1),))),
            On(1, MoveGroup("b", "a")),
            On(1, Purge()),
            On(1, DeleteAll()),
            On(1, Insert((("a", 1, 6, None, 2 / 3), ("c", 0, 2, Decimal("3.10"), None)))),
        ),
    ),
    others=(
        Insert(
            (
                ("a", 0, 1, None, 0.25),
                ("a", 1, 8, None, -7.75),
                ("b", 1, 2, Decimal("3.10"), None),
                (None, 1, 5, None, 0.0),
            )
        ),
    ),
)
JOINED_HAVING_SHAPES = [
    Shape(
        "join_aggregate_having",
        "SELECT b.k2, COUNT(*) AS n, SUM(b.v) AS s_bv FROM {t0} a JOIN {t1} b ON a.k1 = b.k1 "
        "WHERE a.v IS NOT NULL GROUP BY b.k2 HAVING COUNT(*) >= 2 AND MAX(a.x) < 100",
        2,
    ),
    Shape(
        "join_aggregate_having",
        "SELECT COUNT(*) AS n, MIN(a.v) AS lo_v FROM {t0} a JOIN {t1} b USING (k2) HAVING SUM(b.v) > 40",
        2,
    ),
]


@settings(
    phases=PHASES,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
# ``HAVING_SHAPES`` run in the expression test's CI example under ``EVERYTHING`` (one scenario).
@example(shapes=JOINED_HAVING_SHAPES, stream=JOINED_HAVING)
@given(shapes=st.lists(having_aggregates(), min_size=1, max_size=MAX_MVS), stream=streams(MAX_ROUNDS))
def test_fast_refresh_with_having_equals_the_query_at_its_watermark(
    spark: Any, warehouse_settings: Settings, shapes: list[Shape], stream: Stream
) -> None:
    run_stream(spark, warehouse_settings, shapes, stream)


# UNION ALL over two bases, base 0 read by two branches (the same row twice in the MV, and copies of a
# row), an INT column under a BIGINT one: first only base 1 appends (the other base's branches read no
# rows), then a row leaves one branch of base 0 but not the other, base 1 loses its MAX, a purge.
UNIONED = Stream(
    Insert(
        (("a", 0, 5, Decimal("1.25"), 0.1), ("a", 1, 2, None, 2 / 3), (None, 1, 3, Decimal("0.00"), None)),
        (0,),
    ),
    (
        (On(1, Insert((("b", 1, 4, Decimal("3.10"), -1.5),), (0,))),),
        (
            On(0, Update(0, (("v", -1),))),
            On(1, DeleteExtreme("MAX", "v", "b")),
            On(0, Purge()),
            On(0, Insert(((None, None, 7, None, 1000.0),), (1,))),
        ),
    ),
    others=(Insert((("a", 0, 1, Decimal("1.25"), 0.25), ("c", None, 8, None, -7.75)), (1,)),),
)
UNION_SHAPE = Shape(
    "union_projection",
    "SELECT k1 AS k, v, d FROM {t0} WHERE v > 0 UNION ALL SELECT upper(k1), k2, d + 1 FROM {t1} "
    "UNION ALL SELECT k1, v, d FROM {t0} WHERE k1 IS NULL OR x >= 0",
    2,
)


@settings(
    phases=PHASES,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@example(case=([UNION_SHAPE], UNIONED))
@given(
    case=st.sampled_from([1, 2]).flatmap(
        lambda bases: st.tuples(
            st.lists(union_shapes(bases), min_size=1, max_size=MAX_JOIN_MVS), streams(MAX_JOIN_ROUNDS, bases)
        )
    )
)
def test_fast_refresh_of_a_union_all_equals_the_query_at_its_watermark(
    spark: Any, warehouse_settings: Settings, case: tuple[list[Shape], Stream]
) -> None:
    shapes, stream = case
    run_stream(spark, warehouse_settings, shapes, stream)


# GROUP BY expressions and expressions over aggregates (issue 28, steps 2 and 3), over one table (the
# EVERYTHING stream) and over a three-table join (JOINED): a formula whose denominator comes and goes
# (NULLIF), a global formula over the join, a join aggregate without COUNT(*) (state tells a vanished
# group) and one with AVG — each kept by its helper state, linear in the join's change rows.
EXPRESSION_SHAPES = [
    Shape(
        "aggregate",
        "SELECT coalesce(k1, 'none') AS ck, k2 % 2 AS kp, COUNT(*) AS n, SUM(v) AS s_v, "
        "100.00 * SUM(CASE WHEN v > 2 THEN d ELSE 0 END) / NULLIF(SUM(d), 0) AS share "
        "FROM {t} s WHERE s.v IS NOT NULL OR s.x > 0 GROUP BY coalesce(k1, 'none'), k2 % 2",
    ),
    Shape("aggregate", "SELECT SUM(x) / 7.0 AS per, AVG(v) * 2 + COUNT(d) AS mix FROM {t}"),
    Shape("aggregate", "SELECT upper(k1) AS uk, SUM(v) AS s_v, AVG(x) AS a_x FROM {t} GROUP BY upper(k1)"),
]
_THREE = "FROM {t0} a JOIN {t1} b ON a.k1 = b.k1 JOIN {t2} c ON b.k2 = c.k2"
JOIN_EXPRESSION_SHAPES = [
    Shape(
        "join_aggregate",
        f"SELECT b.k2 % 2 AS kp, COUNT(*) AS n, SUM(a.v) AS s_v, AVG(b.v) AS a_bv, SUM(a.x) AS s_x {_THREE} "
        "WHERE a.v IS NOT NULL GROUP BY b.k2 % 2",
        3,
    ),
    Shape(
        "join_aggregate",
        "SELECT upper(a.k1) AS uk, "
        "100.00 * SUM(CASE WHEN c.k2 = 1 THEN a.d ELSE 0 END) / NULLIF(SUM(a.d), 0) AS share, "
        f"SUM(b.v) AS s_bv {_THREE} GROUP BY upper(a.k1)",
        3,
    ),
    Shape("join_aggregate", f"SELECT SUM(a.v * c.v) / 7.0 AS per, COUNT(*) AS n {_THREE}", 3),
]
EXPRESSION_CASES = {1: EXPRESSION_SHAPES, 3: JOIN_EXPRESSION_SHAPES}


@settings(
    phases=PHASES,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
# The CI examples over one stream share a scenario (its bases, commits and purges): each MV refreshed and
# checked on its own proves what an example of its own would, for one set-up. So the one-table HAVING
# shapes run here with the expressions under ``EVERYTHING``, the join test's ``JOINED_SHAPES`` with the
# join expressions under ``JOINED``.
@example(case=(EXPRESSION_SHAPES + HAVING_SHAPES, EVERYTHING))
@example(case=(JOIN_EXPRESSION_SHAPES + JOINED_SHAPES, JOINED))
@given(
    case=st.sampled_from(sorted(EXPRESSION_CASES)).flatmap(
        lambda bases: st.tuples(st.just(EXPRESSION_CASES[bases]), streams(MAX_JOIN_ROUNDS, bases))
    )
)
def test_fast_refresh_of_computed_keys_and_formulas_equals_the_query_at_its_watermark(
    spark: Any, warehouse_settings: Settings, case: tuple[list[Shape], Stream]
) -> None:
    shapes, stream = case
    run_stream(spark, warehouse_settings, shapes, stream)
