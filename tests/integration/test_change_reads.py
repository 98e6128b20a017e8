"""Change rows for a refresh (``workers.jobs.changes.reads``) on real Spark + Delta:
read from the MV log where
captured and from the base's change data feed after that, once for every MV on the base."""

from __future__ import annotations

import shutil
from typing import Any

import pytest

from workers import demo_tables as tables
from workers import warehouse
from workers.config import Settings
from workers.jobs.changes import mvlog
from workers.jobs.changes import reads as changes
from workers.jobs.changes import rs_reads as rs_changes
from workers.jobs.run_stats import group_stats
from workers.jobs.spark import held
from workers.jobs.spark.session import run_session

pytestmark = pytest.mark.integration


@pytest.fixture(autouse=True, params=["delta-rs", "spark"])
def reader(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Every test twice: change rows read by delta-rs (``rs_changes``; Spark's read and hold would
    fail the test) and by Spark (delta-rs turned off)."""
    if request.param == "spark":
        monkeypatch.setattr(rs_changes, "read", lambda *args: None)
    else:

        def spark_read(*args: Any) -> Any:
            raise AssertionError("Spark read change rows delta-rs can read")

        monkeypatch.setattr(held, "hold_counted", spark_read)
    return str(request.param)


def _rows(frame: Any) -> list[tuple[int, str, int, int]]:
    return sorted((r["_commit_version"], r["_change_type"], r["id"], r["qty"]) for r in frame.collect())


def _orders(spark: Any, s: Settings, *, forget: bool = True) -> Any:
    """orders v0 created, v1 MV log (CDF on), v2 insert, v3 update, v4 delete; nothing held yet
    unless ``forget`` is False. Returns a run session to read in."""
    path = warehouse.table_path(s, "orders")
    tables.create_table(spark, s, "orders", [{"id": 1, "qty": 1}], "id long, qty long")
    mvlog.create_mv_log(spark, s, "orders")
    tables.append(spark, s, "orders", [{"id": 2, "qty": 2}])
    spark.sql(f"UPDATE delta.`{path}` SET qty = 10 WHERE id = 1")
    spark.sql(f"DELETE FROM delta.`{path}` WHERE id = 2")
    if forget:
        changes.forget()
    return run_session(spark)


EXPECTED = [
    (2, "insert", 2, 2),
    (3, "update_postimage", 1, 10),
    (3, "update_preimage", 1, 1),
    (4, "delete", 2, 2),
]


def test_uncaptured_commits_come_from_the_base_and_captured_ones_from_the_log(
    spark: Any, local_settings: Settings
) -> None:
    s = local_settings
    session = _orders(spark, s)
    fresh = changes.read(session, s, "orders", 1, 4)  # nothing captured yet: the base's feed alone
    assert not fresh.shared and _rows(fresh.frame) == EXPECTED
    assert mvlog.read_state(spark, s, "orders").captured_version == 0  # type: ignore[union-attr]

    mvlog.capture(spark, s, "orders")  # v2..v4 now in the log
    tables.append(spark, s, "orders", [{"id": 3, "qty": 3}])  # v5: in the base only
    changes.forget()
    mixed = changes.read(session, s, "orders", 1, 5)
    assert _rows(mixed.frame) == [*EXPECTED, (5, "insert", 3, 3)]

    # The log, not the base, serves captured versions: with the base's files gone, they still read.
    mvlog.capture(spark, s, "orders")
    for entry in (warehouse.local_table_dir(s, "orders")).glob("*.parquet"):
        entry.unlink()
    shutil.rmtree(warehouse.local_table_dir(s, "orders") / "_change_data", ignore_errors=True)
    changes.forget()
    assert _rows(changes.read(session, s, "orders", 2, 5).frame) == [*EXPECTED[1:], (5, "insert", 3, 3)]


def test_a_range_is_read_once_and_shared_by_later_watermarks(spark: Any, local_settings: Settings) -> None:
    s = local_settings
    first_session, second_session = _orders(spark, s), run_session(spark)
    sc = spark.sparkContext
    sc.setJobGroup("mvs-change-read-1", "first read")
    first = changes.read(first_session, s, "orders", 1, 4)
    assert _rows(first.frame) == EXPECTED
    sc.setJobGroup("mvs-change-read-2", "second read")
    later = changes.read(second_session, s, "orders", 2, 4)  # an MV one version further
    taken = _rows(later.frame)
    sc.setLocalProperty("spark.jobGroup.id", None)
    assert later.shared and taken == EXPECTED[1:]
    assert later.frame.sparkSession is second_session
    assert group_stats(spark, "mvs-change-read-1").rows_read >= len(EXPECTED)  # delta-rs's rows count too
    assert group_stats(spark, "mvs-change-read-2").rows_read == 0  # nothing read again

    earlier = changes.read(second_session, s, "orders", 0, 4)  # asks for more than was held
    assert not earlier.shared


def test_a_recreated_base_is_never_served_from_the_old_tables_rows(
    spark: Any, local_settings: Settings
) -> None:
    s = local_settings
    session = _orders(spark, s)
    assert _rows(changes.read(session, s, "orders", 1, 4).frame) == EXPECTED
    mvlog.drop_mv_log(spark, s, "orders")
    shutil.rmtree(warehouse.local_table_dir(s, "orders"))
    _orders(spark, s, forget=False)  # same name, same versions: only the commits' times tell them apart
    again = changes.read(session, s, "orders", 1, 4)
    assert not again.shared and _rows(again.frame) == EXPECTED
