"""Incremental (FAST) refresh on real Spark + Delta: after inserts, deletes and updates on the base
(CDF on through the MV log), the MV equals a complete refresh at the same base version — with
duplicate rows, vanishing groups, MIN/MAX losing their extreme — plus the FAST/COMPLETE choice
and its reasons, and Delta's idempotent-write fencing of replays and stale epochs."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.support.run_requests import run_request
from workers import demo_tables as tables
from workers import warehouse
from workers.config import Settings
from workers.ddl import analyze_query, plan_record
from workers.jobs import complete as refresh
from workers.jobs.changes import mvlog
from workers.jobs.changes import reads as changes
from workers.jobs.delta import rs_commit
from workers.jobs.delta.metadata import EPOCH_SHIFT, txn_version
from workers.jobs.errors import ChangesNotRetained
from workers.jobs.fast import apply
from workers.jobs.fast import refresh as incremental
from workers.jobs.fast.aggregate import merge as incremental_aggregate
from workers.jobs.fast.commit import RunCommit
from workers.jobs.rebuilt import NO_REBUILD
from workers.worker.decision import decide
from workers.worker.runner import RunResult, SparkRunner

pytestmark = pytest.mark.integration

SCHEMA = "id long, region string, amount long, price decimal(10,2)"
PROJECTION = "SELECT region, amount * 10 AS amount10 FROM sales WHERE amount > 1"
AGGREGATES = {
    # Algebraic on inserts and most deletes (COUNT(*) and COUNT(amount) are visible).
    "mv_sums": "SELECT region, COUNT(*) AS n, COUNT(amount) AS n_amount, SUM(amount) AS total, "
    "MIN(amount) AS lo, MAX(amount) AS hi FROM sales GROUP BY region",
    # AVG (helper state), a decimal SUM without its COUNT, a MIN and a WHERE.
    "mv_avg": "SELECT region, AVG(amount) AS mean, SUM(price) AS revenue, MIN(amount) AS lo "
    "FROM sales WHERE amount > 0 GROUP BY region",
    "mv_all": "SELECT COUNT(*) AS n, SUM(amount) AS total, MAX(amount) AS hi FROM sales",
}


def _row(i: int, region: str | None, amount: int | None) -> dict[str, Any]:
    from decimal import Decimal

    return {"id": i, "region": region, "amount": amount, "price": Decimal(i) / 4 if amount else None}


def _dml(spark: Any, settings: Settings, statement: str) -> None:
    spark.sql(statement.format(sales=f"delta.`{warehouse.table_path(settings, 'sales')}`"))


def _base(spark: Any, settings: Settings, rows: list[dict[str, Any]], *, mv_log: bool = True) -> None:
    tables.create_table(spark, settings, "sales", rows, SCHEMA)
    if mv_log:
        mvlog.create_mv_log(spark, settings, "sales")


def _complete(spark: Any, settings: Settings, mv: str, query: str, *, epoch: int = 1, run: str = "c") -> Any:
    return refresh.refresh_complete(spark, settings, run_request(settings, mv, query, epoch=epoch, run=run))


def _fast(spark: Any, settings: Settings, mv: str, query: str, *, epoch: int = 1, run: str) -> Any:
    request = run_request(settings, mv, query, mode="FAST", epoch=epoch, run=run)
    assert request.plan.fast_refresh is not None
    return incremental.refresh_incremental(spark, settings, request)


def _by_mode(spark: Any, settings: Settings, mv: str, query: str, *, run: str) -> RunResult:
    """A FAST refresh the way a worker runs it: pin, decide, run the job (``SparkRunner.refresh``).
    (FAST, not FORCE: on tables this small FORCE's cost model rightly prefers recomputing,
    tests/integration/jobs/test_force_by_cost.py.)"""
    runner = SparkRunner(settings, lambda _: spark)  # the session the tests share
    spec = {
        "query": query,
        "refresh_mode": "FAST",
        "base_tables": ["sales"],
        "plan": plan_record(analyze_query(query).plan),
    }
    task = {"task_id": f"mv:{mv}", "name": mv, "kind": "MV", "epoch": 1, "mv": spec}
    return runner.refresh(task, run_id=run, job_group=f"{mv}-{run}")


def _choose(spark: Any, settings: Settings, mv: str, query: str, mode: str = "FORCE") -> tuple[str, str]:
    """What the worker's decision says for a run now: (DecisionKind value, reason)."""
    request = run_request(settings, mv, query, mode=mode)
    current = refresh.read_watermark(spark, settings, mv)
    reflected = current.watermark if current is not None else None
    decision = decide(request, reflected, lambda: incremental.fast_refresh_blocker(spark, settings, request))
    return decision.kind.value, decision.reason


def _blocker(spark: Any, settings: Settings, mv: str, query: str) -> str | None:
    return incremental.fast_refresh_blocker(spark, settings, run_request(settings, mv, query, mode="FAST"))


def _rows(spark: Any, settings: Settings, name: str) -> list[tuple[Any, ...]]:
    return sorted((tuple(r.values()) for r in tables.read_table(spark, settings, name)), key=repr)


def _query_at(spark: Any, settings: Settings, query: str, version: int) -> list[tuple[Any, ...]]:
    """What refresh_complete computes at ``version`` (its query over the pinned base), unwritten."""
    session = spark.newSession()  # its own temp views: `sales` here is the base at ``version``
    path = warehouse.table_path(settings, "sales")
    session.read.format("delta").option("versionAsOf", version).load(path).createTempView("sales")
    return sorted((tuple(r) for r in session.sql(query).collect()), key=repr)


def _assert_like_complete(spark: Any, settings: Settings, mv: str, query: str, version: int) -> None:
    """The MV holds exactly what refresh_complete writes at the base version it claims, in the
    same columns (no helper columns)."""
    watermark = refresh.read_watermark(spark, settings, mv)
    assert watermark is not None and watermark.watermark == {"sales": version}
    reference = f"{mv}_ref{version}"
    assert _complete(spark, settings, reference, query).watermark_after == {"sales": version}
    assert _rows(spark, settings, mv) == _rows(spark, settings, reference)
    columns = spark.read.format("delta").load(warehouse.table_path(settings, mv)).columns
    assert columns == spark.read.format("delta").load(warehouse.table_path(settings, reference)).columns


def test_projection_keeps_duplicates_exact(spark: Any, local_settings: Settings) -> None:
    s = local_settings
    _base(
        spark, s, [_row(1, "eu", 5), _row(2, "eu", 5), _row(3, "us", 3), _row(4, "us", 1), _row(5, None, 4)]
    )
    assert _complete(spark, s, "mv_p", PROJECTION).applied  # watermark v1 (v1 enabled CDF)

    tables.append(spark, s, "sales", [_row(6, "eu", 5), _row(7, "ap", 0)])  # v2: inserts only
    appended = _by_mode(spark, s, "mv_p", PROJECTION, run="i1")
    assert appended.state == "COMPLETED" and appended.message is not None
    assert appended.message.startswith("incremental: 2 change rows applied") and "append:" in appended.message
    assert tables.delta_history(spark, s, "mv_p")[0]["operation"] == "WRITE"  # appended, no MERGE
    assert appended.watermark_before == {"sales": 1} and appended.watermark_after == {"sales": 2}
    assert _rows(spark, s, "mv_p") == _query_at(spark, s, PROJECTION, 2)
    assert _rows(spark, s, "mv_p").count(("eu", 50)) == 3

    tables.append(spark, s, "sales", [_row(8, "cn", 9)])  # v3
    _dml(spark, s, "DELETE FROM {sales} WHERE id IN (1, 8)")  # v4: one of three equal rows; v3's row
    # v5: id 3 leaves the WHERE, id 4 enters it, id 5 changes a column the MV does not show.
    _dml(
        spark,
        s,
        "UPDATE {sales} SET amount = CASE id WHEN 3 THEN 1 WHEN 4 THEN 7 ELSE amount END, "
        "id = CASE id WHEN 5 THEN 105 ELSE id END WHERE id IN (3, 4, 5)",
    )
    result = _fast(spark, s, "mv_p", PROJECTION, run="i2")
    assert result.applied and "9 change rows applied" in result.message, result.message
    assert "rewrite merge: " in result.message, result.message
    _assert_like_complete(spark, s, "mv_p", PROJECTION, 5)
    assert _rows(spark, s, "mv_p").count(("eu", 50)) == 2

    commit = tables.delta_history(spark, s, "mv_p")[0]
    assert commit["operation"] == "MERGE" and commit["version"] == result.delta_version
    assert json.loads(commit["userMetadata"]) == {
        "mvs": {
            "task_id": "mv:mv_p",
            "epoch": 1,
            "run_id": "i2",
            "watermark": {"sales": 5},
            "technique": "FAST",
        }
    }
    assert commit["txn"] == [{"appId": "mv:mv_p", "version": txn_version(1, {"sales": 5})}]
    # The commit confs were set in the run's own session only.
    assert spark.conf.get("spark.databricks.delta.write.txnAppId", None) is None
    assert spark.conf.get("spark.databricks.delta.commitInfo.userMetadata", None) is None

    replay = _fast(spark, s, "mv_p", PROJECTION, run="i3")  # same epoch, same base version
    assert not replay.applied and "already applied" in replay.message
    assert warehouse.latest_version(s, "mv_p") == result.delta_version


@pytest.mark.parametrize("listing", ["keys listed", "more change rows than keys are listed"])
def test_aggregates_match_complete_refresh(
    spark: Any, local_settings: Settings, listing: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Past the listing limit, an MV delta-rs reads whole and that keeps no state computes its delta
    # pass inside the job that joins it to the MV rows, and lists no keys (one job fewer).
    listed: list[object] = []
    if listing != "keys listed":
        monkeypatch.setattr(apply, "GROUP_FILTER_LIMIT", 0)
        lister = incremental_aggregate.key_filter
        monkeypatch.setattr(
            incremental_aggregate, "key_filter", lambda *a, **k: listed.append(a) or lister(*a, **k)
        )
    s = local_settings
    initial = [_row(1, "eu", 5), _row(2, "eu", 2), _row(3, "eu", 8), _row(4, "us", 3), _row(5, "us", 4)]
    _base(spark, s, [*initial, _row(6, "ap", 6)])
    for mv, query in AGGREGATES.items():
        assert _complete(spark, s, mv, query).applied

    # v2: inserts into existing groups, a new group, a NULL group key and a NULL amount.
    tables.append(
        spark, s, "sales", [_row(7, "eu", 1), _row(8, "cn", 4), _row(9, None, 2), _row(10, "ap", None)]
    )
    sums = AGGREGATES["mv_sums"]
    inserted = _fast(spark, s, "mv_sums", sums, run="i1")
    assert (
        "4 change rows applied" in inserted.message
        # Two steps: delta-rs reads the 4 groups' MV rows and commits (``rs_commit``), no Spark MERGE.
        and "keyed merge: linear over the base's change rows: 4 groups changed, 0 recomputed"
        in inserted.message
    )
    assert _rows(spark, s, "mv_sums") == _query_at(spark, s, sums, 2)
    assert not listed

    # v3: eu loses its MIN (1) and us vanishes; v4: ap's only non-NULL amount moves to eu and the
    # NULL group's MIN (2) becomes 3.
    _dml(spark, s, "DELETE FROM {sales} WHERE id = 7 OR region = 'us'")
    _dml(
        spark,
        s,
        "UPDATE {sales} SET region = CASE id WHEN 6 THEN 'eu' ELSE region END, "
        "amount = CASE id WHEN 9 THEN 3 ELSE amount END WHERE id IN (6, 9)",
    )
    deleted = _fast(spark, s, "mv_sums", sums, run="i2")
    # Recomputed from the base: eu and the NULL group (their MIN was deleted). us is deleted
    # (COUNT(*) = 0) and ap's MIN/MAX/SUM become NULL (COUNT(amount) = 0) without recomputing.
    assert "7 change rows applied" in deleted.message and "4 groups changed, 2 recomputed" in deleted.message
    _assert_like_complete(spark, s, "mv_sums", sums, 4)
    by_region = {r[0]: r for r in _rows(spark, s, "mv_sums")}
    assert "us" not in by_region and by_region["eu"] == ("eu", 4, 4, 21, 2, 8)
    assert by_region["ap"] == ("ap", 1, 0, None, None, None)

    # The others catch up over all of it at once (inserts, deletes and updates in one window).
    for mv in ("mv_avg", "mv_all"):
        result = _fast(spark, s, mv, AGGREGATES[mv], run="i1")
        assert result.applied and "11 change rows applied" in result.message, result.message
        assert _rows(spark, s, mv) == _query_at(spark, s, AGGREGATES[mv], 4), mv


def test_a_range_without_change_rows_moves_the_watermark_without_a_spark_job(
    spark: Any, local_settings: Settings
) -> None:
    s = local_settings
    avg = AGGREGATES["mv_avg"]  # keeps helper state (AVG)
    _base(spark, s, [_row(1, "eu", 5), _row(2, "us", 3)])
    for mv, query in (("mv_avg", avg), ("mv_p", PROJECTION)):
        assert _complete(spark, s, mv, query).applied
    tables.append(spark, s, "sales", [_row(3, "eu", 7)])
    for mv, query in (("mv_avg", avg), ("mv_p", PROJECTION)):
        assert _fast(spark, s, mv, query, run="changed").applied
    changed = warehouse.latest_version(s, "sales")
    assert changed is not None

    # Commits that hold no change row: a property set, a DELETE that matches nothing.
    _dml(spark, s, "ALTER TABLE {sales} SET TBLPROPERTIES ('mvs.test.note' = 'no data')")
    _dml(spark, s, "DELETE FROM {sales} WHERE id < 0")
    quiet = warehouse.latest_version(s, "sales")
    assert quiet is not None and quiet > changed
    for mv, query in (("mv_avg", avg), ("mv_p", PROJECTION)):
        before = warehouse.latest_version(s, mv)
        request = run_request(s, mv, query, mode="FAST", run="quiet")
        result = quiet_run = incremental.refresh_incremental(spark, s, request)
        assert result.applied and result.watermark_after == {"sales": quiet}, result
        assert "0 change rows applied" in result.message and "only the watermark moved" in result.message
        assert result.spark_jobs == 0 and result.rows_written == 0, result
        assert before is not None and warehouse.latest_version(s, mv) == before + 1
        assert _rows(spark, s, mv) == _query_at(spark, s, query, quiet)
        # Exactly once: the run replayed finds nothing to apply, and the same commit again lands nowhere.
        replay = incremental.refresh_incremental(spark, s, request)
        assert not replay.applied and replay.message == "skipped: this watermark was already applied"
        commit = RunCommit(spark, s, request).commit_id({"sales": quiet})
        assert not rs_commit.empty_commit(s, mv, before + 1, commit)
        assert warehouse.latest_version(s, mv) == before + 1

    # The helper state moved with the watermark: the next run with change rows keeps it.
    _dml(spark, s, "UPDATE {sales} SET amount = amount + 1 WHERE id = 1")
    updated = _fast(spark, s, "mv_avg", avg, run="after")
    assert "state kept in" in updated.message, updated.message
    _assert_like_complete(spark, s, "mv_avg", avg, quiet + 1)
    assert quiet_run.rebuilt is None  # nothing rebuilt nor applied: no cost to learn from

    # Right after a complete run, a quiet range leaves the content made by COMPLETE: the FAST run
    # after it is still the first after a complete run (priced so: ``worker.costs``), which catches
    # the helper state up from its own run, the quiet one's range included (nothing rebuilt).
    _dml(spark, s, "UPDATE {sales} SET amount = amount + 1 WHERE id = 2")
    assert _complete(spark, s, "mv_avg", avg, run="again").applied
    _dml(spark, s, "ALTER TABLE {sales} SET TBLPROPERTIES ('mvs.test.note' = 'quiet again')")
    assert _fast(spark, s, "mv_avg", avg, run="quiet again").applied
    made = refresh.read_watermark(spark, s, "mv_avg")
    assert made is not None and made.technique == "COMPLETE", made
    _dml(spark, s, "UPDATE {sales} SET amount = amount + 1 WHERE id = 1")
    caught = _fast(spark, s, "mv_avg", avg, run="caught up")
    assert "state caught up in" in caught.message and caught.rebuilt == NO_REBUILD, caught
    _assert_like_complete(spark, s, "mv_avg", avg, warehouse.latest_version(s, "sales"))


def test_the_decision_says_why_and_falls_back(spark: Any, local_settings: Settings) -> None:
    s = local_settings
    sums = AGGREGATES["mv_sums"]
    _base(spark, s, [_row(1, "eu", 5), _row(2, "us", 3)], mv_log=False)  # v0
    assert _choose(spark, s, "mv_f", sums) == ("COMPLETE", "complete: first build")
    assert _choose(spark, s, "mv_f", sums, mode="COMPLETE") == ("COMPLETE", "complete: refresh mode COMPLETE")
    kind, why = _choose(spark, s, "mv_f", "SELECT region FROM sales LIMIT 5")
    assert kind == "COMPLETE" and why.startswith(
        "complete: fast refresh is not possible: LIMIT without ORDER BY keeps any n rows"
    ), why

    assert _complete(spark, s, "mv_f", sums).applied  # watermark v0
    assert _choose(spark, s, "mv_f", sums) == ("SKIP", "skipped: no change")  # the MV is at v0 too
    assert _blocker(spark, s, "mv_f", sums) == "complete: no MV log on sales"
    with pytest.raises(ChangesNotRetained, match="no MV log on sales"):
        _fast(spark, s, "mv_f", sums, run="f1")

    mvlog.create_mv_log(spark, s, "sales")  # v1: the log starts right after the watermark
    assert _choose(spark, s, "mv_f", sums) == ("INCREMENTAL", "fast: changes of sales after v0 up to v1")
    other = "SELECT region, COUNT(*) AS n FROM sales GROUP BY region"  # an ALTERed query
    kind, why = _choose(spark, s, "mv_f", other)
    assert kind == "COMPLETE" and "columns (region string, n bigint, n_amount bigint" in why
    assert why.endswith("differ from the query's (region string, n bigint)")

    tables.append(spark, s, "sales", [_row(3, "eu", 1)])  # v2
    _dml(spark, s, "DELETE FROM {sales} WHERE id = 1")  # v3
    assert mvlog.purge(spark, s, "sales", safepoint=3).rows_deleted == 1  # v2's change row is gone
    expected = ("COMPLETE", "complete: change data before v3 was purged")
    assert _choose(spark, s, "mv_f", sums, mode="FAST") == expected
    result = _by_mode(spark, s, "mv_f", sums, run="f2")
    assert result.state == "COMPLETED" and result.message is not None
    assert result.message.startswith("complete: change data before v3 was purged; wrote 2 rows")

    # Caught up again: the next refresh is incremental.
    tables.append(spark, s, "sales", [_row(4, "us", 9)])  # v4
    assert _choose(spark, s, "mv_f", sums) == ("INCREMENTAL", "fast: changes of sales after v3 up to v4")


def test_stale_epoch_incremental_commit_is_skipped(spark: Any, local_settings: Settings) -> None:
    s = local_settings
    sums = AGGREGATES["mv_sums"]
    _base(spark, s, [_row(1, "eu", 5), _row(2, "us", 3)])  # v0, log at v1
    assert _complete(spark, s, "mv_s", sums, epoch=1).applied  # watermark v1, epoch 1
    before = _rows(spark, s, "mv_s")
    _dml(spark, s, "DELETE FROM {sales} WHERE id = 1")  # v2

    # A new owner (epoch 3) has started: its first step fences the MV for its epoch. The old owner
    # (epoch 2) still read epoch 1's watermark, computes its MERGE, and Delta skips the commit.
    mv_version = warehouse.latest_version(s, "mv_s")
    assert mv_version is not None
    RunCommit(spark, s, run_request(s, "mv_s", sums, epoch=3, run="new-owner")).fence(2)
    fence = tables.delta_history(spark, s, "mv_s")[0]
    assert (
        fence["txn"] == [{"appId": "mv:mv_s", "version": 3 * EPOCH_SHIFT}]
        and fence["version"] == mv_version + 1
    )
    stale = _fast(spark, s, "mv_s", sums, epoch=2, run="old-owner")
    assert not stale.applied and "txnVersion" in stale.message, stale.message
    assert warehouse.latest_version(s, "mv_s") == mv_version + 1 and _rows(spark, s, "mv_s") == before

    # Once epoch 3 has written, the old owner does not even try.
    assert _complete(spark, s, "mv_s", sums, epoch=3, run="new-owner").applied
    again = _fast(spark, s, "mv_s", sums, epoch=2, run="old-owner-2")
    assert not again.applied and again.message == "skipped: stale epoch 2: epoch 3 already wrote"
    assert again.watermark_after == {"sales": 2}


def test_a_stale_owners_commit_of_the_pinned_versions_leaves_nothing_to_apply(
    spark: Any, local_settings: Settings
) -> None:
    # The race a cut-off worker makes: the new owner (epoch 3) decided on v1 -> v2, then the old owner
    # (epoch 2), which still reaches the warehouse, committed v2 before the new owner's fence. The
    # new owner's run finds the MV at its pinned version: nothing to read (the MV log has not captured
    # v2, and a change feed from v3 to v2 is an error), nothing to commit.
    s = local_settings
    sums = AGGREGATES["mv_sums"]
    _base(spark, s, [_row(1, "eu", 5), _row(2, "us", 3)])  # v0, log at v1
    assert _complete(spark, s, "mv_r", sums, epoch=1).applied
    tables.append(spark, s, "sales", [_row(3, "eu", 7)])  # v2
    assert _fast(spark, s, "mv_r", sums, epoch=2, run="old-owner").applied
    rows, version = _rows(spark, s, "mv_r"), warehouse.latest_version(s, "mv_r")
    assert version is not None

    changes.forget()  # the new owner is another process: it holds none of the old owner's change rows
    late = _fast(spark, s, "mv_r", sums, epoch=3, run="new-owner")
    assert not late.applied and late.watermark_after == {"sales": 2}, late
    assert late.message == "skipped: the MV already reflects these versions (epoch 2 wrote them)"
    assert _rows(spark, s, "mv_r") == rows and warehouse.latest_version(s, "mv_r") == version + 1  # the fence


def test_an_mv_missing_rows_the_change_data_deletes_is_recomputed_and_says_why(
    spark: Any, local_settings: Settings
) -> None:
    # The check that the MV holds every copy the change data deletes runs inside the job that
    # computes the rewritten rows; its failure is told apart from any other and the run recomputes.
    s = local_settings
    _base(spark, s, [_row(1, "eu", 5), _row(2, "eu", 5), _row(3, "us", 3)])
    assert _complete(spark, s, "mv_p", PROJECTION).applied  # watermark v1
    mv = f"delta.`{warehouse.table_path(s, 'mv_p')}`"
    spark.sql(f"DELETE FROM {mv} WHERE region = 'eu'")  # not through mvs: the MV lost both copies
    _dml(spark, s, "DELETE FROM {sales} WHERE id = 1")  # v2: the change data deletes one of them
    result = _by_mode(spark, s, "mv_p", PROJECTION, run="i1")
    assert result.state == "COMPLETED" and result.message is not None, result
    assert result.message.startswith("complete: MV content does not match its watermark"), result.message
    assert "fewer copies of a row than the change data deletes" in result.message, result.message
    assert _rows(spark, s, "mv_p") == _query_at(spark, s, PROJECTION, 2)
