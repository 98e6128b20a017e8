"""A base read narrowed to the data files its key values can be in (``workers.jobs.delta.files``): the
files' rows of those values are exactly the Delta read's, at any version (real Spark, real Delta);
tables whose files do not read as Parquet alone go through Delta."""

from __future__ import annotations

import datetime
import itertools
from collections import Counter
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from workers import demo_tables as tables
from workers import warehouse
from workers.config import Settings
from workers.jobs.complete import read_at
from workers.jobs.delta import files
from workers.jobs.fast.apply import Scope

pytestmark = pytest.mark.integration

SCHEMA = "id long, day date, note string"
CHANGES = "_change_type string, _commit_version long, _commit_timestamp timestamp"
CHANGES_NAMES = ["_change_type", "_commit_version", "_commit_timestamp"]
_names = itertools.count()
_ids = st.one_of(st.none(), st.integers(-20, 20))
_days = st.one_of(st.none(), st.dates(datetime.date(2000, 1, 1), datetime.date(2000, 1, 20)))
_batch = st.lists(st.tuples(_ids, _days), max_size=8)


def _among(rows: list[Any], column: str, values: list[Any]) -> Counter[tuple[Any, ...]]:
    """The rows whose ``column`` is NULL-safely one of ``values``, as a multiset."""
    return Counter(tuple(r) for r in rows if r[column] in values)


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    batches=st.lists(_batch, min_size=1, max_size=4),
    deleted=st.one_of(st.none(), st.integers(-20, 20)),
    ids=st.lists(_ids, max_size=6),
    days=st.lists(_days, max_size=6),
    most=st.integers(1, 3),
    on_days=st.booleans(),
    back=st.integers(0, 4),
)
def test_the_files_read_hold_exactly_the_tables_rows_of_the_values(
    spark: Any,
    local_settings: Settings,
    batches: list[list[tuple[Any, Any]]],
    deleted: int | None,
    ids: list[Any],
    days: list[Any],
    most: int,
    on_days: bool,
    back: int,
) -> None:
    s, name = local_settings, f"t{next(_names)}"
    for i, batch in enumerate(batches):  # a file or more per commit, of its own values
        rows = [{"id": k, "day": d, "note": f"{i}"} for k, d in batch]
        if i == 0:
            tables.create_table(spark, s, name, rows, SCHEMA)
        elif rows:
            tables.append(spark, s, name, rows)
    if deleted is not None:  # a commit that removes files and adds their rest
        spark.sql(f"DELETE FROM delta.`{warehouse.table_path(s, name)}` WHERE id = {deleted}")
    latest = warehouse.latest_version(s, name)
    assert latest is not None
    version = max(0, latest - back)  # time travel: the files of that version, not the latest
    frame = read_at(spark, s, name, version)
    column, values = ("day", days) if on_days else ("id", ids)
    read = files.read_within(frame, column, values, most)
    assert read is not None
    table_rows, read_rows = frame.collect(), read.collect()
    assert _among(read_rows, column, values) == _among(table_rows, column, values)
    assert Counter(tuple(r) for r in read_rows) <= Counter(tuple(r) for r in table_rows)


def test_only_the_files_a_value_range_meets_are_read(spark: Any, local_settings: Settings) -> None:
    path = warehouse.table_path(local_settings, "keyed")
    selects = [
        f"SELECT id, CAST(NULL AS date) AS day, 'a' AS note FROM range({a}, {a + 100})" for a in (0, 100, 200)
    ]
    selects.append("SELECT CAST(NULL AS long) AS id, CAST(NULL AS date) AS day, 'a' AS note")
    for select in selects:  # a file a commit: ids 0-99, 100-199, 200-299, NULL
        spark.sql(select).coalesce(1).write.format("delta").mode("append").save(path)
    frame = read_at(spark, local_settings, "keyed", 3)
    inside = files.read_within(frame, "id", [150, 160], 4)
    assert inside is not None and len(inside.inputFiles()) == 1
    assert inside.count() == 100
    # Values in two far-apart ranges: their two files, not the one between them.
    apart = files.read_within(frame, "id", [5, 250], 2)
    assert apart is not None and len(apart.inputFiles()) == 2
    with_nulls = files.read_within(frame, "id", [150, None], 4)
    assert with_nulls is not None and len(with_nulls.inputFiles()) == 2
    nowhere = files.read_within(frame, "id", [1000], 4)
    assert nowhere is not None and nowhere.count() == 0 and nowhere.schema == frame.schema


def test_a_base_read_narrowed_to_the_columns_a_query_reads_still_reads_only_their_files(
    spark: Any, local_settings: Settings
) -> None:
    """A FAST run holds a base with the columns its query may read only (``Scope.read_names``): its
    Delta read narrowed so is still read by the files a key's values can be in, those columns only;
    its change rows keep the change feed's columns too; a base none of whose columns is named keeps
    its first (no frame of no columns)."""
    path = warehouse.table_path(local_settings, "wide")
    for a in (0, 100):  # a file a commit: ids 0-99, 100-199
        spark.sql(f"SELECT id, DATE'2000-01-01' AS day, 'n' AS note FROM range({a}, {a + 100})").coalesce(
            1
        ).write.format("delta").mode("append").save(path)
    scope = Scope(spark, local_settings, "mv_wide", read_names=("id", "note", "other"))
    whole = scope.bases_at({"wide": (1, 1)})[0]["wide"]  # small and unchanged: held whole
    delta_read = scope.bases_at({"wide": (0, 1)})[1]["wide"]  # changed: Delta's read at v1
    assert whole.columns == ["id", "note"] and delta_read.columns == ["id", "note"]
    inside = files.read_within(delta_read, "id", [150], 4)
    assert inside is not None and len(inside.inputFiles()) == 1
    assert inside.columns == ["id", "note"] and inside.where("id = 150").count() == 1
    changes = spark.createDataFrame([(1, None, "x", "insert", 1, None)], f"{SCHEMA}, {CHANGES}")
    assert scope._as_read(changes).columns == ["id", "note", *CHANGES_NAMES]  # noqa: SLF001
    counted = Scope(spark, local_settings, "mv_count", read_names=("n",))  # SELECT count(*) AS n
    assert counted._as_read(changes).columns == ["id", *CHANGES_NAMES]  # noqa: SLF001
    assert counted.bases_at({"wide": (0, 1)})[1]["wide"].columns == ["id"]
    assert Scope(spark, local_settings, "mv_all")._as_read(changes) is changes  # noqa: SLF001


def test_tables_whose_files_do_not_read_as_parquet_alone_go_through_delta(
    spark: Any, local_settings: Settings
) -> None:
    s = local_settings
    rows = [(i, i % 3) for i in range(10)]
    partitioned = warehouse.table_path(s, "partitioned")
    spark.createDataFrame(rows, "id long, p long").write.format("delta").partitionBy("p").save(partitioned)
    assert files.read_within(read_at(spark, s, "partitioned", 0), "id", [1], 4) is None
    with_vectors = warehouse.table_path(s, "vectors")
    spark.sql(
        f"CREATE TABLE delta.`{with_vectors}` (id long) USING delta "
        "TBLPROPERTIES ('delta.enableDeletionVectors' = 'true')"
    )
    spark.sql(f"INSERT INTO delta.`{with_vectors}` VALUES (1), (2), (3)")
    spark.sql(f"DELETE FROM delta.`{with_vectors}` WHERE id = 2")  # a vector marks the row
    assert files.read_within(read_at(spark, s, "vectors", 2), "id", [1, 2], 4) is None
    tables.create_table(spark, s, "plain", [{"id": 1, "day": None, "note": "a"}], SCHEMA)
    plain = read_at(spark, s, "plain", 0)
    assert files.read_within(plain, "note", ["a"], 4) is None  # strings have no ranges
    assert files.read_within(plain.where("id > 0"), "id", [1], 4) is None  # not the read itself
    assert files.read_within(spark.createDataFrame([(1,)], "id long"), "id", [1], 4) is None
