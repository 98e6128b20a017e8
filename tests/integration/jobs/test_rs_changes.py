"""Change rows read by delta-rs (``workers.jobs.changes.rs_reads``) on tables Spark wrote
(real Spark, Delta and delta-rs): exactly the rows, columns and types of Spark's own change-data-feed
read, for every kind of commit a base sees; refused (Spark reads) where delta-rs's feed could differ or
the rows are too many."""

from __future__ import annotations

import os
import shutil
from typing import Any

import pytest
from deltalake import write_deltalake
from pyspark.sql import functions as F

from workers import warehouse
from workers.config import Settings
from workers.jobs.changes import mvlog
from workers.jobs.changes import rs_reads as rs_changes
from workers.jobs.delta import arrow as rs_arrow
from workers.jobs.spark import held

pytestmark = pytest.mark.integration

SCHEMA = (
    "id long, name string, price decimal(12,2), ratio double, day date, at timestamp, "
    "flag boolean, tags array<string>"
)
ROW = (  # one of each type, as SQL of a row number {i}
    "{i} AS id",
    "concat('n', {i}) AS name",
    "CAST({i} * 1.25 AS decimal(12,2)) AS price",
    "{i} / 3.0D AS ratio",
    "date_add(DATE'2024-02-28', CAST({i} AS int)) AS day",
    "timestamp_seconds(1700000000 + {i} * 3600) AS at",
    "{i} % 2 = 0 AS flag",
    "array(concat('t', {i})) AS tags",
)


def _rows(spark: Any, start: int, end: int) -> Any:
    return spark.range(start, end).selectExpr(*[column.format(i="id") for column in ROW])


def _base(spark: Any, s: Settings) -> str:
    """``items`` with an MV log (CDF on from v1), then one commit of each kind; returns its path."""
    path = warehouse.table_path(s, "items")
    _rows(spark, 0, 40).repartition(4).write.format("delta").save(path)
    mvlog.create_mv_log(spark, s, "items")  # v1

    def sql(text: str) -> None:
        spark.sql(text.replace("{t}", f"delta.`{path}`"))

    _rows(spark, 40, 50).write.format("delta").mode("append").save(path)
    sql("UPDATE {t} SET price = price + 1, name = NULL WHERE id % 7 = 0")  # change files
    sql("DELETE FROM {t} WHERE id BETWEEN 3 AND 5")  # rows out of files: change files
    sql("DELETE FROM {t} WHERE id >= 40")  # the appended file whole: no change file, a remove
    _rows(spark, 60, 63).createOrReplaceTempView("src")
    sql(
        "MERGE INTO {t} t USING (SELECT * FROM src UNION ALL SELECT 8 AS id, NULL, NULL, NULL, NULL, NULL, "
        "NULL, NULL) s ON t.id = s.id WHEN MATCHED THEN UPDATE SET * WHEN NOT MATCHED THEN INSERT *"
    )
    sql("OPTIMIZE {t}")  # no data change: no change rows
    _rows(spark, 100, 103).write.format("delta").mode("overwrite").save(path)
    sql("DELETE FROM {t}")  # every row
    return path


def _spark_feed(spark: Any, path: str, first: int, until: int) -> Any:
    return (
        spark.read.format("delta")
        .option("readChangeFeed", "true")
        .option("startingVersion", first)
        .option("endingVersion", until)
        .load(path)
    )


def _same(spark: Any, left: Any, right: Any) -> None:
    """The same rows, columns and types. ``_commit_timestamp`` is delta-rs's commit time (``commitInfo``),
    Spark's the commit file's: the same commit, some milliseconds apart (no MV query can read it: the
    base has no such column)."""
    assert left.schema == right.schema
    assert left.count() > 0
    pairs = (
        left.alias("l")
        .join(right.alias("r"), "_commit_version")
        .select(
            F.abs(F.col("l._commit_timestamp").cast("double") - F.col("r._commit_timestamp").cast("double"))
        )
    )
    assert max(r[0] for r in pairs.distinct().collect()) < 5.0
    left, right = left.drop("_commit_timestamp"), right.drop("_commit_timestamp")
    assert left.exceptAll(right).isEmpty() and right.exceptAll(left).isEmpty()


def test_every_kind_of_commit_reads_as_sparks_change_feed(spark: Any, local_settings: Settings) -> None:
    s = local_settings
    path = _base(spark, s)
    until = warehouse.latest_version(s, "items")
    assert until is not None and until >= 9
    for since in (1, 4, until - 1):  # whole range, from the middle, the last commit alone
        expected = _spark_feed(spark, path, since + 1, until)
        rows = rs_changes.read(s, "items", since, until, 0, expected.schema)
        assert rows is not None, since
        _same(spark, rs_arrow.to_spark(spark, rows, expected.schema), expected)


def test_captured_and_later_versions_together_read_as_sparks(spark: Any, local_settings: Settings) -> None:
    s = local_settings
    path = _base(spark, s)
    mvlog.capture(spark, s, "items")
    captured = mvlog.read_state(spark, s, "items").captured_version  # type: ignore[union-attr]
    _rows(spark, 200, 205).write.format("delta").mode("append").save(path)
    until = warehouse.latest_version(s, "items")
    assert until is not None and until > captured
    expected = mvlog.read_captured(spark, s, "items", 2, captured).unionByName(
        _spark_feed(spark, path, captured + 1, until), allowMissingColumns=True
    )
    rows = rs_changes.read(s, "items", 2, until, captured, expected.schema)
    assert rows is not None
    _same(spark, rs_arrow.to_spark(spark, rows, expected.schema), expected)


def test_many_rows_are_held_as_an_rdd_few_as_a_local_relation(spark: Any, local_settings: Settings) -> None:
    s = local_settings
    path = warehouse.table_path(s, "items")
    _rows(spark, 0, 1).write.format("delta").save(path)
    mvlog.create_mv_log(spark, s, "items")
    for n in (30_000, 3):  # v2, v3
        _rows(spark, 0, n).write.format("delta").mode("append").save(path)
    schema = _spark_feed(spark, path, 2, 3).schema
    for since, plan, count in ((1, "LogicalRDD", 30_003), (2, "LocalRelation", 3)):
        rows = rs_changes.read(s, "items", since, 3, 0, schema)
        assert rows is not None and rows.num_rows == count
        frame = rs_arrow.to_spark(spark, rows, schema)
        assert frame._jdf.queryExecution().optimizedPlan().getClass().getSimpleName() == plan
        assert frame.count() == count
    nothing = rs_changes.read(s, "items", 3, 3, 0, schema)
    assert nothing is not None and nothing.num_rows == 0 and nothing.schema.names == schema.names


@pytest.mark.parametrize("why", ["deletion vectors", "schema change", "too many bytes", "object store"])
def test_spark_reads_where_delta_rs_could_differ(
    spark: Any, local_settings: Settings, why: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    s = local_settings
    path = warehouse.table_path(s, "items")
    writer = _rows(spark, 0, 10).write.format("delta")
    if why == "deletion vectors":
        writer = writer.option("delta.enableDeletionVectors", "true")
    writer.save(path)
    mvlog.create_mv_log(spark, s, "items")
    spark.sql(f"DELETE FROM delta.`{path}` WHERE id = 3")
    if why == "schema change":
        spark.sql(f"ALTER TABLE delta.`{path}` ADD COLUMNS (extra long)")
    if why == "too many bytes":
        monkeypatch.setattr(rs_changes, "ARROW_BYTES", 64)
    if why == "object store":
        s = Settings(warehouse="s3a://bucket/warehouse")
    until = warehouse.latest_version(local_settings, "items")
    assert until is not None
    schema = _spark_feed(spark, path, 2, until).schema
    assert rs_changes.read(s, "items", 1, until, 0, schema) is None


def test_a_small_table_reads_whole_as_spark_reads_it(
    spark: Any, local_settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    s = local_settings
    _base(spark, s)
    for version in (0, 6):
        expected = (
            spark.read.format("delta").option("versionAsOf", version).load(warehouse.table_path(s, "items"))
        )
        found = rs_arrow.read_small(spark, s, "items", version)
        assert found is not None
        assert found.schema == expected.schema
        assert found.exceptAll(expected).isEmpty() and expected.exceptAll(found).isEmpty()
        assert found._jdf.queryExecution().optimizedPlan().getClass().getSimpleName() == "LocalRelation"
    assert rs_arrow.read_small(spark, Settings(warehouse="s3a://bucket/warehouse"), "items", 6) is None
    monkeypatch.setattr(rs_arrow, "READ_LIMIT_BYTES", 0)
    assert rs_arrow.read_small(spark, s, "items", 6) is None


def test_a_small_table_delta_rs_committed_to_reads_whole_without_a_checksum(
    spark: Any, local_settings: Settings
) -> None:
    """A version delta-rs wrote has no checksum file (an MV's, its helper state's after a run): its
    size and schema come from the log, and it still reads whole as Spark reads it, with column
    mapping too (logical names)."""
    s = local_settings
    for name, options in (("plain", {}), ("mapped", {"delta.columnMapping.mode": "name"})):
        path = warehouse.table_path(s, name)
        _rows(spark, 0, 5).write.format("delta").options(**options).save(path)
        write_deltalake(warehouse.rs_table(s, name), _rows(spark, 5, 8).toArrow(), mode="append")
        assert warehouse.read_checksum(s, name, 1) is None
        found = rs_arrow.read_small(spark, s, name, 1)
        expected = spark.read.format("delta").option("versionAsOf", 1).load(path)
        assert found is not None and found.schema == expected.schema
        assert found.exceptAll(expected).isEmpty() and expected.exceptAll(found).isEmpty()
        assert found.count() == 8


def test_a_small_table_with_column_mapping_reads_whole_by_its_logical_names(
    spark: Any, local_settings: Settings
) -> None:
    """Column mapping ("name"): what Delta needs for a column name Parquet cannot hold (an MV's
    unaliased ``sum(l_quantity)``, TPC-H Q18's top-N rows table), and keeps through a rename or a
    dropped column. delta-rs's query engine reads it by its logical names, nested and partition
    columns too, as Spark reads it, at every version; the schema carries none of the mapping's field
    metadata (Spark's read drops it too)."""
    s = local_settings
    path = warehouse.table_path(s, "mapped")
    spark.sql(
        f"CREATE TABLE delta.`{path}` (k string, `sum(v)` decimal(25,2), `count(1)` bigint, "
        "gone int, s struct<`a b`: int, c: string>, part int) USING delta PARTITIONED BY (part) "
        "TBLPROPERTIES ('delta.columnMapping.mode' = 'name')"
    )  # v0

    def sql(text: str) -> None:
        spark.sql(text.replace("{t}", f"delta.`{path}`"))

    sql(
        "INSERT INTO {t} VALUES ('a', 2.50, 3, 7, named_struct('a b', 1, 'c', 'x'), 1), "
        "('b', NULL, 4, 8, NULL, 2), (NULL, 1.00, NULL, NULL, named_struct('a b', NULL, 'c', 'y'), 1)"
    )
    sql("ALTER TABLE {t} RENAME COLUMN k TO key")  # v2
    sql("ALTER TABLE {t} DROP COLUMN gone")  # v3
    sql("UPDATE {t} SET `sum(v)` = `sum(v)` + 1 WHERE key = 'a'")  # v4
    for version in range(1, 5):
        expected = spark.read.format("delta").option("versionAsOf", version).load(path)
        found = rs_arrow.read_small(spark, s, "mapped", version)
        assert found is not None, version
        assert found.schema == expected.schema and all(not f.metadata for f in found.schema.fields)
        assert found.exceptAll(expected).isEmpty() and expected.exceptAll(found).isEmpty(), version
        assert found.count() == 3
    assert [f.name for f in found.schema.fields] == ["key", "sum(v)", "count(1)", "s", "part"]


def test_a_small_base_version_is_held_for_the_next_runs_until_its_table_is_made_again(
    spark: Any, local_settings: Settings
) -> None:
    """``read_small_kept``: the rows of a version never change, so the next run's read takes them held
    (here: its data files gone, they still read, from another session; past ``LOCAL_ROWS`` they are
    an RDD of Arrow batches); a table made again under the same name and version (another table id)
    is read anew, and so is a newer version."""
    s = local_settings
    path = warehouse.table_path(s, "dim")
    many = held.LOCAL_ROWS + 5
    _rows(spark, 0, many).write.format("delta").save(path)
    first = rs_arrow.read_small_kept(spark, s, "dim", 0)
    assert first is not None and first.count() == many
    assert first._jdf.queryExecution().optimizedPlan().getClass().getSimpleName() != "LocalRelation"
    for data_file in warehouse.rs_table(s, "dim", 0).file_uris():
        os.remove(data_file.removeprefix("file://"))
    session = spark.newSession()
    kept = rs_arrow.read_small_kept(session, s, "dim", 0)
    assert kept is not None and kept.sparkSession is session  # rebound to the run's own session
    assert kept.count() == many and kept.where("id = 7").first().name == "n7"  # type: ignore[union-attr]
    shutil.rmtree(path)
    _rows(spark, 10, 12).write.format("delta").save(path)  # version 0 again, another table
    again = rs_arrow.read_small_kept(spark, s, "dim", 0)
    assert again is not None and sorted(r.id for r in again.collect()) == [10, 11]
    _rows(spark, 12, 13).write.format("delta").mode("append").save(path)
    newer = rs_arrow.read_small_kept(spark, s, "dim", 1)
    assert newer is not None and sorted(r.id for r in newer.collect()) == [10, 11, 12]
