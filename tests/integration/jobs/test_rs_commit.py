"""MERGEs committed by delta-rs (``workers.jobs.delta.rs_commit``) into MV tables Spark made and reads (real
Spark, real Delta, real delta-rs): fenced as Spark's idempotent writes are, never rebased over another
commit, deletion vectors honoured, the watermark committed even when nothing changes, and Spark
merging where delta-rs may not write."""

from __future__ import annotations

from typing import Any

import pytest

from tests.support.run_requests import run_request
from workers import demo_tables as tables
from workers import warehouse
from workers.config import Settings
from workers.jobs import complete as refresh
from workers.jobs.delta import rs_commit
from workers.jobs.delta.metadata import CommitId
from workers.jobs.errors import classify_failure

pytestmark = pytest.mark.integration

SCHEMA = "k long, v long, name string"
UPSERT = rs_commit.PlainMerge(("k",), ("k", "v", "name"), "op", delete_op="delete", upsert_op="upsert")


def _mv(spark: Any, settings: Settings, rows: int = 100) -> None:
    path = warehouse.table_path(settings, "mv")
    frame = spark.range(rows).selectExpr("id AS k", "id * 10 AS v", "concat('n', id) AS name")
    # As a complete refresh makes MV tables: deletion vectors on.
    frame.write.format("delta").option("delta.enableDeletionVectors", "true").save(path)


def _source(spark: Any, rows: list[tuple[Any, ...]]) -> Any:
    return spark.createDataFrame(rows, f"{SCHEMA}, op string")


def _merge(
    spark: Any, s: Settings, rows: list[tuple[Any, ...]], txn: int, version: int | None = None
) -> bool | None:
    at = warehouse.latest_version(s, "mv") if version is None else version
    assert at is not None
    return rs_commit.merge(s, "mv", at, UPSERT, _source(spark, rows), CommitId("mv:mv", txn, "m"))


def _rows(spark: Any, s: Settings) -> dict[int, tuple[Any, ...]]:
    return {r["k"]: (r["v"], r["name"]) for r in tables.read_table(spark, s, "mv")}


def test_upserts_and_deletes_land_with_the_txn_and_metadata_spark_reads(
    spark: Any, local_settings: Settings
) -> None:
    s = local_settings
    _mv(spark, s)
    assert rs_commit.usable(s, "mv", 0)
    rows = [
        (3, 99, "x", "upsert"),
        (500, 1, None, "upsert"),
        (7, None, None, "delete"),
        (900, 0, "y", "delete"),
    ]
    assert _merge(spark, s, rows, txn=5)
    got = _rows(spark, s)
    assert got[3] == (99, "x") and got[500] == (1, None) and 7 not in got and 900 not in got
    assert len(got) == 100 and got[4] == (40, "n4")
    commit = tables.delta_history(spark, s, "mv")[0]
    assert (
        commit["version"] == 1 and commit["userMetadata"] == "m" and commit["engine"].startswith("delta-rs")
    )
    metrics = commit["operationMetrics"]  # delta-rs's names read as Spark's (``deltalog``)
    assert (metrics["numTargetRowsUpdated"], metrics["numTargetRowsInserted"]) == ("1", "1"), metrics
    assert metrics["numTargetRowsDeleted"] == "1", metrics
    assert commit["txn"] == [{"appId": "mv:mv", "version": 5}]


def test_a_recorded_txn_version_at_or_above_ours_skips_the_commit(
    spark: Any, local_settings: Settings
) -> None:
    s = local_settings
    _mv(spark, s)
    assert _merge(spark, s, [(1, 1, "a", "upsert")], txn=8)
    for txn in (8, 7):  # a replay, an older epoch: Delta's idempotent writes skip both
        assert not _merge(spark, s, [(1, 2, "b", "upsert")], txn=txn)
    assert warehouse.latest_version(s, "mv") == 1 and _rows(spark, s)[1] == (1, "a")


def test_a_commit_after_the_version_read_is_a_write_conflict(spark: Any, local_settings: Settings) -> None:
    s = local_settings
    _mv(spark, s)
    tables.append(spark, s, "mv", [{"k": 1000, "v": 0, "name": "late"}])  # another writer: v1
    with pytest.raises(rs_commit.WriteConflict) as raised:
        _merge(spark, s, [(1, 1, "a", "upsert")], txn=3, version=0)
    failure = classify_failure(raised.value)
    assert failure.rule == "write conflict" and failure.retryable, failure
    assert warehouse.latest_version(s, "mv") == 1 and _rows(spark, s)[1] == (10, "n1")


def test_a_merge_that_changes_nothing_still_commits_the_watermark(
    spark: Any, local_settings: Settings
) -> None:
    s = local_settings
    _mv(spark, s)
    for rows in ([(4000, None, None, "delete")], []):  # no match to delete; no rows at all
        version = warehouse.latest_version(s, "mv")
        assert version is not None
        assert _merge(spark, s, rows, txn=version + 10)
        commit = tables.delta_history(spark, s, "mv")[0]
        assert commit["version"] == version + 1 and commit["txn"] == [
            {"appId": "mv:mv", "version": version + 10}
        ]
    assert len(_rows(spark, s)) == 100


def test_rows_deleted_by_a_deletion_vector_stay_deleted(spark: Any, local_settings: Settings) -> None:
    s = local_settings
    _mv(spark, s)
    child = spark.newSession()
    child.conf.set("spark.databricks.delta.delete.deletionVectors.persistent", "true")
    child.sql(f"DELETE FROM delta.`{warehouse.table_path(s, 'mv')}` WHERE k % 2 = 1")
    assert tables.delta_history(spark, s, "mv")[0]["operationMetrics"]["numDeletionVectorsAdded"] != "0"
    assert _merge(spark, s, [(2, 7, "u", "upsert"), (3, 7, "back", "upsert")], txn=1)  # rewrites that file
    got = _rows(spark, s)
    assert got[2] == (7, "u") and got[3] == (7, "back")
    assert sorted(got) == sorted([k for k in range(100) if k % 2 == 0] + [3])


def test_delta_rs_does_not_write_a_table_with_change_data_feed_or_off_the_local_disk(
    spark: Any, local_settings: Settings
) -> None:
    s = local_settings
    _mv(spark, s)
    path = warehouse.table_path(s, "mv")
    spark.sql(f"ALTER TABLE delta.`{path}` SET TBLPROPERTIES (delta.enableChangeDataFeed = true)")
    assert not rs_commit.usable(s, "mv", 1)  # it would have to write the change files too
    assert rs_commit.usable(s, "mv", 0)
    assert not rs_commit.usable(Settings(warehouse="s3a://bucket/warehouse"), "mv", 0)


def test_spark_reads_the_checkpoints_delta_rs_writes_every_ten_commits(
    spark: Any, local_settings: Settings
) -> None:
    s = local_settings
    _mv(spark, s, rows=20)
    spark.sql(f"DELETE FROM delta.`{warehouse.table_path(s, 'mv')}` WHERE k = 19")  # v1
    for i in range(2, 13):  # v2..v12: one checkpoint, at v10
        assert _merge(spark, s, [(i, i, f"c{i}", "upsert")], txn=i)
    log = warehouse.local_table_dir(s, "mv") / "_delta_log"
    assert (log / f"{10:020d}.checkpoint.parquet").exists()
    assert not (log / f"{11:020d}.checkpoint.parquet").exists()
    got = _rows(spark, s)
    assert sorted(got) == list(range(19)) and got[12] == (12, "c12") and got[1] == (10, "n1")


def _complete(spark: Any, s: Settings, query: str, run: str) -> Any:
    return refresh.refresh_complete(spark, s, run_request(s, "top", query, run=run))


def _by_delta_rs(spark: Any, s: Settings) -> bool:
    return str(tables.delta_history(spark, s, "top")[0]["engine"]).startswith("delta-rs")


def test_a_small_complete_refresh_is_written_by_delta_rs_unless_its_columns_change(
    spark: Any, local_settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    s = local_settings
    tables.create_table(
        spark, s, "sales", [{"g": f"g{i % 3}", "v": i} for i in range(10)], "g string, v long"
    )
    query = "SELECT g, SUM(v) AS total FROM sales GROUP BY g"
    assert _complete(spark, s, query, "build").applied and not _by_delta_rs(spark, s)  # Spark makes it

    tables.append(spark, s, "sales", [{"g": "g9", "v": 100}])
    again = _complete(spark, s, query, "again")
    assert again.applied and again.rows_written == 4 and _by_delta_rs(spark, s), again
    got = {r["g"]: r["total"] for r in tables.read_table(spark, s, "top")}
    assert got == {"g0": 18, "g1": 12, "g2": 15, "g9": 100}
    assert tables.delta_history(spark, s, "top")[0]["txn"][0]["appId"] == "mv:top"
    replay = _complete(spark, s, query, "again")  # the same epoch and watermark: skipped
    assert not replay.applied and warehouse.latest_version(s, "top") == again.delta_version

    # New columns: Spark writes (it changes the table's schema); so it does for a result too large.
    wider = "SELECT g, SUM(v) AS total, COUNT(*) AS n FROM sales GROUP BY g"
    tables.append(spark, s, "sales", [{"g": "g9", "v": 1}])
    assert _complete(spark, s, wider, "wider").applied and not _by_delta_rs(spark, s)
    monkeypatch.setattr(rs_commit, "ARROW_ROWS", 3)
    tables.append(spark, s, "sales", [{"g": "g8", "v": 1}])
    assert _complete(spark, s, wider, "large").applied and not _by_delta_rs(spark, s)
    assert len(tables.read_table(spark, s, "top")) == 5


def test_more_rows_than_the_hand_over_takes_stay_with_spark(
    spark: Any, local_settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    s = local_settings
    _mv(spark, s)
    monkeypatch.setattr(rs_commit, "ARROW_ROWS", 1)
    assert _merge(spark, s, [(1, 1, "a", "upsert"), (2, 2, "b", "upsert")], txn=1) is None
    assert warehouse.latest_version(s, "mv") == 0  # nothing committed: the caller has Spark merge
    schema = spark.read.format("delta").load(warehouse.table_path(s, "mv")).schema
    assert rs_commit.read_rows(spark, s, "mv", 0, schema, None, whole=True) is None
    monkeypatch.setattr(rs_commit, "ARROW_ROWS", 100)
    read = rs_commit.read_rows(spark, s, "mv", 0, schema, None, whole=True)
    assert read is not None and read.count() == 100


def test_appended_rows_land_once_with_the_txn_and_metadata_spark_reads(
    spark: Any, local_settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    s = local_settings
    _mv(spark, s, rows=3)
    new = spark.createDataFrame([(7, 70, "n7"), (8, None, None)], SCHEMA)
    assert rs_commit.append(s, "mv", 0, new, CommitId("mv:mv", 5, "appended"))
    for txn in (5, 4):  # a replay, an older epoch: skipped
        assert rs_commit.append(s, "mv", 1, new, CommitId("mv:mv", txn, "again")) is False
    assert _rows(spark, s) == {0: (0, "n0"), 1: (10, "n1"), 2: (20, "n2"), 7: (70, "n7"), 8: (None, None)}
    last = tables.delta_history(spark, s, "mv")[0]
    assert last["version"] == 1 and last["userMetadata"] == "appended", last
    assert last["txn"] == [{"appId": "mv:mv", "version": 5}]
    # Other columns, or more rows than the hand-over takes: nothing committed, Spark appends instead.
    other = spark.createDataFrame([(9, "x")], "k long, name string")
    assert rs_commit.append(s, "mv", 1, other, CommitId("mv:mv", 6, "m")) is None
    monkeypatch.setattr(rs_commit, "ARROW_ROWS", 1)
    assert rs_commit.append(s, "mv", 1, new, CommitId("mv:mv", 6, "m")) is None
    assert warehouse.latest_version(s, "mv") == 1
