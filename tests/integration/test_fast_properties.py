"""FAST refresh is proven equal to recomputation: property tests over random change streams.

Per example hypothesis draws one to three MV queries of the shapes FAST supports (projection/filter,
GROUP BY with COUNT/SUM/AVG/MIN/MAX over NULL-able BIGINT, DECIMAL and DOUBLE; ``fast_shapes``) over
one fresh base table, and a change stream: inserts, exact duplicate rows, updates that move rows
between groups, deletes of the current MIN/MAX, delete-all then re-insert, NULL keys and values,
several commits between two refreshes, and MV-log purges below the MVs' watermark. After every
refresh, through the real jobs on real Spark and Delta (``fast_checks``), each MV must hold exactly
the multiset its query returns over the base ``VERSION AS OF`` the MV's watermark (doubles within
1e-9 relative), and the run must have been incremental.

Default (``ci`` profile, derandomized): the explicit example plus three generated ones, ~85-100 s.
A fuzzing session, thousands of examples (hours; new ones every run):

    HYPOTHESIS_PROFILE=long .venv/bin/python -m pytest -q tests/integration/test_fast_properties.py

Joins and UNION ALL are not FAST-eligible yet: see ``fast_shapes`` for where their shapes go.
"""

from __future__ import annotations

import os
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from tests.integration.fast_checks import Scenario, multiset_difference
from tests.integration.fast_shapes import (
    SHAPES,
    Bump,
    Delete,
    DeleteAll,
    DeleteExtreme,
    DeleteGroup,
    Insert,
    MoveGroup,
    Purge,
    Shape,
    Stream,
    Update,
    streams,
)
from workers.config import Settings

pytestmark = pytest.mark.integration

# The default profile runs the explicit example and CI_EXAMPLES generated ones, smaller (MVs per
# example, rounds per stream) than any other profile's (long: its own count, bigger examples).
PROFILE = os.environ.get("HYPOTHESIS_PROFILE", "ci")
CI_EXAMPLES = 3
EXAMPLES = CI_EXAMPLES if PROFILE == "ci" else settings().max_examples
MAX_MVS, MAX_ROUNDS = (2, 2) if PROFILE == "ci" else (3, 4)


@pytest.fixture(scope="module")
def warehouse_settings(tmp_path_factory: pytest.TempPathFactory) -> Settings:
    """One warehouse for the module: every example makes its own uniquely named tables (and drops them)."""
    return Settings(warehouse=str(Path(tmp_path_factory.mktemp("fast-properties")) / "warehouse"))


def run_stream(spark: Any, settings: Settings, shapes: list[Shape], stream: Stream) -> None:
    scenario = Scenario(spark, settings, shapes)
    try:
        scenario.create(stream.initial)
        for ops in stream.rounds:
            for op in ops:
                scenario.apply(op)
            scenario.refresh_all()
    finally:
        scenario.drop()


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
        "SUM(d) AS s_d, COUNT(v) AS n_v, SUM(v) AS s_v, AVG(x) AS a_x, MAX(k1) AS hi_k1 "
        "FROM {t} s WHERE s.d IS NOT NULL OR s.v > 0 GROUP BY k1, k2",
    ),
    # No COUNT(*): nothing visible says a group vanished.
    Shape(
        "aggregate",
        "SELECT k1, SUM(v) AS s_v, MAX(v) AS hi_v, AVG(v) AS a_v, MIN(d) AS lo_d, MIN(x) AS lo_x "
        "FROM {t} GROUP BY k1",
    ),
    Shape("projection", "SELECT k1, v * 2 AS v2, d, x / 4 AS x4 FROM {t}"),  # no id: duplicate rows
]


@settings(
    max_examples=EXAMPLES,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@example(shapes=EVERY_SHAPE, stream=EVERYTHING)
@given(shapes=st.lists(SHAPES, min_size=1, max_size=MAX_MVS), stream=streams(MAX_ROUNDS))
def test_fast_refresh_equals_the_query_at_its_watermark(
    spark: Any, warehouse_settings: Settings, shapes: list[Shape], stream: Stream
) -> None:
    run_stream(spark, warehouse_settings, shapes, stream)


def test_the_comparison_sees_a_lost_duplicate_a_null_and_float_drift() -> None:
    """The oracle's multiset comparison itself (no Spark): strict except for float noise."""
    rows = [("a", 1, 0.1 + 0.2), ("a", 1, 0.1 + 0.2), (None, None, None)]
    assert multiset_difference(rows, [("a", 1, 0.3), ("a", 1, 0.3), (None, None, None)]) is None
    assert multiset_difference(rows[1:], rows) is not None  # one copy of a duplicate row lost
    assert multiset_difference(rows, [*rows[:2], (None, None, 0.0)]) is not None  # NULL vs 0
    assert multiset_difference(rows, [("a", 1, 0.3 + 1e-6), *rows[1:]]) is not None
    assert multiset_difference([(Decimal("1.25"),)], [(Decimal("1.26"),)]) is not None
