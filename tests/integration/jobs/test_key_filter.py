"""Key filters (``workers.jobs.delta.key_filter``) keep every row a key can match (real Spark), and a FAST
projection's MERGE after a delete rewrites only the MV file that held the deleted row (real Delta)."""

from __future__ import annotations

import datetime
from decimal import Decimal
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.support.run_requests import run_request
from workers import demo_tables as tables
from workers import warehouse
from workers.config import Settings
from workers.jobs import complete as refresh
from workers.jobs import run_stats
from workers.jobs.changes import mvlog
from workers.jobs.delta import key_filter, rs_commit
from workers.jobs.delta import write as delta_write
from workers.jobs.fast import refresh as incremental

pytestmark = pytest.mark.integration

SCHEMA = "id long, name string, price decimal(10,2), day date, ratio double"
PAIRS = [("id", "id"), ("name", "name"), ("price", "price"), ("day", "day"), ("ratio", "ratio")]

_rows = st.tuples(
    st.one_of(st.none(), st.integers(-5, 5)),
    st.one_of(st.none(), st.sampled_from(["", "a", "ab", "b", "é"])),
    st.one_of(st.none(), st.decimals("-9.99", "9.99", places=2)),
    st.one_of(st.none(), st.dates(datetime.date(1999, 12, 30), datetime.date(2000, 1, 3))),
    st.one_of(st.none(), st.sampled_from([0.0, -0.0, 1.5])),
)


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(keys=st.lists(_rows, min_size=0, max_size=6), table=st.lists(_rows, max_size=12), few=st.booleans())
def test_a_key_filter_keeps_every_row_a_key_matches(
    spark: Any, keys: list[tuple[Any, ...]], table: list[tuple[Any, ...]], few: bool
) -> None:
    key_frame = spark.createDataFrame(keys, SCHEMA)
    frame = spark.createDataFrame(table + keys, SCHEMA)  # every key row has a match
    limit = 10 if few else 0  # IN lists, or the ranges the keys span
    found = key_filter.key_filter(frame.schema, PAIRS, key_frame, limit=limit, ranges=True)
    assert found is not None
    # Floating point is never narrowed: its literals are not exact.
    assert {p.column for p in found.parts} == {"id", "name", "price", "day"}
    assert not found.complete  # so a caller still joins to match exactly
    kept = {tuple(r) for r in frame.where(found.on()).collect()}
    matched = {tuple(r) for r in frame.collect() if any(_null_safe_equal(r, k) for k in keys)}
    assert matched <= kept
    if few:  # IN lists of every narrowed column: nothing outside them is kept
        for row in kept:
            for i, column in enumerate(("id", "name", "price", "day")):
                assert row[i] in {k[i] for k in keys}, column


_RANGE_ROWS = st.tuples(
    st.one_of(st.none(), st.integers(-(2**40), 2**40)),
    st.one_of(st.none(), st.integers(-128, 127)),
    st.one_of(st.none(), st.dates(datetime.date(1992, 1, 1), datetime.date(1998, 12, 31))),
)


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    table=st.lists(_RANGE_ROWS, max_size=12),
    values=st.lists(_RANGE_ROWS, max_size=8),
    most=st.integers(1, 4),
)
def test_key_ranges_keep_every_row_a_value_matches_and_little_else(
    spark: Any, table: list[tuple[Any, ...]], values: list[tuple[Any, ...]], most: int
) -> None:
    # ``key_ranges`` is the file-skipping filter beside an exact IN list: a superset of the matching
    # rows, the values' literals typed as the column (no cast on it), in one SQL expression.
    frame = spark.createDataFrame(table + values, "big long, tiny tinyint, day date")
    for i, column in enumerate(("big", "tiny", "day")):
        wanted = [v[i] for v in values]
        found = key_filter.key_ranges(f"`{column}`", frame.schema[column].dataType, wanted, most)
        if not [v for v in wanted if v is not None]:
            assert found is None
            continue
        assert found is not None
        kept = [r[i] for r in frame.where(found).collect()]
        assert set(wanted) <= set(kept)  # NULL too, where a value is NULL
        spans = key_filter.value_spans(
            [v.toordinal() if column == "day" else v for v in wanted if v is not None], most
        )
        for value in kept:  # nothing outside the spans: the bounds are the values themselves
            if value is not None:
                point = value.toordinal() if column == "day" else value
                assert any(lo <= point <= hi for lo, hi in spans), (column, value, spans)
            else:
                assert None in wanted


def _null_safe_equal(row: Any, key: tuple[Any, ...]) -> bool:
    same = [(a is None) == (b is None) and (a is None or a == b) for a, b in zip(row, key, strict=True)]
    return all(same)


def test_ranges_need_a_flag_past_the_limit(spark: Any) -> None:
    keys = spark.createDataFrame([(1, "a", Decimal("1.00"), None, None)] * 3, SCHEMA)
    assert key_filter.key_filter(keys.schema, PAIRS, keys, limit=2) is None
    assert key_filter.key_filter(keys.schema, [("ratio", "ratio")], keys, limit=5) is None
    # A count known to pass the limit (an upper bound) collects no values: only ranges, if asked for.
    assert key_filter.key_filter(keys.schema, PAIRS[:1], keys, limit=5, rows=6) is None
    spanned = key_filter.key_filter(keys.schema, PAIRS[:1], keys, limit=5, rows=6, ranges=True)
    assert spanned is not None and not spanned.complete
    assert [(p.low, p.high, p.values) for p in spanned.parts] == [(1, 1, None)]


@pytest.mark.parametrize(
    "writer", ["spark", "delta-rs", "delta-rs, large files", "spark, large files past the rewrite limit"]
)
def test_a_projection_merge_rewrites_only_the_file_of_the_deleted_row(
    spark: Any, local_settings: Settings, writer: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Spark merges where delta-rs may not write (an object store; ``rs_commit.usable``): its target
    # filter is the key filter. delta-rs prunes the files by the key filter too. An MV whose files are
    # large (here: every MV) is merged by delta-rs while the files the key filter keeps are few bytes,
    # else by Spark, whose deletion vectors then mark the row instead of rewriting its file.
    if writer == "spark":
        monkeypatch.setattr(rs_commit, "usable", lambda *_: False)
    large = "large files" in writer
    if large:
        monkeypatch.setattr(delta_write, "DELETION_VECTOR_FILE_BYTES", 1)
    if "past the rewrite limit" in writer:
        monkeypatch.setattr(rs_commit, "REWRITE_LIMIT_BYTES", 0)
    s = local_settings
    query = "SELECT id, amount FROM sales"
    tables.create_table(
        spark, s, "sales", [{"id": i, "amount": i % 7} for i in range(100)], "id long, amount long"
    )
    mvlog.create_mv_log(spark, s, "sales")
    assert refresh.refresh_complete(spark, s, run_request(s, "mv", query, run="build")).applied
    for batch in (1, 2):  # two appends: more MV files, each of ids of its own batch
        tables.append(spark, s, "sales", [{"id": batch * 100 + i, "amount": i % 7} for i in range(100)])
        request = run_request(s, "mv", query, mode="FAST", run=f"append-{batch}")
        assert incremental.refresh_incremental(spark, s, request).applied
    spark.sql(f"DELETE FROM delta.`{warehouse.table_path(s, 'sales')}` WHERE id = 150")
    request = run_request(s, "mv", query, mode="FAST", run="delete", job_group="key-filter-delete")
    result = incremental.refresh_incremental(spark, s, request)
    assert result.applied and "rewrite merge" in (result.message or ""), result.message
    commit = tables.delta_history(spark, s, "mv")[0]
    assert commit["engine"].startswith("delta-rs") == writer.startswith("delta-rs"), commit
    metrics = commit["operationMetrics"]  # by Spark's names, whichever engine wrote it
    assert metrics["numTargetRowsDeleted"] == "1", metrics
    if large and writer.startswith("spark"):  # the row marked deleted, its file kept
        assert metrics["numTargetFilesRemoved"] == "0", metrics
        assert metrics["numTargetDeletionVectorsAdded"] == "1", metrics
    else:
        assert metrics["numTargetFilesRemoved"] == "1", metrics
    if writer.startswith("delta-rs"):  # the MV rows of the deleted row's key read by delta-rs: not all 300
        computed = run_stats.group_stats(spark, "key-filter-delete", step="compute the change to the MV")
        assert 0 < computed.rows_read < 100, computed
    if writer == "spark":
        # The MERGE reads only the MV file(s) whose ids span 150 (of the batch 100..199), to find the
        # matches and to rewrite them: without the filter on the target it reads all 300 MV rows.
        merged = run_stats.group_stats(spark, "key-filter-delete", step="commit (rewrite merge)")
        assert 0 < merged.rows_read < 2 * 100, merged
    rows = sorted(tuple(r.values()) for r in tables.read_table(spark, s, "mv"))
    assert rows == sorted((i, i % 100 % 7) for i in range(300) if i != 150)


def test_a_key_filter_reaches_delta_rs_as_a_predicate_keeping_every_row_it_keeps(tmp_path: Any) -> None:
    """The key filter a delta-rs MERGE skips files by (``rs_commit._within``), run by DataFusion itself
    over rows with NULLs, quotes and odd strings: it keeps every row the filter keeps. Parts a literal
    might not carry exactly (a string with a backslash, decimals, dates) are left out."""
    import pyarrow as pa
    from deltalake import DeltaTable, QueryBuilder, write_deltalake
    from pyspark.sql.types import DateType, DecimalType, LongType, StringType

    names = ["a", "o'k", "é", "", None, "x\\y", "it''s"]
    rows = pa.table(
        {"id": pa.array([1, 2, 3, None, 5, 6, 7], pa.int64()), "name": pa.array(names, pa.string())}
    )
    write_deltalake(str(tmp_path / "t"), rows)
    table = DeltaTable(str(tmp_path / "t"))
    narrowed = key_filter._Narrowed  # noqa: SLF001 - the parts key_filter makes from keys
    cases = [
        ([narrowed("id", LongType(), values=frozenset({2, None}))], {2, None}),
        ([narrowed("id", LongType(), low=2, high=5, nulls=False)], {2, 3, 5}),
        ([narrowed("id", LongType(), low=None, high=None, nulls=True)], {None}),
        ([narrowed("name", StringType(), values=frozenset({"o'k", "it''s", ""}))], {2, 7, None}),
        ([narrowed("name", StringType(), low="a", high="o'k", nulls=True)], {1, 2, 5, 7}),
        ([narrowed("name", StringType(), values=frozenset({"x\\y"}))], None),  # left out: every row
        (
            [
                narrowed("id", DecimalType(10, 2), values=frozenset({1})),
                narrowed("id", DateType(), low=1, high=2),
            ],
            None,
        ),
        (
            [
                narrowed("id", LongType(), low=1, high=3),
                narrowed("name", StringType(), values=frozenset({"é"})),
            ],
            {3},
        ),
    ]
    for parts, ids in cases:
        predicate = rs_commit._within(key_filter.KeyFilter(tuple(parts), complete=False))  # noqa: SLF001
        if ids is None:
            assert predicate is None, parts
            continue
        assert predicate is not None
        assert len(table.file_uris(file_pruning_predicate=predicate)) == 1, predicate
        found = pa.table(QueryBuilder().register("t", table).execute(f"SELECT id FROM t WHERE {predicate}"))
        assert set(found.column("id").to_pylist()) == ids, predicate
