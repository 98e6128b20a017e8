"""An MV whose query leaves an expression unnamed (TPC-H Q18's ``sum(l_quantity)``): Spark names the
column by its text, which Delta stores only with column mapping. The MV writer turns it on for that
table alone; a COMPLETE refresh overwrites it again, and an MV log on the MV (change data feed, its
``__mlog`` table with column mapping too) carries the change rows under that name."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.support.run_requests import run_request
from workers import demo_tables as tables
from workers import warehouse
from workers.config import Settings
from workers.jobs import complete
from workers.jobs.changes import mvlog

pytestmark = pytest.mark.integration


def _mapping(spark: Any, settings: Settings, name: str) -> str:
    path = warehouse.table_path(settings, name)
    details = spark.sql(f"DESCRIBE DETAIL delta.`{path}`").collect()[0]
    return str(details["properties"].get("delta.columnMapping.mode", "none"))


def test_an_unnamed_expression_column_is_stored_by_column_mapping_and_logged(
    spark: Any, tmp_path: Path
) -> None:
    settings = Settings(warehouse=str(tmp_path / "warehouse"))
    tables.create_table(spark, settings, "t", [{"k": "a", "v": 1}, {"k": "a", "v": 2}], "k string, v bigint")
    mvlog.create_mv_log(spark, settings, "t")
    query = "SELECT k, sum(v) FROM t GROUP BY k"
    assert complete.refresh_complete(spark, settings, run_request(settings, "m", query, run="r1")).applied
    path = warehouse.table_path(settings, "m")
    assert spark.read.format("delta").load(path).columns == ["k", "sum(v)"]
    assert _mapping(spark, settings, "m") == "name" and _mapping(spark, settings, "t") == "none"

    start = mvlog.create_mv_log(spark, settings, "m")  # change data feed on the MV
    assert _mapping(spark, settings, warehouse.mlog_table_name("m")) == "name"
    tables.append(spark, settings, "t", [{"k": "b", "v": 5}])
    assert complete.refresh_complete(spark, settings, run_request(settings, "m", query, run="r2")).applied
    got = {tuple(r) for r in spark.read.format("delta").load(path).collect()}
    assert got == {("a", 3), ("b", 5)}
    latest = warehouse.latest_version(settings, "m")
    assert latest is not None
    changes = mvlog.read_changes(spark, settings, "m", start - 1, latest)
    inserted = {(r["k"], r["sum(v)"]) for r in changes.collect() if r["_change_type"] == "insert"}
    assert ("b", 5) in inserted
