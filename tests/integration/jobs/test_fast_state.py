"""Helper state of aggregate MVs (``workers.jobs.fast.aggregate.state``), on real Spark + Delta: AVG, SUM of
doubles and decimals, COUNT(col) and groups that vanish (no COUNT(*)) are refreshed from the state,
never re-reading the base ("0 recomputed"); float cancellation stays exact; a crash between the state
commit and the MV commit, a COMPLETE refresh in between, or DROP never leaves a wrong MV or a stale
state behind."""

from __future__ import annotations

from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

from tests.support.check_session import checking_session
from tests.support.run_requests import run_request
from workers import demo_tables as tables
from workers import warehouse
from workers.catalog.names import mv_name_problem
from workers.config import Settings
from workers.jobs import complete as refresh
from workers.jobs.changes import mvlog
from workers.jobs.complete import RefreshResult
from workers.jobs.delta import log as deltalog
from workers.jobs.delta import rs_commit
from workers.jobs.delta.metadata import txn_version
from workers.jobs.fast import refresh as incremental
from workers.jobs.fast.aggregate.merge import aggregate_merge
from workers.jobs.fast.aggregate.state import StateStore
from workers.jobs.fast.apply import Scope
from workers.jobs.fast.inputs import base_input
from workers.jobs.rebuilt import NO_REBUILD

pytestmark = pytest.mark.integration

SCHEMA = "id long, g string, v long, d decimal(10,2), w decimal(20,4), x double"
# No COUNT(*): a vanished group is seen only through the state.
QUERY = (
    "SELECT g, AVG(v) AS a_v, SUM(x) AS s_x, COUNT(x) AS n_x, AVG(x) AS a_x, AVG(d) AS a_d, "
    "SUM(d) AS s_d, AVG(w) AS a_w, SUM(v) AS s_v FROM sales GROUP BY g"
)


def _row(
    i: int, g: str | None, v: int | None, d: str | None, x: float | None, w: str | None = None
) -> dict[str, Any]:
    return {
        "id": i,
        "g": g,
        "v": v,
        "d": None if d is None else Decimal(d),
        "w": None if w is None else Decimal(w),
        "x": x,
    }


def _dml(spark: Any, settings: Settings, statement: str) -> None:
    spark.sql(statement.format(sales=f"delta.`{warehouse.table_path(settings, 'sales')}`"))


def _build(
    spark: Any, settings: Settings, rows: list[dict[str, Any]], query: str = QUERY, run: str = "c0"
) -> None:
    tables.create_table(spark, settings, "sales", rows, SCHEMA)
    mvlog.create_mv_log(spark, settings, "sales")
    _complete(spark, settings, query, run)


def _complete(spark: Any, settings: Settings, query: str, run: str) -> None:
    assert refresh.refresh_complete(spark, settings, run_request(settings, "mv_s", query, run=run)).applied


def _fast(spark: Any, settings: Settings, run: str, query: str = QUERY) -> str:
    return _fast_run(spark, settings, run, query).message


def _fast_run(spark: Any, settings: Settings, run: str, query: str = QUERY) -> RefreshResult:
    request = run_request(settings, "mv_s", query, mode="FAST", run=run)
    result = incremental.refresh_incremental(spark, settings, request)
    assert result.applied and result.message.startswith("incremental:"), result.message
    _assert_equal(spark, settings, query)
    return result


def _sorted(rows: list[tuple[Any, ...]]) -> list[tuple[Any, ...]]:
    return sorted(rows, key=repr)


def _assert_equal(spark: Any, settings: Settings, query: str) -> None:
    """The MV holds exactly the query's rows over the base now, in the query's columns (strict equality:
    every value here is exact, doubles included)."""
    session = checking_session(spark)
    session.read.format("delta").load(warehouse.table_path(settings, "sales")).createTempView("sales")
    expected = session.sql(query)
    mv = spark.read.format("delta").load(warehouse.table_path(settings, "mv_s"))
    columns = [(f.name, f.dataType.simpleString()) for f in mv.schema.fields]
    assert columns == [(f.name, f.dataType.simpleString()) for f in expected.schema.fields]
    assert _sorted([tuple(r) for r in mv.collect()]) == _sorted([tuple(r) for r in expected.collect()])


def _state_exists(settings: Settings) -> bool:
    return warehouse.table_exists(settings, warehouse.state_table_name("mv_s"))


def _group(spark: Any, settings: Settings, g: str) -> dict[str, Any] | None:
    rows = [r for r in tables.read_table(spark, settings, "mv_s") if r["g"] == g]
    return rows[0] if rows else None


def test_avg_float_sum_count_col_and_vanishing_groups_need_no_base_read(
    spark: Any, local_settings: Settings
) -> None:
    s = local_settings
    _build(
        spark,
        s,
        [_row(1, "a", 5, "1.25", 0.1), _row(2, "a", None, None, None), _row(3, "b", 2, "3.10", 2 / 3)],
    )
    tables.append(spark, s, "sales", [_row(4, "c", 1, "0.01", 0.25)])
    built = _fast_run(spark, s, "f1")  # no state yet: built from the base once, and timed as such
    first = built.message
    assert "state rebuilt from the base in mv_s__mvstate" in first and "0 recomputed" in first, first
    assert built.rebuilt is not None and built.rebuilt.ms > 0, built

    # Inserts with NULLs, a delete, updates moving rows between groups (into a NULL key, too).
    tables.append(spark, s, "sales", [_row(5, "a", -3, "2.50", -1.5), _row(6, None, None, "0.00", None)])
    _dml(spark, s, "DELETE FROM {sales} WHERE id = 1")
    _dml(spark, s, "UPDATE {sales} SET g = 'b' WHERE id = 5")
    _dml(spark, s, "UPDATE {sales} SET g = NULL, x = 1000.0 WHERE id = 3")
    kept = _fast_run(spark, s, "f2")
    moved = kept.message
    assert "0 recomputed from the base, state kept in mv_s__mvstate" in moved, moved
    assert kept.rebuilt == NO_REBUILD, kept  # the state read, not rebuilt: nothing timed as a rebuild
    # The changed groups' state (a NULL key among them) merged by delta-rs, no Spark MERGE.
    state_commit = next(deltalog.iter_commits(spark, s, warehouse.state_table_name("mv_s")))
    assert (state_commit.engine or "").startswith("delta-rs"), state_commit

    # Group c vanishes (no COUNT(*) in the MV), group a keeps only a row of NULLs; then c comes back.
    _dml(spark, s, "DELETE FROM {sales} WHERE g = 'c'")
    vanished = _fast(spark, s, "f3")
    assert "1 groups changed, 0 recomputed" in vanished and _group(spark, s, "c") is None, vanished
    assert _group(spark, s, "a") == {
        "g": "a", "a_v": None, "s_x": None, "n_x": 0, "a_x": None, "a_d": None,
        "s_d": None, "a_w": None, "s_v": None,
    }  # fmt: skip
    tables.append(spark, s, "sales", [_row(7, "c", 4, "9.99", 0.5), _row(8, "c", 6, "0.02", None)])
    back = _fast(spark, s, "f4")
    assert "1 groups changed, 0 recomputed" in back, back
    group_c = _group(spark, s, "c")
    assert group_c is not None and group_c["a_v"] == 5.0 and group_c["a_d"] == Decimal("5.005000")


def test_float_sums_survive_cancellation_and_values_too_large_to_keep(
    spark: Any, local_settings: Settings
) -> None:
    s = local_settings
    query = "SELECT g, SUM(x) AS s_x, AVG(x) AS a_x FROM sales GROUP BY g"
    _build(spark, s, [_row(1, "a", None, None, 1.0)], query)
    _fast_first(spark, s, query)
    # 1e18 + 1 is 1e18 in doubles (its ulp is 128): a running double sum would end at 0 below.
    tables.append(spark, s, "sales", [_row(2, "a", None, None, 1e18)])
    assert "0 recomputed" in _fast(spark, s, "f2", query)
    _dml(spark, s, "DELETE FROM {sales} WHERE id = 2")
    assert "0 recomputed" in _fast(spark, s, "f3", query)
    assert _group(spark, s, "a") == {"g": "a", "s_x": 1.0, "a_x": 1.0}
    # 1e20 has more integer digits than the exact sum keeps: the group is recomputed while it holds it.
    tables.append(spark, s, "sales", [_row(3, "a", None, None, 1e20), _row(4, "b", None, None, 0.1)])
    assert "2 groups changed, 1 recomputed" in _fast(spark, s, "f4", query)
    _dml(spark, s, "DELETE FROM {sales} WHERE id = 3")
    assert "0 recomputed" in _fast(spark, s, "f5", query)
    assert _group(spark, s, "a") == {"g": "a", "s_x": 1.0, "a_x": 1.0}


def _fast_first(spark: Any, settings: Settings, query: str) -> None:
    """The first FAST run after a build: one insert, the state built from the base."""
    tables.append(spark, settings, "sales", [_row(100, "z", 1, "1.00", 1.0, "1.0000")])
    assert "state rebuilt" in _fast(spark, settings, "f1", query)


def test_decimal_averages_round_as_spark_does(spark: Any, local_settings: Settings) -> None:
    """AVG(DECIMAL(10,2)) (Spark computes it in doubles) and AVG(DECIMAL(20,4)) (a decimal division),
    with HALF_UP ties at the result's last digit, negative ties, repeating quotients."""
    s = local_settings
    query = "SELECT g, AVG(d) AS a_d, AVG(w) AS a_w, SUM(w) AS s_w, COUNT(*) AS n FROM sales GROUP BY g"
    _build(spark, s, [_row(0, "t", None, "0.00", None, "0.0000")], query)
    _fast_first(spark, s, query)
    rows = [_row(1, "t", None, "0.01", None, "0.0001")]  # with 31 zeros: 1/32 ends in 5 past the scale
    rows += [_row(i, "t", None, "0.00", None, "0.0000") for i in range(2, 32)]
    rows += [_row(40, "n", None, "-0.01", None, "-0.0001")] + [
        _row(i, "n", None, "0.00", None, "0.0000") for i in range(41, 72)
    ]
    rows += [_row(80, "r", None, "1.00", None, "1.0000"), _row(81, "r", None, "0.01", None, "2.0001")]
    rows += [_row(82, "r", None, "99999999.99", None, "9999999999999999.9999")]
    tables.append(spark, s, "sales", rows)
    assert "0 recomputed" in _fast(spark, s, "f2", query)
    assert _group(spark, s, "t")["a_w"] == Decimal("0.00000313")  # type: ignore[index]
    assert _group(spark, s, "n")["a_d"] == Decimal("-0.000313")  # type: ignore[index]
    _dml(spark, s, "DELETE FROM {sales} WHERE id IN (2, 82)")
    assert "0 recomputed" in _fast(spark, s, "f3", query)


def test_a_crash_between_the_state_and_the_mv_commit_rebuilds_the_state(
    spark: Any, local_settings: Settings
) -> None:
    s = local_settings
    _build(spark, s, [_row(1, "a", 5, "1.25", 0.1), _row(2, "b", 2, "3.10", 2 / 3)])
    _fast_first(spark, s, QUERY)
    tables.append(spark, s, "sales", [_row(3, "a", 7, "0.50", 0.25)])
    # A run that commits its state and dies before its MV commit: the real steps, no MV commit.
    request = run_request(s, "mv_s", QUERY, mode="FAST", run="crashed")
    mv_tag = refresh.read_watermark(spark, s, "mv_s")
    assert mv_tag is not None
    since, until = mv_tag.watermark["sales"], request.pinned["sales"]
    session = spark.newSession()
    scope = Scope(session, s, "mv_s")
    store = StateStore(session, s, "mv_s", mv_tag)
    plan = request.plan.fast_refresh
    assert plan is not None
    try:
        change = aggregate_merge(
            scope,
            QUERY,
            plan,
            mvlog.read_changes(session, s, "sales", since, until),
            session.read.format("delta").load(warehouse.table_path(s, "mv_s")),
            base_input(scope, QUERY, plan, refresh.read_at(session, s, "sales", until)),
            store,
        )
        assert change.state is not None
        watermark = {"sales": until}
        store.commit(change.state, request, watermark, txn_version(1, watermark))
    finally:
        scope.close()
    assert refresh.read_watermark(spark, s, "mv_s") == mv_tag  # the MV did not move
    # The state now says "crashed", the MV its predecessor: the next run does not trust the state.
    tables.append(spark, s, "sales", [_row(4, "b", None, None, None)])
    after = _fast(spark, s, "f2")
    assert "state rebuilt" in after, after
    tables.append(spark, s, "sales", [_row(5, "a", 1, "1.00", 1.0)])
    assert "0 recomputed from the base, state kept" in _fast(spark, s, "f3")


def test_complete_refresh_then_fast_and_drop(spark: Any, local_settings: Settings) -> None:
    s = local_settings
    _build(spark, s, [_row(1, "a", 5, "1.25", 0.1)])
    _fast_first(spark, s, QUERY)
    _dml(spark, s, "UPDATE {sales} SET v = 8 WHERE id = 1")
    _complete(spark, s, QUERY, "c1")  # writes no state: the state's tag no longer names the MV's run
    # The change rows since the state's run purged, up to those the MV still needs: the state cannot
    # catch up, it is rebuilt.
    recomputed = refresh.read_watermark(spark, s, "mv_s")
    assert recomputed is not None
    mvlog.purge(spark, s, "sales", safepoint=recomputed.watermark["sales"] + 1)
    tables.append(spark, s, "sales", [_row(2, "a", 1, "2.00", 0.5)])
    assert "state rebuilt" in _fast(spark, s, "f2")
    tables.append(spark, s, "sales", [_row(3, "a", 2, "2.00", 0.5)])
    assert "0 recomputed from the base, state kept" in _fast(spark, s, "f3")

    assert _state_exists(s)
    refresh.drop_mv_table(s, "mv_s")
    assert not _state_exists(s) and not warehouse.table_exists(s, "mv_s")
    assert not Path(warehouse.local_table_dir(s, warehouse.state_table_name("mv_s"))).exists()
    _complete(spark, s, QUERY, "c2")  # re-created under the same name: a fresh state
    tables.append(spark, s, "sales", [_row(4, "b", 1, "2.00", 0.5)])
    assert "state rebuilt" in _fast(spark, s, "f4")


def test_a_fast_run_after_complete_runs_catches_the_state_up_from_its_own_run(
    spark: Any, local_settings: Settings
) -> None:
    """Complete runs write no state: the FAST run after them applies the change rows since the state's
    own run (the complete runs' ranges included) to the state, and derives the changed groups from it,
    instead of rebuilding it from the base. MIN/MAX too: a removed extreme is recomputed. Only complete
    runs may lie between (else, or with the change rows since purged, it is rebuilt:
    ``test_complete_refresh_then_fast_and_drop``)."""
    s = local_settings
    query = QUERY.replace(" FROM sales", ", MIN(v) AS lo, MAX(x) AS hi FROM sales")
    _build(spark, s, [_row(1, "a", 5, "1.25", 0.1), _row(2, "b", 2, "3.10", 2 / 3)], query)
    _fast_first(spark, s, query)
    # Between the state's run and the complete runs: a group vanishes, a MIN row goes, a row comes
    # and goes again (its value the group's lowest while it lived).
    tables.append(spark, s, "sales", [_row(3, "a", -9, "0.50", 9.5), _row(4, "c", 1, "1.00", 1.0)])
    _dml(spark, s, "DELETE FROM {sales} WHERE id = 3 OR g = 'b'")
    _complete(spark, s, query, "c1")
    _dml(spark, s, "DELETE FROM {sales} WHERE id = 100")  # the state's only row of group z
    _complete(spark, s, query, "c2")
    tables.append(spark, s, "sales", [_row(5, "a", 3, "2.00", 0.5), _row(6, "b", 4, None, None)])
    caught = _fast_run(spark, s, "f2", query)
    assert "helper state caught up from before the complete run (sales v" in caught.message, caught.message
    assert "state caught up in mv_s__mvstate" in caught.message, caught.message
    assert caught.rebuilt == NO_REBUILD, caught  # nothing rebuilt, nothing timed as a rebuild
    assert _group(spark, s, "z") is None and _group(spark, s, "b") is not None
    tables.append(spark, s, "sales", [_row(7, "a", 1, "1.00", 0.5)])
    assert "state kept in mv_s__mvstate" in _fast(spark, s, "f3", query)

    # Each time again: the state's tag names f3 now, the MV's commits since are complete runs.
    _dml(spark, s, "UPDATE {sales} SET g = 'e' WHERE id = 7")
    _complete(spark, s, query, "c3")
    tables.append(spark, s, "sales", [_row(8, "e", 2, None, 2.5)])
    assert "state caught up in" in _fast(spark, s, "f4", query)


def test_a_global_aggregate_emptied_and_refilled(spark: Any, local_settings: Settings) -> None:
    s = local_settings
    query = "SELECT AVG(x) AS a_x, COUNT(d) AS n_d, SUM(x) AS s_x, AVG(d) AS a_d FROM sales WHERE v > 0"
    _build(spark, s, [_row(1, "a", 5, "1.25", 0.1), _row(2, "b", -1, "3.10", 2 / 3)], query)
    _fast_first(spark, s, query)
    _dml(spark, s, "DELETE FROM {sales}")
    assert "0 recomputed" in _fast(spark, s, "f2", query)
    assert tables.read_table(spark, s, "mv_s") == [{"a_x": None, "n_d": 0, "s_x": None, "a_d": None}]
    tables.append(spark, s, "sales", [_row(3, "a", 2, "0.50", 0.25), _row(4, "a", 0, "9.00", 9.0)])
    assert "0 recomputed" in _fast(spark, s, "f3", query)


@pytest.mark.parametrize("writer", ["spark", "delta-rs"])
def test_integer_and_decimal_sums_need_no_count_and_no_state(
    spark: Any, local_settings: Settings, writer: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """SUM of integers/decimals without COUNT(col): NULL exactly when no non-NULL value is left, told by
    the old sum and the non-NULL counts in and out; only a sum come to exactly 0 after deletes is
    recomputed (all gone, or values left that cancel). Where Spark commits, in one pass when no group
    needs the base (else the one-pass MERGE fails and two steps follow); where delta-rs reads and
    commits (``rs_commit``), always in two steps."""
    one_pass = writer == "spark"
    if one_pass:
        monkeypatch.setattr(rs_commit, "usable", lambda *_: False)
    s = local_settings
    query = "SELECT g, COUNT(*) AS n, SUM(v) AS s_v, SUM(d) AS s_d FROM sales GROUP BY g"
    _build(
        spark,
        s,
        [_row(1, "a", 5, "1.25", None), _row(2, "a", None, None, None), _row(3, "b", 2, "3.10", None)],
        query,
    )
    # Group a loses its only non-NULL values (its sums go NULL: the old sums and 1 out, 0 in can't
    # tell, the sums are 0: recomputed); b gains a NULL and a value; c arrives with NULLs only.
    _dml(spark, s, "DELETE FROM {sales} WHERE id = 1")
    tables.append(spark, s, "sales", [_row(4, "b", None, None, None), _row(5, "b", 3, "1.00", None)])
    tables.append(spark, s, "sales", [_row(6, "c", None, None, None)])
    first = _fast(spark, s, "f1", query)
    # The one-pass MERGE met group a (nothing committed), the two steps recomputed it.
    retried = "the one-pass MERGE met a group to recompute"
    assert "3 groups changed, 1 recomputed from the base" in first and (retried in first) == one_pass, first
    assert "state" not in first, first
    assert _group(spark, s, "a") == {"g": "a", "n": 1, "s_v": None, "s_d": None}
    assert not _state_exists(s)

    # c's NULL sums gain a value and lose it in one range (NULL again); b's sums come to exactly 0 with
    # as many values in as out (0, not NULL: no re-read); a value moves from b to a.
    tables.append(spark, s, "sales", [_row(7, "c", 4, "2.00", None), _row(8, "b", -10, "-8.35", None)])
    _dml(spark, s, "DELETE FROM {sales} WHERE id = 7")
    _dml(spark, s, "UPDATE {sales} SET g = 'a' WHERE id = 5")
    tables.append(spark, s, "sales", [_row(9, "b", 8, "5.25", None)])
    second = _fast(spark, s, "f2", query)
    expected = "3 groups changed in one pass, 0 recomputed" if one_pass else "3 groups changed, 0 recomputed"
    assert expected in second, second
    assert _group(spark, s, "b") == {"g": "b", "n": 4, "s_v": 0, "s_d": Decimal("0.00")}
    assert _group(spark, s, "c") == {"g": "c", "n": 1, "s_v": None, "s_d": None}
    assert _group(spark, s, "a") == {"g": "a", "n": 2, "s_v": 3, "s_d": Decimal("1.00")}

    # b loses two values and gains one, its sums 0 again: left values that cancel, or none? Recomputed.
    tables.append(spark, s, "sales", [_row(10, "b", 10, "8.35", None)])
    _dml(spark, s, "DELETE FROM {sales} WHERE id IN (3, 9)")
    before = warehouse.latest_version(s, "mv_s")
    third = _fast(spark, s, "f3", query)
    assert "1 groups changed, 1 recomputed from the base" in third and (retried in third) == one_pass, third
    assert warehouse.latest_version(s, "mv_s") == (before or 0) + 1  # the failed MERGE committed nothing
    assert _group(spark, s, "b") == {"g": "b", "n": 3, "s_v": 0, "s_d": Decimal("0.00")}
    assert not _state_exists(s)


def test_mv_names_cannot_take_the_state_suffix() -> None:
    assert "reserved for MV state tables" in (mv_name_problem("sales__mvstate") or "")
    assert warehouse.state_table_name("x" * 128) == "x" * 128 + "__mvstate"


def test_each_rebuild_of_helper_state_is_timed_and_said_to_replace_the_change_or_not(
    spark: Any, local_settings: Settings
) -> None:
    """What the cost model learns FAST and REBUILD from (``workers.worker.costs``): a FORCE top-N's
    first build writes its rows table (FORCE's first FAST run, a probe, follows it), which that run
    maintains, rebuilding its aggregate's state beside the change. A top-N recomputed by a later
    FORCE complete run goes on from its rows table's own run (both still right there); where the
    change rows since are purged, the first FAST run recomputes the rows table instead of applying
    the change, the next rebuilds the state beside the change, the third rebuilds nothing."""
    s = local_settings
    query = "SELECT g, AVG(v) AS a_v, COUNT(*) AS n FROM sales GROUP BY g ORDER BY n DESC, g LIMIT 2"
    tables.create_table(spark, s, "sales", [_row(1, "a", 5, None, None), _row(2, "b", 1, None, None)], SCHEMA)
    mvlog.create_mv_log(spark, s, "sales")
    built = refresh.refresh_complete(spark, s, run_request(s, "mv_s", query, mode="FORCE", run="c0"))
    assert built.applied and built.rebuilt is None  # a complete run measures no rebuild
    tables.append(spark, s, "sales", [_row(6, "a", 3, None, None)])
    first = incremental.refresh_incremental(spark, s, run_request(s, "mv_s", query, mode="FORCE", run="p0"))
    assert "top-N over maintained state (keyed merge)" in first.message, first.message
    assert "state rebuilt from the base" in first.message, first.message
    assert first.rebuilt is not None and not first.rebuilt.instead and first.rebuilt.ms > 0
    tables.append(spark, s, "sales", [_row(7, "d", 1, None, None)])
    recomputed = refresh.refresh_complete(spark, s, run_request(s, "mv_s", query, mode="FORCE", run="c1"))
    assert recomputed.applied
    # The rows table and its state are still right at p0's watermark: the next run goes on from
    # there (the MV logs hold the change rows since), rebuilding nothing.
    tables.append(spark, s, "sales", [_row(8, "d", 2, None, None)])
    caught = incremental.refresh_incremental(spark, s, run_request(s, "mv_s", query, mode="FORCE", run="p1"))
    assert "rows caught up from before the complete run (sales v" in caught.message, caught.message
    assert "state kept in" in caught.message and caught.rebuilt == NO_REBUILD, caught
    assert sorted((r["g"], r["n"]) for r in tables.read_table(spark, s, "mv_s")) == [("a", 2), ("d", 2)]
    # Recomputed again, and the change rows since p1 purged: the rows table is recomputed.
    tables.append(spark, s, "sales", [_row(9, "e", 1, None, None)])
    again = refresh.refresh_complete(spark, s, run_request(s, "mv_s", query, mode="FORCE", run="c2"))
    assert again.applied
    mvlog.purge(spark, s, "sales", safepoint=again.watermark_after["sales"] + 1)
    runs = []
    for run, row in enumerate(
        [_row(3, "b", 2, None, None), _row(4, "c", 7, None, None), _row(5, "c", 1, None, None)]
    ):
        tables.append(spark, s, "sales", [row])
        request = run_request(s, "mv_s", query, mode="FORCE", run=f"f{run}")
        runs.append(incremental.refresh_incremental(spark, s, request))
    rows_table, state, steady = runs
    assert "top-N over maintained state (rebuild)" in rows_table.message, rows_table.message
    assert rows_table.rebuilt is not None and rows_table.rebuilt.instead and rows_table.rebuilt.ms > 0
    assert "state rebuilt from the base" in state.message, state.message
    assert state.rebuilt is not None and not state.rebuilt.instead and state.rebuilt.ms > 0
    assert "state kept in" in steady.message and steady.rebuilt == NO_REBUILD, steady
    top = sorted((r["g"], r["n"]) for r in tables.read_table(spark, s, "mv_s"))
    assert top == [("a", 2), ("b", 2)], top
