"""FAST refresh by the operator tree (plan kind ``tree``) is proven equal to recomputation.

The shapes the shape planners refuse and the tree takes: self-joins (a table read twice, both
occurrences changing in one range), CTEs (one read twice: a self-join of two copies) and derived
tables folded into their query, GROUP BY expressions, aggregates over expressions of two tables,
HAVING, and SELECT DISTINCT (a GROUP BY of its outputs), each over three bases. Random change
streams on every base (``fast_streams``: NULL keys, duplicates, key updates, deletes of all
matches, several commits between refreshes, purges), through the real jobs on real Spark and Delta
(``fast_checks.Scenario``): after every refresh each MV holds exactly the multiset its query returns
over the bases at its watermark, and the run was incremental and names its operators' rules.

Default (``ci`` profile): the explicit example plus one generated stream, one MV per scenario.
"""

from __future__ import annotations

import os
from typing import Any

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from tests.integration.jobs.test_fast_properties import JOINED, run_stream, warehouse_settings  # noqa: F401
from tests.support.fast_checks import phases_for_ci
from tests.support.fast_shapes import Shape
from tests.support.fast_streams import Stream, streams
from workers.config import Settings

pytestmark = pytest.mark.integration

PROFILE = os.environ.get("HYPOTHESIS_PROFILE", "ci")
MAX_MVS, MAX_ROUNDS = (1, 2) if PROFILE == "ci" else (3, 4)

TREE_SHAPES = [
    # A self-join: c1 and c2 are two occurrences of {t2}; both change in one range.
    Shape(
        "tree",
        "SELECT a.id, c1.x AS x1, c2.v AS v2 FROM {t0} a JOIN {t2} c1 ON a.k2 = c1.k2 "
        "JOIN {t2} c2 ON a.k1 = c2.k1 JOIN {t1} b ON b.k1 = a.k1 WHERE c1.id <> c2.id OR a.v > 0",
        3,
    ),
    # A CTE read twice (two occurrences of {t1}), an aggregate by a GROUP BY expression, over an
    # expression of both copies.
    Shape(
        "tree",
        "WITH j AS (SELECT k1, k2, v, d FROM {t1} WHERE v IS NOT NULL OR d > 0) "
        "SELECT coalesce(j1.k1, 'none') AS g, COUNT(*) AS n, SUM(j1.v * j2.d) AS s, MIN(j2.v) AS lo, "
        "AVG(a.d) AS av FROM j j1 JOIN j j2 ON j1.k2 = j2.k2 JOIN {t0} a ON a.k1 = j1.k1 "
        "JOIN {t2} c ON c.k2 = a.k2 GROUP BY coalesce(j1.k1, 'none')",
        3,
    ),
    # A derived table (TPC-H Q7/Q9's form) with HAVING at the top; comma joins keyed in WHERE.
    Shape(
        "tree",
        "SELECT parity, COUNT(*) AS n, SUM(amount) AS total FROM (SELECT a.k2 % 2 AS parity, "
        "a.v * b.d AS amount FROM {t0} a, {t1} b, {t2} c WHERE a.k1 = b.k1 AND c.k2 = b.k2) s "
        "GROUP BY parity HAVING COUNT(*) > 1",
        3,
    ),
    # SELECT DISTINCT over a self-join: a GROUP BY of its outputs (NULLs one group; copies come and go).
    Shape(
        "tree",
        "SELECT DISTINCT a.k1, b2.k2 AS bk2 FROM {t0} a JOIN {t1} b1 ON a.k1 = b1.k1 "
        "JOIN {t1} b2 ON b1.k2 = b2.k2 JOIN {t2} c ON c.k1 = a.k1",
        3,
    ),
]


@settings(
    phases=phases_for_ci(),
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@example(case=(TREE_SHAPES, JOINED))
@given(
    case=st.tuples(
        st.lists(st.sampled_from(TREE_SHAPES), min_size=1, max_size=MAX_MVS, unique=True),
        streams(MAX_ROUNDS, 3),
    )
)
def test_fast_refresh_by_the_operator_tree_equals_the_query_at_its_watermark(
    spark: Any,
    warehouse_settings: Settings,  # noqa: F811
    case: tuple[list[Shape], Stream],
) -> None:
    shapes, stream = case
    run_stream(spark, warehouse_settings, shapes, stream)
