"""The shared cases of the FAST property tests (``tests/integration/jobs/test_fast_*``): the two
change streams every kind of MV is checked under (``EVERYTHING`` over one base, ``JOINED`` over
three), and ``run_stream``, which runs MVs of some shapes through a stream and checks each after
every refresh (``fast_checks.Scenario``), and that every incremental run names its plan."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

from tests.support.fast_checks import Scenario
from tests.support.fast_shapes import Shape
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
    Recompute,
    Stream,
    Update,
)
from workers.config import Settings

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


def run_stream(spark: Any, settings: Settings, shapes: list[Shape], stream: Stream) -> list[str]:
    """``stream`` through MVs of ``shapes`` (``Scenario``: each equal to its query after every
    refresh); every incremental run names its plan. Returns what happened (``Scenario.log``)."""
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
    return scenario.log


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
        (  # a group vanishes, another merges into it, a complete refresh (the FAST run after it
            # catches its helper state up across it), then everything goes and comes back
            Purge(),
            DeleteGroup("b"),
            MoveGroup(None, "a"),
            Recompute(),
            Delete(0),
            DeleteAll(),
            Insert((("a", 0, 1, Decimal("1.25"), 0.1), (None, None, None, None, None)), copies=(0,)),
        ),
    ),
)


# Joins: both sides in one range, a join key moved, NULL keys, a many-to-many key, a side emptied and
# refilled, a purge of each log, a complete refresh between two FAST ones.
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
            On(0, Recompute()),  # the FAST run after it catches a join aggregate's state up across it
            On(2, Delete(0)),
        ),
    ),
    others=(
        Insert((("a", 0, 1, Decimal("1.25"), 0.25), ("a", 1, 8, None, -7.75), (None, 1, 2, None, 0.0)), (1,)),
        Insert((("a", 0, 2, None, 0.1), ("b", 1, 3, Decimal("3.10"), None), (None, None, 5, None, 2 / 3))),
    ),
)
