"""MV logs on real Spark + Delta: CDF capture into ``<T>__mlog``, idempotent re-capture, purge
below the safepoint only, retained range and reading changes."""

from __future__ import annotations

from typing import Any

import pytest

from workers import demo_tables as tables
from workers import warehouse
from workers.config import Settings
from workers.jobs.changes import mvlog
from workers.jobs.errors import ChangesNotRetained, TableNotFound

pytestmark = pytest.mark.integration


def _versions(spark: Any, settings: Settings) -> list[tuple[int, str, int]]:
    rows = tables.read_table(spark, settings, "orders__mlog")
    return sorted((r["_commit_version"], r["_change_type"], r["id"]) for r in rows)


def test_capture_and_purge_keep_every_change_at_or_above_the_safepoint(
    spark: Any, local_settings: Settings
) -> None:
    s = local_settings
    path = warehouse.table_path(s, "orders")
    tables.create_table(spark, s, "orders", [{"id": 1, "qty": 1}], "id long, qty long")  # v0
    with pytest.raises(TableNotFound):
        mvlog.capture(spark, s, "orders")

    start = mvlog.create_mv_log(spark, s, "orders")  # v1 enables CDF
    assert start == 1 and mvlog.create_mv_log(spark, s, "orders") == 1  # idempotent
    assert mvlog.retained_from(spark, s, "orders") == 1
    assert warehouse.table_exists(s, "orders__mlog")
    columns = spark.read.format("delta").load(warehouse.table_path(s, "orders__mlog")).columns
    assert columns == ["id", "qty", "_change_type", "_commit_version", "_commit_timestamp"]

    tables.append(spark, s, "orders", [{"id": 2, "qty": 2}])  # v2
    spark.sql(f"UPDATE delta.`{path}` SET qty = 10 WHERE id = 1")  # v3
    spark.sql(f"DELETE FROM delta.`{path}` WHERE id = 2")  # v4
    assert mvlog.capture(spark, s, "orders") == 4
    assert _versions(spark, s) == [
        (2, "insert", 2),
        (3, "update_postimage", 1),
        (3, "update_preimage", 1),
        (4, "delete", 2),
    ]
    # Nothing new: no Spark write at all.
    mlog_version = warehouse.latest_version(s, "orders__mlog")
    assert mvlog.capture(spark, s, "orders") == 4
    assert warehouse.latest_version(s, "orders__mlog") == mlog_version

    changes = mvlog.read_changes(spark, s, "orders", after_version=2, up_to_version=3)
    assert sorted(r["_change_type"] for r in changes.collect()) == ["update_postimage", "update_preimage"]

    # Safepoint 3: the v2 row goes, everything at v3 and above stays. A new base commit (v5) is
    # captured by the purge first.
    tables.append(spark, s, "orders", [{"id": 5, "qty": 5}])  # v5
    result = mvlog.purge(spark, s, "orders", safepoint=3)
    assert (result.rows_deleted, result.captured_version, result.safepoint) == (1, 5, 3)
    assert _versions(spark, s) == [
        (3, "update_postimage", 1),
        (3, "update_preimage", 1),
        (4, "delete", 2),
        (5, "insert", 5),
    ]
    assert mvlog.retained_from(spark, s, "orders") == 3
    with pytest.raises(ChangesNotRetained):
        mvlog.read_changes(spark, s, "orders", after_version=1, up_to_version=5)
    assert len(mvlog.read_changes(spark, s, "orders", after_version=2, up_to_version=5).collect()) == 4

    # No dependent MV: nothing is purged.
    kept = mvlog.purge(spark, s, "orders", safepoint=None)
    assert kept.rows_deleted == 0 and kept.safepoint is None and "nothing purged" in kept.message
    assert len(_versions(spark, s)) == 4
    history = tables.delta_history(spark, s, "orders__mlog")
    assert any(t["appId"] == "mvlog:orders" for h in history for t in h["txn"])


def test_drop_mv_log_keeps_cdf_and_a_new_log_starts_at_the_next_commit(
    spark: Any, local_settings: Settings
) -> None:
    s = local_settings
    tables.create_table(spark, s, "orders", [{"id": 1}], "id long")  # v0
    assert mvlog.create_mv_log(spark, s, "orders") == 1
    mvlog.drop_mv_log(spark, s, "orders")
    assert not warehouse.table_exists(s, "orders__mlog") and mvlog.retained_from(spark, s, "orders") is None
    props = {
        r["key"]: r["value"]
        for r in spark.sql(f"SHOW TBLPROPERTIES delta.`{warehouse.table_path(s, 'orders')}`").collect()
    }
    assert props["delta.enableChangeDataFeed"] == "true"
    # Re-created while CDF is on: no ALTER commits (the base stays at v1); it starts at the next commit.
    assert mvlog.create_mv_log(spark, s, "orders") == 2
    assert warehouse.latest_version(s, "orders") == 1
    tables.append(spark, s, "orders", [{"id": 3}])  # v2
    assert mvlog.capture(spark, s, "orders") == 2
    assert _versions(spark, s) == [(2, "insert", 3)]
