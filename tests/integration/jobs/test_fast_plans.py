"""Which FAST plan a run takes, and that each stays exact (real Spark + Delta): insert-only changes
to a projection are appended (no MERGE); changes whose net effect only adds rows are appended too;
aggregates are merged by their GROUP BY key, the MERGE's source holding only the changed groups —
with NULL keys, duplicates, updates moving rows between groups and deletes of a group's MIN."""

from __future__ import annotations

from typing import Any

import pytest

from tests.support.run_requests import run_request
from workers import demo_tables as tables
from workers import warehouse
from workers.config import Settings
from workers.jobs import complete as refresh
from workers.jobs.changes import mvlog
from workers.jobs.delta import arrow as rs_arrow
from workers.jobs.fast import apply as incremental_apply
from workers.jobs.fast import refresh as incremental
from workers.jobs.spark import held as held_frames

pytestmark = pytest.mark.integration

SCHEMA = "id long, region string, amount long"
PROJECTION = "SELECT region, amount FROM sales WHERE amount > 1"
AGGREGATE = (
    "SELECT region, COUNT(*) AS n, COUNT(amount) AS n_amount, SUM(amount) AS total, MIN(amount) AS lo "
    "FROM sales GROUP BY region"
)


@pytest.fixture(autouse=True, params=["on the driver", "as RDDs on the driver", "on the executors"])
def held(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Each plan three ways: its small frames held on the driver as local relations; as RDDs of rows on
    the driver, as a change set of thousands of rows is (past ``held.LOCAL_ROWS``); and spilled to the
    executors as a large change set's are (``Scope.in_memory`` past ``held.DRIVER_ROWS_LIMIT``; the
    changed groups' MV rows then found by a semi-join, past ``GROUP_FILTER_LIMIT``, not by a filter
    on their keys)."""
    if request.param == "as RDDs on the driver":
        monkeypatch.setattr(held_frames, "LOCAL_ROWS", 0)
        monkeypatch.setattr(rs_arrow, "LOCAL_ROWS", 0)
    if request.param == "on the executors":
        monkeypatch.setattr(held_frames, "DRIVER_ROWS_LIMIT", 0)
        monkeypatch.setattr(incremental_apply, "GROUP_FILTER_LIMIT", 0)
    return str(request.param)


def _row(i: int, region: str | None, amount: int | None) -> dict[str, Any]:
    return {"id": i, "region": region, "amount": amount}


def _dml(spark: Any, settings: Settings, statement: str) -> None:
    spark.sql(statement.format(sales=f"delta.`{warehouse.table_path(settings, 'sales')}`"))


def _fast(spark: Any, settings: Settings, mv: str, query: str, run: str) -> refresh.RefreshResult:
    request = run_request(settings, mv, query, mode="FAST", run=run)
    result = incremental.refresh_incremental(spark, settings, request)
    assert result.applied, result.message
    return result


def _rows(spark: Any, settings: Settings, name: str) -> list[tuple[Any, ...]]:
    return sorted((tuple(r.values()) for r in tables.read_table(spark, settings, name)), key=repr)


def _query_now(spark: Any, settings: Settings, query: str) -> list[tuple[Any, ...]]:
    session = spark.newSession()  # its own temp view `sales`: the base as it is now
    session.read.format("delta").load(warehouse.table_path(settings, "sales")).createTempView("sales")
    return sorted((tuple(r) for r in session.sql(query).collect()), key=repr)


def _last_commit(spark: Any, settings: Settings, mv: str) -> dict[str, Any]:
    return tables.delta_history(spark, settings, mv)[0]


def _setup(spark: Any, settings: Settings, mv: str, query: str, rows: list[dict[str, Any]]) -> None:
    tables.create_table(spark, settings, "sales", rows, SCHEMA)
    mvlog.create_mv_log(spark, settings, "sales")
    request = run_request(settings, mv, query, run="build")
    assert refresh.refresh_complete(spark, settings, request).applied


def test_insert_only_changes_to_a_projection_are_appended(spark: Any, local_settings: Settings) -> None:
    s = local_settings
    _setup(spark, s, "mv_p", PROJECTION, [_row(1, "eu", 5), _row(2, None, 3), _row(3, "us", 1)])
    # Two commits of inserts, with duplicates of a row the MV holds, a NULL and a filtered-out row.
    tables.append(spark, s, "sales", [_row(4, "eu", 5), _row(5, "eu", 5), _row(6, None, 3)])
    tables.append(spark, s, "sales", [_row(7, "ap", 0), _row(8, "us", None)])
    result = _fast(spark, s, "mv_p", PROJECTION, "i1")
    assert result.message.startswith("incremental: 5 change rows applied"), result.message
    assert "append: 5 rows inserted" in result.message, result.message
    assert _last_commit(spark, s, "mv_p")["operation"] == "WRITE"
    assert _rows(spark, s, "mv_p") == _query_now(spark, s, PROJECTION)
    assert _rows(spark, s, "mv_p").count(("eu", 5)) == 3

    # An update the MV cannot see (a column it does not show) plus an insert: the net effect only
    # adds a row, so it is appended too, after one pass over the change rows.
    _dml(spark, s, "UPDATE {sales} SET id = id + 100 WHERE id = 1")
    tables.append(spark, s, "sales", [_row(9, "eu", 5)])
    grown = _fast(spark, s, "mv_p", PROJECTION, "i2")
    assert "3 change rows applied" in grown.message and "append: 1 rows added" in grown.message, grown.message
    assert _last_commit(spark, s, "mv_p")["operation"] == "WRITE"
    assert _rows(spark, s, "mv_p") == _query_now(spark, s, PROJECTION)

    # A delete of one of four equal rows needs the rewrite.
    _dml(spark, s, "DELETE FROM {sales} WHERE id = 4")
    shrunk = _fast(spark, s, "mv_p", PROJECTION, "i3")
    assert "rewrite merge: 1 distinct rows changed, 1 rewritten" in shrunk.message, shrunk.message
    assert _last_commit(spark, s, "mv_p")["operation"] == "MERGE"
    assert _rows(spark, s, "mv_p") == _query_now(spark, s, PROJECTION)
    assert _rows(spark, s, "mv_p").count(("eu", 5)) == 3


def test_aggregates_merge_only_the_changed_groups_by_key(spark: Any, local_settings: Settings) -> None:
    s = local_settings
    initial = [_row(i, region, i) for i, region in enumerate(["eu", "us", "ap", "cn", "fr", None, "eu"], 1)]
    _setup(spark, s, "mv_a", AGGREGATE, initial)
    # Inserts into two groups (one NULL key, duplicates), a new group.
    tables.append(
        spark, s, "sales", [_row(8, None, 2), _row(9, None, 2), _row(10, "eu", 9), _row(11, "de", 4)]
    )
    inserted = _fast(spark, s, "mv_a", AGGREGATE, "i1")
    assert (
        "keyed merge: linear over the base's change rows: 3 groups changed, 0 recomputed" in inserted.message
    ), inserted.message
    merge = _last_commit(spark, s, "mv_a")
    assert merge["operation"] == "MERGE"
    metrics = merge["operationMetrics"]
    assert int(metrics["numSourceRows"]) == 3  # only the changed groups, never the whole MV
    assert int(metrics["numTargetRowsUpdated"]) == 2 and int(metrics["numTargetRowsInserted"]) == 1
    assert _rows(spark, s, "mv_a") == _query_now(spark, s, AGGREGATE)

    # eu's MIN (1) is deleted, and one of the NULL group's two MINs (2): both groups are recomputed
    # from the base, only they; us's one row moves to ap (us vanishes by COUNT(*), ap's MIN drops).
    _dml(spark, s, "DELETE FROM {sales} WHERE id IN (1, 9)")
    _dml(spark, s, "UPDATE {sales} SET region = 'ap' WHERE id = 2")
    moved = _fast(spark, s, "mv_a", AGGREGATE, "i2")
    assert (
        "keyed merge: linear over the base's change rows: 4 groups changed, 2 recomputed" in moved.message
    ), moved.message
    metrics = _last_commit(spark, s, "mv_a")["operationMetrics"]
    assert int(metrics["numSourceRows"]) == 4 and int(metrics["numTargetRowsDeleted"]) == 1
    rows = _rows(spark, s, "mv_a")
    assert rows == _query_now(spark, s, AGGREGATE)
    by_region = {r[0]: r for r in rows}
    assert "us" not in by_region and by_region["eu"] == ("eu", 2, 2, 16, 7)
    assert by_region[None] == (None, 2, 2, 8, 2)
