"""Frames held on the driver (``workers.jobs.spark.held``): the distinct rows of held rows, made
distinct on the driver without a Spark job and equal to Spark's ``distinct``; a frame its caller
expects large computed once (real Spark)."""

from __future__ import annotations

import datetime
from decimal import Decimal
from typing import Any

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from tests.support.fast_checks import phases_for_ci
from workers.jobs.spark import held
from workers.jobs.spark.groups import job_group, spark_jobs

pytestmark = pytest.mark.integration

SCHEMA = "k long, name string, price decimal(10,2), day date, ratio double"

_rows = st.tuples(
    st.one_of(st.none(), st.integers(-2, 2)),
    st.one_of(st.none(), st.sampled_from(["", "a", "é"])),
    st.one_of(st.none(), st.sampled_from([Decimal("1.50"), Decimal("-0.01")])),
    st.one_of(st.none(), st.sampled_from([datetime.date(2000, 1, 1), datetime.date(1999, 12, 31)])),
    st.one_of(st.none(), st.sampled_from([0.0, 1.5, float("nan")])),
)


def _multiset(frame: Any) -> list[str]:
    return sorted(repr(tuple(r)) for r in frame.collect())


# Duplicates of every column's values, NULLs, NaN: what Spark's distinct folds together.
_EXAMPLE = [
    (1, "a", Decimal("1.50"), datetime.date(2000, 1, 1), float("nan")),
    (1, "a", Decimal("1.50"), datetime.date(2000, 1, 1), float("nan")),
    (None, None, None, None, None),
    (None, None, None, None, None),
    (2, "é", Decimal("-0.01"), datetime.date(1999, 12, 31), 1.5),
    (-1, "", Decimal("1.50"), None, 0.0),
]


@settings(phases=phases_for_ci(), deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@example(rows=_EXAMPLE, where=True)
@example(rows=_EXAMPLE, where=False)
@given(rows=st.lists(_rows, max_size=12), where=st.booleans())
def test_distinct_held_rows_equal_sparks_distinct_without_a_job(
    spark: Any, rows: list[tuple[Any, ...]], where: bool
) -> None:
    local = held.hold(spark, spark.createDataFrame(rows, SCHEMA))
    projected = local.where("k IS NULL OR k > 0") if where else local
    projected = projected.select("k", "name", "price", "day", "ratio")
    group = f"held-distinct-{id(rows)}-{where}"
    with job_group(spark, group, "hold_distinct of driver rows"):
        found, count = held.hold_distinct(spark, projected)
        distinct = _multiset(found)  # held on the driver: no job either
    assert spark_jobs(spark, group) == 0  # made distinct on the driver
    assert count == len(distinct)
    assert distinct == _multiset(projected.distinct())


def test_distinct_rows_of_a_frame_not_held_are_made_distinct_by_spark(spark: Any) -> None:
    frame = spark.range(10).selectExpr("id % 3 AS k")  # not a local relation: one job
    found, count = held.hold_distinct(spark, frame)
    assert count == 3
    assert sorted(r.k for r in found.collect()) == [0, 1, 2]


def test_a_join_of_held_rows_is_not_local_without_optimizing_it(spark: Any) -> None:
    """Only a chain of projections, filters and aliases over one local relation can fold into one:
    anything else is known not local from the analyzed plan, the optimizer left for the query that
    runs it (``hold_distinct`` optimizes the distinct again)."""
    left = held.hold(spark, spark.createDataFrame([(1, "a"), (2, "b")], "k long, v string"))
    right = held.hold(spark, spark.createDataFrame([(1, 10)], "k long, n long"))
    joined = left.join(right, "k").select("k", "n")
    assert not held._is_local(joined)  # noqa: SLF001
    assert "optimization" not in joined._jdf.queryExecution().tracker().phases().keySet().toString()  # noqa: SLF001
    chained = left.alias("l").where("k > 1").select("v").limit(5).hint("broadcast")
    assert held._is_local(chained)  # noqa: SLF001 - folded by the optimizer, asked
    found, count = held.hold_distinct(spark, joined)
    assert count == 1 and [tuple(r) for r in found.collect()] == [(1, 10)]


def test_held_rows_narrowed_to_some_columns_are_a_local_relation_of_them_without_a_job(spark: Any) -> None:
    """Change rows held with every base column, narrowed to the columns a query reads: projected once,
    on the driver, into a local relation of those columns only (a query over it then has no projection
    of its rows left to fold); a frame not held stays a lazy projection."""
    local = held.hold(spark, spark.createDataFrame(_EXAMPLE, SCHEMA))
    with job_group(spark, "held-narrowed", "narrow held rows"):
        narrowed = held.narrowed(spark, local, ["k", "day"])
        rows = _multiset(narrowed)
    assert spark_jobs(spark, "held-narrowed") == 0
    assert rows == _multiset(local.select("k", "day"))
    plan = narrowed._jdf.queryExecution().analyzed()  # noqa: SLF001
    assert plan.getClass().getSimpleName() == "LocalRelation" and plan.output().size() == 2
    assert held.narrowed(spark, local, local.columns) is local  # every column: as it is
    lazy = held.narrowed(spark, spark.range(3).selectExpr("id AS k", "id * 2 AS v"), ["v"])
    assert lazy.columns == ["v"] and sorted(r.v for r in lazy.collect()) == [0, 2, 4]


def _counted_frame(spark: Any, rows: int) -> tuple[Any, Any]:
    """``rows`` rows through a UDF that counts its calls: how often the frame was computed."""
    from pyspark.sql import functions as F

    calls = spark.sparkContext.accumulator(0)

    def seen(value: int) -> int:
        calls.add(1)
        return value

    counting = F.udf(seen, "long")
    return spark.range(rows, numPartitions=3).select(counting("id").alias("k")), calls


@pytest.mark.parametrize(("rows", "limit"), [(40, 10), (8, 10)])
def test_a_large_frame_is_computed_once_and_held_whatever_its_size(
    spark: Any, monkeypatch: pytest.MonkeyPatch, rows: int, limit: int
) -> None:
    monkeypatch.setattr(held, "DRIVER_ROWS_LIMIT", limit)
    frame, calls = _counted_frame(spark, rows)
    found, count = held.hold_counted(spark, frame, large=True)
    assert count == rows
    assert sorted(r.k for r in found.collect()) == list(range(rows))
    assert calls.value == rows  # one pass: neither the count nor the reads compute it again
    assert held._is_local(found) == (rows <= limit)  # noqa: SLF001 - small: on the driver after all
