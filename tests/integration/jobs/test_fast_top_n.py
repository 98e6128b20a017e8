"""FAST refresh of ``ORDER BY … LIMIT n`` (plan kind ``top_n``) is proven equal to recomputation.

The inner query (without ORDER BY / LIMIT) is kept FAST by its own kind's rule in the helper table
``<mv>__mvtopn`` and the MV is its top n: here over a join aggregate, a join projection (duplicates,
ties at the boundary) and an operator tree (a CTE), each over three bases. Random change streams on
every base (``fast_streams``: rows that move between join partners and groups, so rows enter and
leave the top n; deletes of all matches, several commits between refreshes, purges), through the
real jobs on real Spark and Delta (``fast_checks.Scenario``): after every refresh each MV is one of
the valid top n of its query over the bases at its watermark (tie-aware: ``top_n_difference``), and
the run was incremental and says "top-N over maintained state (<inner rule>)".

Default (``ci`` profile): only the explicit examples (``phases_for_ci``): a one-table aggregate under
``EVERYTHING`` and the join aggregate under ``JOINED``; the join projection and the tree's shape join
them in the generated examples of the long profile (each example costs minutes of real Spark).
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from tests.support.fast_cases import EVERYTHING, JOINED, run_stream
from tests.support.fast_checks import phases_for_ci
from tests.support.fast_shapes import Shape
from tests.support.fast_streams import Stream, streams
from workers.config import Settings

pytestmark = pytest.mark.integration

MAX_MVS, MAX_ROUNDS = 3, 4  # generated examples (none under ci: phases_for_ci)

# Over a one-table aggregate with helper state (AVG): the rows table keeps its own __mvstate.
ONE_TABLE_SHAPES = [
    Shape(
        "top_n",
        "SELECT k1, COUNT(*) AS n, SUM(v) AS s, AVG(d) AS av FROM {t} GROUP BY k1 ORDER BY n DESC, s LIMIT 2",
    ),
]
TOP_N_SHAPES = [
    # Over a join aggregate (TPC-H Q3 / Q10's form): groups move in and out of the top 2.
    Shape(
        "top_n",
        "SELECT a.k1, COUNT(*) AS n, SUM(b.v) AS s FROM {t0} a JOIN {t1} b ON a.k1 = b.k1 "
        "JOIN {t2} c ON c.k2 = b.k2 GROUP BY a.k1 ORDER BY s DESC, k1 LIMIT 2",
        3,
    ),
    # Over a join projection: duplicate rows and ties on v at the boundary.
    Shape(
        "top_n",
        "SELECT a.id AS aid, b.v, c.d FROM {t0} a JOIN {t1} b ON a.k1 = b.k1 "
        "JOIN {t2} c ON c.k2 = b.k2 ORDER BY v DESC NULLS LAST LIMIT 3",
        3,
    ),
    # Over the operator tree (a CTE), ascending: the smallest sum.
    Shape(
        "top_n",
        "WITH j AS (SELECT k1, k2, v FROM {t1}) SELECT a.k2, SUM(j.v) AS s FROM {t0} a "
        "JOIN j ON a.k1 = j.k1 JOIN {t2} c ON c.k1 = a.k1 GROUP BY a.k2 ORDER BY s LIMIT 1",
        3,
    ),
]


@settings(
    phases=phases_for_ci(),
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@example(case=(ONE_TABLE_SHAPES, EVERYTHING))
@example(case=(TOP_N_SHAPES[:1], JOINED))
@given(
    case=st.one_of(
        st.tuples(st.just(ONE_TABLE_SHAPES), streams(MAX_ROUNDS)),
        st.tuples(
            st.lists(st.sampled_from(TOP_N_SHAPES), min_size=1, max_size=MAX_MVS, unique=True),
            streams(MAX_ROUNDS, 3),
        ),
    )
)
def test_fast_refresh_of_a_top_n_is_one_of_the_query_results_at_its_watermark(
    spark: Any,
    warehouse_settings: Settings,  # noqa: F811
    case: tuple[list[Shape], Stream],
) -> None:
    shapes, stream = case
    run_stream(spark, warehouse_settings, shapes, stream)
