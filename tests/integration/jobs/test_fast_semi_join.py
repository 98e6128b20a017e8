"""Semi and anti joins and LEFT JOINs kept by per-key match counts
(``workers.jobs.fast.operators.semi_join``) are proven equal to recomputation.

EXISTS / NOT EXISTS correlated by one key equality with conditions on the subquery's own rows (TPC-H
Q4's, Q22's forms), and IN over a subquery with its own condition, under an aggregate and as the
MV's rows, and a LEFT JOIN read only by COUNT of one column (Q13's form), over three bases that all
change (``FLIPPING``: keys gaining their first match and losing their last in steady runs, NULL keys,
duplicates, a key moved, several commits between refreshes, a purged log, a complete refresh whose
next FAST run catches the counts up from their own run; and generated streams),
through the real jobs on real Spark and Delta. The counts are kept whatever their rows per key
(``MIN_ROWS_PER_KEY`` 0: the test's tables have a few rows a key; at the default the MV declines them
and the keyed recompute runs, which ``test_fast_tree`` proves); every MV equals its query at its
watermark after every refresh, and some run of each changed its counts at a key.
"""

from __future__ import annotations

import re
from decimal import Decimal
from typing import Any
from unittest import mock

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from tests.support.fast_cases import run_stream
from tests.support.fast_checks import phases_for_ci
from tests.support.fast_shapes import Shape
from tests.support.fast_streams import (
    Delete,
    DeleteAll,
    DeleteGroup,
    Insert,
    On,
    Purge,
    Recompute,
    Stream,
    Update,
    streams,
)
from workers.config import Settings
from workers.jobs.delta import arrow as rs_arrow
from workers.jobs.fast.operators import semi_join

pytestmark = pytest.mark.integration

COUNTED_SHAPES = [
    # Q4's form: EXISTS with a condition on the subquery's own rows, under an aggregate over a join;
    # a condition on the outer input alone narrows the keys (``Keyed.outer_keys``).
    Shape(
        "tree",
        "SELECT a.k1, COUNT(*) AS n, SUM(a.v + c.v) AS s FROM {t0} a JOIN {t2} c ON c.k1 = a.k1 "
        "WHERE a.v > 0 AND EXISTS (SELECT * FROM {t1} b WHERE b.k2 = a.k2 AND b.v > 2) GROUP BY a.k1",
        3,
    ),
    # One key ties the three inputs that change (``keyed_block``: the block recomputed for the keys
    # the changes hold, the key sets' flips among them).
    Shape(
        "tree",
        "SELECT a.k1, a.v, c.v AS cv FROM {t0} a JOIN {t2} c ON c.k1 = a.k1 WHERE EXISTS (SELECT * "
        "FROM {t1} b WHERE b.k1 = a.k1 AND b.v > 2)",
        3,
    ),
    # Q22's form: NOT EXISTS without own conditions beside an IN with one, the MV the block's rows
    # (NULL outer keys: kept by NOT EXISTS, dropped by IN).
    Shape(
        "tree",
        "SELECT a.id, a.k1, a.v FROM {t0} a WHERE NOT EXISTS (SELECT * FROM {t2} c WHERE c.k1 = a.k1) "
        "AND a.k2 IN (SELECT b.k2 FROM {t1} b WHERE b.d IS NOT NULL)",
        3,
    ),
    # Q13's form: a LEFT JOIN read only by COUNT of a column of its right side (NULLs in b.d: those
    # matches count no more than a missing one), under a derived aggregate by the join's key (in a
    # round where only b changes, its change rows are the recomputed groups), counted again at the top.
    Shape(
        "tree",
        "SELECT x.n, COUNT(*) AS c FROM (SELECT a.k1, COUNT(b.d) AS n FROM {t0} a JOIN {t2} c "
        "ON c.k1 = a.k1 LEFT JOIN {t1} b ON b.k1 = a.k1 AND b.v > 2 GROUP BY a.k1) x GROUP BY x.n",
        3,
    ),
    # Grouped by another key than the LEFT JOIN's (the groups its keys reach recomputed), COUNT in
    # HAVING too, the MV the derived table's rows.
    Shape(
        "tree",
        "SELECT x.k1, x.n FROM (SELECT a.k1, COUNT(b.d) AS n FROM {t0} a JOIN {t2} c ON c.k2 = a.k2 "
        "LEFT JOIN {t1} b ON b.k2 = a.k2 AND b.v > 2 GROUP BY a.k1 HAVING COUNT(b.d) <> 1) x",
        3,
    ),
]


# Keys that gain their first match and lose their last in runs that keep the counts (not only in the
# first, which builds them): EXISTS's k2 and NOT EXISTS's k1 flip both ways, with duplicates, NULL
# keys, a key moved, several commits between refreshes and a purged log.
FLIPPING = Stream(
    Insert(
        (
            ("a", 0, 5, Decimal("1.25"), 0.1),
            ("b", 1, 2, None, 2 / 3),
            (None, 2, 3, Decimal("0.00"), None),
            ("c", None, 4, Decimal("3.10"), 1.5),
        ),
        (0,),
    ),
    (
        (On(1, Insert((("x", 2, 9, Decimal("1.25"), 0.25),))), On(0, Insert((("d", 1, 6, None, 0.5),)))),
        (
            On(1, Insert((("y", 1, 7, Decimal("2.00"), None), ("y", 3, 1, None, None)))),  # 1 gains
            On(1, DeleteGroup("a")),  # 0 loses its one match
            # The next FAST run catches the counts up across it: t1's change above, then the run's.
            Recompute(),
            On(2, Insert((("b", 5, 1, None, 0.1), (None, 5, 1, None, 0.1)))),  # b gains; NULL none
            On(2, Update(0, (("k1", "d"),))),  # a loses its one match, d gains one
        ),
        (
            On(1, Insert((("z", 0, 8, Decimal("9.99"), 1.0),), (0,))),  # 0 again, two copies
            On(1, Update(1, (("k2", 4),))),  # 2's one match moves to 4
            On(2, DeleteAll()),  # every key loses its last
            On(1, Purge()),
            On(0, Update(1, (("k1", "a"),))),
        ),
        (On(2, Insert((("a", 0, 1, None, None), ("a", 0, 1, None, None)))), On(1, Delete(0))),
        # Caught up with no counted input changed since the counts' run: carried as they are, and the
        # run after keeps them.
        (
            On(0, Insert((("b", 1, 4, Decimal("1.00"), 0.5),))),
            Recompute(),
            On(0, Insert((("c", 3, 2, None, None),))),
        ),
        (On(0, Insert((("d", 0, 1, None, None),))),),
    ),
    others=(
        Insert((("a", 0, 3, Decimal("1.25"), 0.25), ("a", 1, 1, None, -7.75), ("a", None, 5, None, 0.0))),
        Insert((("a", 0, 2, None, 0.1), ("c", 1, 3, Decimal("3.10"), None))),
    ),
)


@settings(phases=phases_for_ci(), suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@example(case=(COUNTED_SHAPES, FLIPPING))
@given(
    case=st.tuples(
        st.lists(st.sampled_from(COUNTED_SHAPES), min_size=1, max_size=2, unique=True), streams(4, 3)
    )
)
def test_semi_and_anti_joins_by_key_counts_equal_the_query_at_its_watermark(
    spark: Any, warehouse_settings: Settings, case: tuple[list[Shape], Stream]
) -> None:
    chosen, stream = case
    with mock.patch.object(semi_join, "MIN_ROWS_PER_KEY", 0):
        log = run_stream(spark, warehouse_settings, chosen, stream)
    if stream is FLIPPING:  # each MV's keys flipped by counts a run kept, not only by those it rebuilt
        for runs in incremental_runs(log).values():
            steady = [line for line in runs if "key counts: state rebuilt" not in line]
            assert any(FLIPS.search(line) for line in steady), runs
            # After each complete refresh, its counts caught up from their own run, not rebuilt, and
            # kept by the run after the last.
            assert sum(CAUGHT_UP in line for line in runs) == 2, runs
            assert not any("key counts: state rebuilt" in line for line in runs[-2:]), runs


CAUGHT_UP = "key counts: caught up from before the complete run"
FLIPS = re.compile(r"by key counts: ([1-9]\d* keys gained|\d+ keys gained a first match, [1-9])")


def incremental_runs(log: list[str]) -> dict[str, list[str]]:
    """Each MV's incremental runs' lines of a scenario's log, in order."""
    found: dict[str, list[str]] = {}
    for line in log:
        if line.startswith("refresh ") and "incremental:" in line:
            found.setdefault(line.split()[1], []).append(line)
    return found


def test_counts_under_the_rows_a_key_they_need_are_declined_once_and_not_counted_again(
    spark: Any, warehouse_settings: Settings
) -> None:
    log = run_stream(spark, warehouse_settings, COUNTED_SHAPES, FLIPPING)
    found = incremental_runs(log)
    assert len(found) == len(COUNTED_SHAPES), log
    for runs in found.values():
        declined = [line for line in runs if "key counts not kept" in line]
        assert len(declined) == 1 and declined[0] == runs[0], runs  # the first FAST run decides
        assert not any("key counts" in line for line in runs[1:]), runs
        assert all("recompute of the rows whose" in line for line in runs[1:]), runs


def test_counts_past_the_size_read_whole_are_read_by_spark_at_their_version(
    spark: Any, warehouse_settings: Settings
) -> None:
    with (
        mock.patch.object(semi_join, "MIN_ROWS_PER_KEY", 0),
        mock.patch.object(rs_arrow, "READ_LIMIT_BYTES", 0),
    ):
        log = run_stream(spark, warehouse_settings, COUNTED_SHAPES[:1], FLIPPING)
    (runs,) = incremental_runs(log).values()
    assert any(FLIPS.search(line) for line in runs if "key counts: state rebuilt" not in line), runs
