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

Default (``ci`` profile): per property its explicit examples only (every shape over the stream with
every kind of change; ``fast_checks.phases_for_ci``), for the suite's time budget.
A fuzzing session, thousands of examples (hours; new ones every run):

    HYPOTHESIS_PROFILE=long .venv/bin/python -m pytest -q tests/integration/jobs/test_fast_properties.py

HAVING and computed keys / formulas: ``test_fast_having_formulas``; the shared streams and
``run_stream``: ``tests.support.fast_cases``.

The same for UNION ALL of projections (``union_projection``) over one base or several, a base read by
two branches (duplicates across branches), changes on some bases only.
"""

from __future__ import annotations

from decimal import Decimal
from typing import Any
from unittest import mock

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from tests.support.fast_cases import EVERYTHING, JOINED, run_stream
from tests.support.fast_checks import multiset_difference, phases_for_ci
from tests.support.fast_shapes import SHAPES, Shape, join_shapes, union_shapes
from tests.support.fast_streams import DeleteExtreme, Insert, On, Purge, Stream, Update, streams
from workers.config import Settings
from workers.jobs.fast import apply as incremental_apply

pytestmark = pytest.mark.integration

# Under the ci profile only the explicit examples run (each a real-Spark stream costing minutes: the
# suite's time budget); every other profile generates too, bigger (MVs per example, rounds per stream).
PHASES = phases_for_ci()
MAX_MVS, MAX_ROUNDS = 3, 4  # generated examples (not under ci)
MAX_JOIN_MVS, MAX_JOIN_ROUNDS = 3, 4


def agg(template: str) -> Shape:
    return Shape("aggregate", template)


def proj(template: str) -> Shape:
    return Shape("projection", template)


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
# ``JOINED_SHAPES`` run in the expression test's CI example under ``JOINED`` (``test_fast_having_formulas``).
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
