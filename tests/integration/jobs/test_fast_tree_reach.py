"""A FAST run of the operator tree does work that follows the change: a keyed recompute (an aggregate
below the top, a LEFT JOIN's right side) re-derives only the keys the change reaches, however many
there are, and the MV still equals its query at its watermark (``fast_checks.Scenario``).

TPC-H Q13's shape at a scale where the reached keys outnumber the list a read is narrowed by
(``join.KEY_FILTER_LIMIT``): an unchanged small base is held on the driver and was then read whole,
so every customer came back in both signs of the LEFT JOIN's change and reached the top (Q13 at SF 1
applied 300,000 change rows for 3,000 customers reached). The run message counts the change rows
applied at the top and each interior node's (``interior change rows``): neither may exceed both signs
of the customers reached.
"""

from __future__ import annotations

import re
from datetime import date
from decimal import Decimal
from typing import Any

import pytest
from pyspark.sql.types import StructField, StructType

from tests.support.fast_checks import Scenario
from tests.support.fast_shapes import Shape
from tests.support.fast_streams import DeleteGroup, Insert, On, Update
from workers.config import Settings
from workers.jobs.fast.join import KEY_FILTER_LIMIT
from workers.jobs.fast.operators.keyed import KEY, Keys
from workers.jobs.fast.operators.restrict import restricted_rows

pytestmark = pytest.mark.integration

CUSTOMERS = 3 * KEY_FILTER_LIMIT
COLUMNS = ("s", "day", "amount", "n")
REACHED = range(0, 2 * KEY_FILTER_LIMIT + 200, 2)  # every other customer: more than the list holds

# Q13: customers (base 0, key k2) LEFT JOIN orders (base 1) with a filter in the ON clause, counted per
# customer, then customers counted per count.
Q13 = Shape(
    "tree",
    "SELECT n_b, COUNT(*) AS custdist FROM (SELECT a.k2, COUNT(b.id) AS n_b FROM {t0} a "
    "LEFT JOIN {t1} b ON a.k2 = b.k2 AND b.v > 1 GROUP BY a.k2) s GROUP BY n_b",
    2,
)


def _changed(message: str) -> tuple[int, dict[str, int]]:
    """The change rows a run applied at the top, and each interior node's (by its label)."""
    top = re.search(r"incremental: (\d+) change rows applied", message)
    assert top is not None, message
    interior = re.search(r"\(interior change rows: ([^)]*)\)", message)
    assert interior is not None, message
    counted = [entry.rsplit(" ", 1) for entry in interior.group(1).split(", ")]
    return int(top.group(1)), {label: int(rows) for label, rows in counted}


def test_a_keyed_recompute_re_derives_only_the_keys_its_change_reaches(
    spark: Any,
    warehouse_settings: Settings,  # noqa: F811
) -> None:
    scenario = Scenario(spark, warehouse_settings, [Q13])
    customers = Insert(tuple(("c", key, 0, None, None) for key in range(CUSTOMERS)))
    orders = Insert(tuple(("z", key, 2, None, None) for key in range(0, CUSTOMERS, 7)))
    rounds = [
        (  # orders of 1,100 customers, one with a NULL customer, one the ON filter drops, a duplicate
            [
                On(
                    1,
                    Insert(
                        (
                            *(("a", key, 2, None, None) for key in REACHED),
                            ("a", None, 5, None, None),
                            ("b", 1, 0, None, None),
                        ),
                        copies=(0,),
                    ),
                )
            ],
            {*REACHED, 1},
        ),
        (  # those orders deleted (every match of most), one order moved, new customers (base 0 changes)
            [
                On(1, DeleteGroup("a")),
                On(1, Update(0, (("k2", CUSTOMERS - 1),))),
                On(0, Insert(tuple(("c", key, 0, None, None) for key in range(CUSTOMERS, CUSTOMERS + 5)))),
            ],
            {*REACHED, 0, CUSTOMERS - 1, *range(CUSTOMERS, CUSTOMERS + 5)},
        ),
    ]
    try:
        scenario.create(customers, [orders])
        for ops, reached in rounds:
            for op in ops:
                scenario.apply(op)
            scenario.refresh_all()  # every refresh checked against the query at the watermark
            top, interior = _changed(scenario.log[-1])
            assert len(reached) > KEY_FILTER_LIMIT
            assert top <= 2 * len(reached), scenario.log[-1]
            assert interior["aggregate by k2"] <= 2 * len(reached), scenario.log[-1]
    finally:
        scenario.drop()


# TPC-H Q21 and Q18's shape: every input tied by k1 (an inner join, EXISTS and NOT EXISTS correlated to
# either side of it, an IN over an aggregate by k1 with HAVING), a condition on the outer input alone.
ONE_KEY = Shape(
    "tree",
    "SELECT a.k1, COUNT(*) AS n, SUM(b.v) AS s FROM {t0} a JOIN {t1} b ON b.k1 = a.k1 "
    "WHERE EXISTS (SELECT * FROM {t2} c WHERE c.k1 = a.k1 AND c.id <> a.id) "
    "AND NOT EXISTS (SELECT * FROM {t2} d WHERE d.k1 = b.k1 AND d.v > a.v) "
    "AND a.k1 IN (SELECT e.k1 FROM {t1} e GROUP BY e.k1 HAVING SUM(e.v) > 3) AND a.v > 2 GROUP BY a.k1",
    3,
)
_KEYED_BLOCK = re.compile(r"(\d+) changed inputs: the block recomputed by [ab]\.k1 for (\d+) keys")


def test_changed_inputs_tied_by_one_key_recompute_the_block_once_by_it(
    spark: Any,
    warehouse_settings: Settings,  # noqa: F811
) -> None:
    """Where every changed input is tied by one key, the block is recomputed by it for the keys the
    changes reach (``keyed_block``): two copies of the join, not two per changed input; where fewer
    than three inputs change, the sum's terms. Exact either way (checked at every refresh)."""
    scenario = Scenario(spark, warehouse_settings, [ONE_KEY])
    rows = Insert(tuple((k1, 0, v, None, None) for k1 in ("a", "b", "c", None) for v in (1, 3, 5)))
    try:
        scenario.create(rows, [rows, rows])
        # The key "a" reached on all three bases (and "c" on one, NULL on another): one recompute by
        # k1 over three keys at most (the outer condition a.v > 2 keeps those an outer row holds).
        scenario.apply(On(0, Insert((("a", 1, 9, None, None), ("c", 1, 4, None, None)))))
        scenario.apply(On(1, Insert((("a", 1, 2, None, None), (None, 1, 7, None, None)))))
        scenario.apply(On(2, DeleteGroup("a")))
        scenario.refresh_all()
        found = _KEYED_BLOCK.search(scenario.log[-1])
        assert found is not None, scenario.log[-1]
        assert int(found.group(1)) == 5 and int(found.group(2)) <= 3, scenario.log[-1]  # a, b, c, d, e
        scenario.apply(On(1, Insert((("b", 0, 0, None, None),))))  # b and e: three with c and d
        scenario.apply(On(2, Insert((("b", 0, 0, None, None),))))
        scenario.refresh_all()
        found = _KEYED_BLOCK.search(scenario.log[-1])
        assert found is not None and found.groups() == ("4", "1"), scenario.log[-1]
        scenario.apply(On(2, Insert((("c", 0, 8, None, None),))))  # c and d alone: the sum's two terms
        scenario.refresh_all()
        assert _KEYED_BLOCK.search(scenario.log[-1]) is None, scenario.log[-1]
    finally:
        scenario.drop()


def test_a_restriction_lists_every_key_type_exactly_nulls_included(spark: Any) -> None:
    """``restrict.restricted_rows`` over a frame held on the driver: the rows whose column is among
    the keys, no others, for each listed type (strings with quotes and backslashes, dates, decimals,
    BIGINT) and NULL only when asked."""
    odd = ["it's", "back\\slash", "\\'", "plain", None]
    rows = [(s, date(2020, 1, 1 + i), Decimal(f"{i}.25"), i) for i, s in enumerate(odd)]
    frame = spark.createDataFrame(rows, "s string, day date, amount decimal(10,2), n bigint")
    listed = {"s": [*odd[:3], None], "day": [date(2020, 1, 2)], "amount": [Decimal("4.25")], "n": [0, 3]}
    for column, wanted in listed.items():
        dtype = frame.schema[column].dataType
        keys = spark.createDataFrame([(w,) for w in wanted], StructType([StructField(KEY, dtype)]))
        for nulls in (False, True):
            got = restricted_rows(frame, column, Keys(keys, len(wanted)), nulls=nulls, held=True)
            expected = [r for r in rows if r[COLUMNS.index(column)] in wanted]
            if not nulls:
                expected = [r for r in expected if r[COLUMNS.index(column)] is not None]
            assert sorted(map(tuple, got.collect()), key=str) == sorted(expected, key=str), (column, nulls)
