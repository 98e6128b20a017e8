"""FAST refresh proven equal to recomputation (as ``test_fast_properties``) for aggregates whose output
is more than their groups' sums: GROUP BY … HAVING (``aggregate_having``; over a two-table join
``join_aggregate_having``), groups crossing the HAVING threshold both ways between refreshes (they enter
and leave the MV), HAVING over aggregates that are not selected; and GROUP BY expressions (``GROUP BY
upper(k1)``) and expressions over aggregates in the select list (``100.00 * SUM(…) / NULLIF(SUM(d), 0)``,
``SUM(x) / 7.0``), over one table and a join, grouped or not: their parts kept in the helper state, a
join aggregate's too (no group recomputed from the bases unless a MIN/MAX needs it).

Default (``ci`` profile): per property its explicit examples only; ``HYPOTHESIS_PROFILE=long`` fuzzes.
"""

from __future__ import annotations

from decimal import Decimal
from typing import Any

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from tests.support.fast_cases import EVERYTHING, JOINED, run_stream
from tests.support.fast_checks import phases_for_ci
from tests.support.fast_shapes import Shape, having_aggregates
from tests.support.fast_streams import (
    Delete,
    DeleteAll,
    DeleteExtreme,
    Insert,
    MoveGroup,
    On,
    Purge,
    Stream,
    streams,
)
from workers.config import Settings

pytestmark = pytest.mark.integration

PHASES = phases_for_ci()
MAX_MVS, MAX_ROUNDS, MAX_JOIN_ROUNDS = 3, 4, 4  # generated examples (not under ci)

# Over the three bases of ``JOINED``: run in the expression test's CI example below (one scenario).
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
