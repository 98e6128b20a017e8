"""FAST refresh by the nested operator tree (issue 28) is proven equal to recomputation.

The operators the tree keeps by keyed recompute, each over three bases that all change: semi and
anti joins from EXISTS / NOT EXISTS (correlated by an equality, with a residual inequality as TPC-H
Q21 writes them), IN / NOT IN (NOT IN's NULL semantics: NULLs on both sides), an aggregate in a
derived table joined to a base, correlated and uncorrelated scalar subqueries, a LEFT JOIN (its right
side's columns output, padded with NULLs) under a nested aggregate (TPC-H Q13's shape), and
COUNT(DISTINCT …) at the top. Random change streams on every base (``fast_streams``: NULL keys,
duplicates, key updates, deletes of all matches, several commits between refreshes, purges),
through the real jobs on real Spark and Delta (``fast_checks.Scenario``): after every refresh each MV
holds exactly the multiset its query returns over the bases at its watermark, and the run was
incremental and names its operators' rules.

Default (``ci`` profile): the explicit example only (``phases_for_ci``): every shape, one MV each,
under one stream that has every kind of change.
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

NESTED_SHAPES = [
    # Semi and anti joins (TPC-H Q4, Q21, Q22): EXISTS with a residual inequality, NOT EXISTS.
    Shape(
        "tree",
        "SELECT a.k1, COUNT(*) AS n, SUM(a.v) AS s FROM {t0} a WHERE EXISTS (SELECT * FROM {t1} b "
        "WHERE b.k2 = a.k2 AND b.id <> a.id) AND NOT EXISTS (SELECT * FROM {t2} c WHERE c.k1 = a.k1 "
        "AND c.v > a.v) GROUP BY a.k1",
        3,
    ),
    # IN and NOT IN (TPC-H Q16, Q18, Q20): NULLs in the NOT IN subquery reject every row.
    Shape(
        "tree",
        "SELECT a.id, a.k1, a.v FROM {t0} a WHERE a.k2 IN (SELECT b.k2 FROM {t1} b WHERE b.v > 2) "
        "AND a.v NOT IN (SELECT c.v FROM {t2} c WHERE c.k1 = a.k1)",
        3,
    ),
    # An interior aggregate joined to a base, a LEFT JOIN whose right side's columns are output
    # (NULL-padded), correlated and uncorrelated scalar subqueries (Q2, Q15, Q17, Q22).
    Shape(
        "tree",
        "SELECT a.k1, a.v, s.total, s.n, b.v AS bv FROM {t0} a JOIN (SELECT c.k2, SUM(c.v) AS total, "
        "COUNT(*) AS n FROM {t2} c GROUP BY c.k2) s ON s.k2 = a.k2 LEFT JOIN {t1} b ON b.k1 = a.k1 "
        "WHERE a.v < (SELECT AVG(c2.v) FROM {t2} c2 WHERE c2.k1 = a.k1) OR a.x > (SELECT MAX(b2.x) "
        "FROM {t1} b2)",
        3,
    ),
    # A LEFT JOIN under a nested aggregate (Q13) over an uncorrelated NOT IN, COUNT(DISTINCT …) at
    # the top (Q16): recomputed by group.
    Shape(
        "tree",
        "SELECT n_b, COUNT(DISTINCT k1) AS groups, COUNT(*) AS rows_with FROM (SELECT a.id, a.k1, "
        "COUNT(b.id) AS n_b FROM {t0} a LEFT JOIN {t1} b ON a.k1 = b.k1 AND b.v > 1 WHERE a.k2 NOT IN "
        "(SELECT c.k2 FROM {t2} c WHERE c.v > 5) GROUP BY a.id, a.k1) s GROUP BY n_b",
        3,
    ),
]


@settings(
    phases=phases_for_ci(),
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@example(case=(NESTED_SHAPES, JOINED))
@given(
    case=st.tuples(
        st.lists(st.sampled_from(NESTED_SHAPES), min_size=1, max_size=MAX_MVS, unique=True),
        streams(MAX_ROUNDS, 3),
    )
)
def test_fast_refresh_by_the_nested_operator_tree_equals_the_query_at_its_watermark(
    spark: Any,
    warehouse_settings: Settings,  # noqa: F811
    case: tuple[list[Shape], Stream],
) -> None:
    shapes, stream = case
    run_stream(spark, warehouse_settings, shapes, stream)
