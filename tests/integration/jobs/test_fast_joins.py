"""FAST refresh of MVs over inner equi-joins (real Spark + Delta): the delta rules of a join applied to
the change rows of every base, for projections and aggregates, two and three tables — inserts on
either side, updates that move a row to another join partner, deletes, both sides in one range,
NULL join keys (which never match) and duplicate rows. After every refresh the MV must equal its
query over the bases at the MV's watermark, and the run must say how it was done."""

from __future__ import annotations

from typing import Any

import pytest

from tests.support.check_session import checking_session
from tests.support.run_requests import run_request
from workers import demo_tables as tables
from workers import warehouse
from workers.config import Settings
from workers.jobs import complete as refresh
from workers.jobs import run_stats
from workers.jobs.changes import mvlog
from workers.jobs.fast import join as incremental_join
from workers.jobs.fast import refresh as incremental
from workers.jobs.fast.apply import COMPUTE_STEP
from workers.jobs.spark import held

pytestmark = pytest.mark.integration

ORDERS = "id long, cid long, amount long"
CUSTOMERS = "id long, name string, region string"
REGIONS = "region string, zone string"
PROJECTION = (
    "SELECT o.id, c.name, o.amount * 2 AS doubled FROM orders o JOIN customers c ON o.cid = c.id "
    "WHERE o.amount > 0"
)
THREE = (
    "SELECT o.id AS order_id, name, zone FROM orders o JOIN customers c ON o.cid = c.id "
    "JOIN regions USING (region)"
)
AGGREGATE = (
    "SELECT c.region, COUNT(*) AS n, SUM(o.amount) AS total, MIN(o.amount) AS lo, AVG(o.amount) AS mean "
    "FROM orders o JOIN customers c ON o.cid = c.id WHERE c.name <> 'gone' GROUP BY c.region"
)


@pytest.fixture(params=["keys as a filter", "keys as ranges, frames on the executors", "keys by semi-join"])
def narrowing(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """A test that takes it runs three ways: the change rows' join keys pushed into the other side's
    read as values, the small frames held on the driver; (as for a large change set) the keys as
    ranges of values (past ``KEY_FILTER_LIMIT``) and the frames kept on the executors; and the keys
    as a semi-join (past ``RANGE_KEYS_LIMIT`` too). (The others run the first way only: they test
    shapes, not the narrowing. Frames on the executors under a rewrite merge:
    tests/integration/jobs/test_fast_plans.py.)"""
    if request.param != "keys as a filter":
        monkeypatch.setattr(incremental_join, "KEY_FILTER_LIMIT", 0)
    if request.param == "keys as ranges, frames on the executors":
        monkeypatch.setattr(held, "DRIVER_ROWS_LIMIT", 0)
    if request.param == "keys by semi-join":
        monkeypatch.setattr(incremental_join, "RANGE_KEYS_LIMIT", 0)
    return str(request.param)


def _order(i: int, cid: int | None, amount: int | None) -> dict[str, Any]:
    return {"id": i, "cid": cid, "amount": amount}


def _customer(i: int | None, name: str, region: str | None) -> dict[str, Any]:
    return {"id": i, "name": name, "region": region}


def _dml(spark: Any, settings: Settings, statement: str) -> None:
    names = ("orders", "customers", "regions")
    spark.sql(statement.format(**{n: f"delta.`{warehouse.table_path(settings, n)}`" for n in names}))


def _build(
    spark: Any, settings: Settings, mv: str, query: str, bases: dict[str, tuple[str, list[Any]]]
) -> None:
    for name, (schema, rows) in bases.items():
        tables.create_table(spark, settings, name, rows, schema)
        mvlog.create_mv_log(spark, settings, name)
    assert refresh.refresh_complete(spark, settings, run_request(settings, mv, query, run="build")).applied


def _fast(spark: Any, settings: Settings, mv: str, query: str, run: str) -> str:
    """A FAST refresh, checked against the query over the bases at the MV's new watermark."""
    request = run_request(settings, mv, query, mode="FAST", run=run, job_group=f"{mv}-{run}")
    result = incremental.refresh_incremental(spark, settings, request)
    assert result.applied and result.message.startswith("incremental:"), result.message
    assert result.watermark_after == dict(request.pinned)
    watermark = refresh.read_watermark(spark, settings, mv)
    assert watermark is not None and watermark.watermark == dict(request.pinned)
    oracle = checking_session(spark)
    for base, version in watermark.watermark.items():
        path = warehouse.table_path(settings, base)
        oracle.read.format("delta").option("versionAsOf", version).load(path).createTempView(base)
    want = sorted((tuple(r) for r in oracle.sql(query).collect()), key=repr)
    got = sorted((tuple(r.values()) for r in tables.read_table(spark, settings, mv)), key=repr)
    assert got == want, f"{run}: {result.message}"
    return result.message


def _operation(spark: Any, settings: Settings, mv: str) -> str:
    return str(tables.delta_history(spark, settings, mv)[0]["operation"])


def test_a_two_table_projection_follows_both_sides(spark: Any, local_settings: Settings) -> None:
    s = local_settings
    customers = [_customer(1, "ann", "eu"), _customer(2, "bob", "us"), _customer(None, "nil", "eu")]
    orders = [_order(10, 1, 5), _order(11, 1, 5), _order(12, 2, 3), _order(13, None, 4), _order(14, 2, 0)]
    _build(spark, s, "mv_p", PROJECTION, {"orders": (ORDERS, orders), "customers": (CUSTOMERS, customers)})
    assert len(tables.read_table(spark, s, "mv_p")) == 3  # NULL keys never match; amount 0 filtered

    # Inserts only, on both sides and over several commits: a new customer whose order already
    # exists (old orders ⋈ new customer), new orders of old and new customers, an exact duplicate.
    tables.append(spark, s, "customers", [_customer(3, "cy", "ap"), _customer(None, "nul", "us")])
    tables.append(spark, s, "orders", [_order(15, 3, 7), _order(10, 1, 5), _order(16, None, 1)])
    tables.append(spark, s, "orders", [_order(17, 4, 2)])  # customer 4 comes next
    tables.append(spark, s, "customers", [_customer(4, "di", "eu")])
    message = _fast(spark, s, "mv_p", PROJECTION, "i1")
    assert "orders v1 -> v3, customers v1 -> v3: append: 7 rows inserted" in message, message
    assert _operation(spark, s, "mv_p") == "WRITE"

    # Both sides in one range: an order moves to another customer (its join key), a customer is
    # renamed, another deleted (its orders leave the MV), one of two equal orders deleted.
    _dml(spark, s, "UPDATE {orders} SET cid = 2 WHERE id = 15")
    _dml(spark, s, "UPDATE {customers} SET name = 'ann2' WHERE id = 1")
    _dml(spark, s, "DELETE FROM {customers} WHERE id = 4")
    _dml(spark, s, "DELETE FROM {orders} WHERE id = 11")
    message = _fast(spark, s, "mv_p", PROJECTION, "i2")
    assert "rewrite merge" in message, message
    assert _operation(spark, s, "mv_p") == "MERGE"
    # The jobs that compute the change are told apart from the change read (profiles, the benchmark).
    assert run_stats.group_stats(spark, "mv_p-i2", step=COMPUTE_STEP).jobs > 0

    # A join key set to NULL and back, a customer gaining the NULL-keyed order's key.
    _dml(spark, s, "UPDATE {customers} SET id = NULL WHERE id = 2")
    _dml(spark, s, "UPDATE {orders} SET cid = 1 WHERE cid IS NULL")
    _fast(spark, s, "mv_p", PROJECTION, "i3")


def test_a_three_table_join_with_using(spark: Any, local_settings: Settings) -> None:
    s = local_settings
    bases = {
        "orders": (ORDERS, [_order(1, 1, 5), _order(2, 2, 6), _order(3, 1, 7)]),
        "customers": (CUSTOMERS, [_customer(1, "ann", "eu"), _customer(2, "bob", "us")]),
        "regions": (REGIONS, [{"region": "eu", "zone": "emea"}, {"region": "us", "zone": "amer"}]),
    }
    _build(spark, s, "mv_3", THREE, bases)
    # All three bases change in one range; a region's zone changes under existing orders.
    tables.append(spark, s, "orders", [_order(4, 2, 1)])
    _dml(spark, s, "UPDATE {regions} SET zone = 'north-america' WHERE region = 'us'")
    _dml(spark, s, "UPDATE {customers} SET region = 'us' WHERE id = 1")
    _dml(spark, s, "DELETE FROM {orders} WHERE id = 2")
    message = _fast(spark, s, "mv_3", THREE, "i1")
    assert "orders v1 -> v3, customers v1 -> v2, regions v1 -> v2" in message, message
    # Only one base changes: the others are read at one version.
    tables.append(spark, s, "regions", [{"region": "ap", "zone": "apac"}])
    tables.append(spark, s, "customers", [_customer(3, "cy", "ap")])
    _fast(spark, s, "mv_3", THREE, "i2")


def test_an_aggregate_over_a_join_merges_the_changed_groups(
    spark: Any, local_settings: Settings, narrowing: str
) -> None:
    s = local_settings
    customers = [_customer(1, "ann", "eu"), _customer(2, "bob", "us"), _customer(3, "cy", None)]
    orders = [
        _order(i, cid, amount) for i, (cid, amount) in enumerate([(1, 5), (1, 2), (2, 3), (3, 4), (None, 9)])
    ]
    _build(spark, s, "mv_a", AGGREGATE, {"orders": (ORDERS, orders), "customers": (CUSTOMERS, customers)})
    # An order moves from eu to us, eu's MIN is deleted, a customer moves region (all its orders
    # move group), a new customer with a new group, and one filtered out by WHERE.
    _dml(spark, s, "UPDATE {orders} SET cid = 2 WHERE id = 0")
    _dml(spark, s, "DELETE FROM {orders} WHERE id = 1")
    _dml(spark, s, "UPDATE {customers} SET region = 'eu' WHERE id = 3")
    tables.append(spark, s, "customers", [_customer(4, "di", "ap"), _customer(5, "gone", "ap")])
    tables.append(spark, s, "orders", [_order(7, 4, 8), _order(8, 5, 1), _order(9, 4, 8)])
    message = _fast(spark, s, "mv_a", AGGREGATE, "i1")
    assert "keyed merge" in message and "recomputed from the base" in message, message
    # A whole group vanishes (its customer is deleted); NULL-region group stays empty.
    _dml(spark, s, "DELETE FROM {customers} WHERE region = 'ap'")
    _fast(spark, s, "mv_a", AGGREGATE, "i2")


def test_a_base_without_an_mv_log_is_refreshed_completely_saying_why(
    spark: Any, local_settings: Settings
) -> None:
    s = local_settings
    tables.create_table(spark, s, "orders", [_order(1, 1, 5)], ORDERS)
    tables.create_table(spark, s, "customers", [_customer(1, "ann", "eu")], CUSTOMERS)
    mvlog.create_mv_log(spark, s, "orders")
    assert refresh.refresh_complete(spark, s, run_request(s, "mv_n", PROJECTION, run="build")).applied
    tables.append(spark, s, "orders", [_order(2, 1, 6)])
    request = run_request(s, "mv_n", PROJECTION, mode="FAST", run="i1")
    assert incremental.fast_refresh_blocker(spark, s, request) == "complete: no MV log on customers"
