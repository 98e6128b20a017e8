"""FORCE chooses per run by cost on real Spark + Delta (issue 30): the change and table sizes come
from the Delta logs, the choice flips from FAST to COMPLETE as the change grows (by cost, then as a
bulk load) and back, every run records what it considered, and the MV stays exact throughout.

The runner's cost model is fixed here (``learn=False``) so that where the flip falls depends only on
the sizes the logs give; learning from outcomes is unit-tested (tests/unit/worker/test_planning.py).
"""

from __future__ import annotations

from typing import Any

import pytest

from workers import demo_tables as tables
from workers import warehouse
from workers.config import Settings
from workers.ddl import analyze_query, plan_record
from workers.jobs import read_watermark
from workers.jobs.changes import mvlog
from workers.worker.planning import COMPLETE, FAST, CostModel, TechniqueCost
from workers.worker.runner import RunResult, SparkRunner

pytestmark = pytest.mark.integration

SCHEMA = "id long, grp string, amount long"
QUERY = "SELECT id, grp, amount * 2 AS twice FROM events WHERE amount >= 0"
# FAST costs 1 ms per change row, COMPLETE 0.1 ms per row read or written: with the MV as big as the
# base, FAST is cheaper below a change of ~20 % of the base. A projection keeps no helper state: no
# rebuild after a complete run.
MODEL = CostModel(
    fast=TechniqueCost(0.0, 1.0), complete=TechniqueCost(0.0, 0.1), rebuild=TechniqueCost(0.0, 0.0)
)


def _rows(start: int, count: int) -> list[dict[str, Any]]:
    return [{"id": i, "grp": f"g{i % 7}", "amount": i % 50} for i in range(start, start + count)]


def _refresh(runner: SparkRunner, run: str) -> RunResult:
    spec = {
        "query": QUERY,
        "refresh_mode": "FORCE",
        "base_tables": ["events"],
        "plan": plan_record(analyze_query(QUERY).plan),
    }
    task = {"task_id": "mv:by_cost", "name": "by_cost", "kind": "MV", "epoch": 1, "mv": spec}
    return runner.refresh(task, run_id=run, job_group=f"by_cost-{run}")


def _exact(spark: Any, settings: Settings) -> None:
    path = warehouse.table_path(settings, "events")
    session = spark.newSession()
    session.read.format("delta").load(path).createTempView("events")
    want = sorted(tuple(r) for r in session.sql(QUERY).collect())
    assert sorted(tuple(r.values()) for r in tables.read_table(spark, settings, "by_cost")) == want


def test_force_flips_with_the_change_size_and_records_what_it_considered(
    spark: Any, local_settings: Settings
) -> None:
    s = local_settings
    tables.create_table(spark, s, "events", _rows(0, 2000), SCHEMA)
    mvlog.create_mv_log(spark, s, "events")
    runner = SparkRunner(s, lambda _settings: spark, priors=MODEL, learn=False)
    first = _refresh(runner, "r0")
    assert first.planning is not None and first.planning["reason"] == "complete: first build"
    assert first.planning["base_rows"] == 2000 and first.planning["change_rows"] is None
    assert (first.rows_inserted, first.rows_deleted) == (2000, 0)

    seen: list[tuple[int, str, str]] = []
    mv_rows, next_id = 2000, 2000
    for step, added in enumerate([1, 600, 3000, 2]):
        tables.append(spark, s, "events", _rows(next_id, added))
        next_id += added
        result = _refresh(runner, f"r{step + 1}")
        planning = result.planning
        assert planning is not None and planning["change_rows"] == added and planning["base_rows"] == next_id
        assert planning["mv_rows"] == mv_rows
        fast, complete = planning["candidates"]
        assert fast["estimated_ms"] == pytest.approx(added * 1.0)
        assert complete["estimated_ms"] == pytest.approx(0.1 * (next_id + mv_rows))
        # What ran is what was chosen: the message and the rows the MV commit says it changed.
        head = "incremental" if planning["choice"] == FAST else "complete"
        assert (result.message or "").startswith(head), result.message
        deleted = 0 if planning["choice"] == FAST else mv_rows
        assert (result.rows_inserted, result.rows_deleted) == (
            added if head == "incremental" else next_id,
            deleted,
        )
        seen.append((added, planning["choice"], planning["reason"].partition(":")[2].split(":")[0].strip()))
        mv_rows = next_id
    assert seen == [
        (1, FAST, "cost"),
        (600, COMPLETE, "cost"),  # 22 % of the base: recomputing is cheaper by the model
        (3000, COMPLETE, "bulk change"),  # 53 %: a bulk load, whatever the estimates
        (2, FAST, "cost"),  # and back
    ]
    _exact(spark, s)  # the MV after FAST, COMPLETE, COMPLETE and FAST runs: exactly the query


def test_a_new_owner_goes_on_from_the_costs_the_mvs_last_commit_kept(
    spark: Any, local_settings: Settings
) -> None:
    """What a worker learnt of an MV's costs is kept in the MV's commits (beside the watermark), so
    a worker taking the MV over (failover, restart) plans with it, not with the priors."""
    s = local_settings
    tables.create_table(spark, s, "events", _rows(0, 500), SCHEMA)
    mvlog.create_mv_log(spark, s, "events")
    learner = SparkRunner(s, lambda _settings: spark)  # learns from its runs, from the priors
    _refresh(learner, "l0")  # the first build (COMPLETE): teaches COMPLETE's costs
    built = read_watermark(spark, s, "by_cost")
    assert built is not None and built.technique == "COMPLETE"
    # A worker that never ran the MV knows from its last commit that FAST would rebuild state now.
    tables.append(spark, s, "events", _rows(500, 5))
    after_build = _refresh(SparkRunner(s, lambda _settings: spark), "f1").planning
    assert after_build is not None and "state rebuild" in after_build["reason"], after_build
    assert read_watermark(spark, s, "by_cost").technique == after_build["choice"]  # type: ignore[union-attr]
    tables.append(spark, s, "events", _rows(505, 5))
    _refresh(learner, "l1")  # FAST: teaches FAST's
    taught = learner.cost_model("mv:by_cost")
    assert taught != CostModel()
    tables.append(spark, s, "events", _rows(510, 5))
    _refresh(learner, "l2")  # its commit keeps what l0 and l1 taught
    kept = read_watermark(spark, s, "by_cost")
    assert kept is not None and kept.costs == taught.record()

    successor = SparkRunner(s, lambda _settings: spark)
    assert successor.cost_model("mv:by_cost") == CostModel()  # nothing learnt here yet
    assert _refresh(successor, "s0").state == "SKIPPED"  # nothing changed: no outcome to learn from
    assert successor.cost_model("mv:by_cost") == taught  # went on from the MV's last commit


GROUPED = "SELECT grp, AVG(amount) AS a, COUNT(*) AS n FROM events GROUP BY grp"  # AVG: a state
# An EXISTS kept by key counts under an aggregate that keeps no state (COUNT: derived from the MV).
COUNTED = (
    "SELECT grp, COUNT(*) AS n FROM events e "
    "WHERE EXISTS (SELECT * FROM events f WHERE f.grp = e.grp AND f.amount > 10) GROUP BY grp"
)
# Key counts declined (one matching row a key, under ``MIN_ROWS_PER_KEY``): none kept, none rebuilt.
DECLINED = (
    "SELECT grp, COUNT(*) AS n FROM events e "
    "WHERE EXISTS (SELECT * FROM events f WHERE f.id = e.id AND f.amount > 10) GROUP BY grp"
)


@pytest.mark.parametrize(
    ("query", "went_on", "kept"),
    [
        (GROUPED, "helper state caught up from before the complete run", True),
        (f"{GROUPED} ORDER BY n DESC, grp LIMIT 3", "rows caught up from before the complete run", True),
        (COUNTED, "key counts: caught up from before the complete run", True),
        (DECLINED, "recompute of the rows whose", False),
    ],
    ids=["aggregate", "top-N", "key counts", "key counts declined"],
)
def test_force_charges_no_state_rebuild_where_the_fast_run_would_catch_the_state_up(
    spark: Any, local_settings: Settings, query: str, went_on: str, kept: bool
) -> None:
    """After complete runs, FORCE charges FAST the rebuild of its helper state (a top-N's rows table,
    key counts) only where the run could not go on from the state's own run
    (``helper_state_catch_up``): a rebuild dear enough to keep FORCE on COMPLETE is not charged while
    the MV log holds the change rows since that run (FAST is priced by those rows, the ones it reads),
    and is once they are purged. Key counts declined (``kept`` False) are never rebuilt: FAST is
    priced by its own range, before the purge and after."""
    s = local_settings
    model = CostModel(
        fast=TechniqueCost(0.0, 1.0), complete=TechniqueCost(0.0, 0.1), rebuild=TechniqueCost(1e6, 0.0)
    )
    tables.create_table(spark, s, "events", _rows(0, 2000), SCHEMA)
    mvlog.create_mv_log(spark, s, "events")
    runner = SparkRunner(s, lambda _settings: spark, priors=model, learn=False)

    def refresh(mode: str, run: str, added: int) -> RunResult:
        if added:
            start = 2000 + int(run[1:]) * 10
            tables.append(spark, s, "events", _rows(start, added))
        info = analyze_query(query, columns_of=lambda table: warehouse.table_columns(s, table))
        plan = plan_record(info.plan)
        spec = {"query": query, "refresh_mode": mode, "base_tables": ["events"], "plan": plan}
        task = {"task_id": "mv:by_state", "name": "by_state", "kind": "MV", "epoch": 1, "mv": spec}
        return runner.refresh(task, run_id=run, job_group=f"by_state-{run}")

    refresh("FAST", "r0", 0)  # the first build
    assert "state rebuilt" in (refresh("FAST", "r1", 1).message or "")  # the state's own run
    refresh("COMPLETE", "r2", 1)
    caught = refresh("FORCE", "r3", 1)
    assert caught.planning is not None and caught.planning["reason"].startswith("fast: cost"), caught.planning
    assert "state rebuild" not in caught.planning["reason"], caught.planning
    # Since r1, r2's row and r3's; declined, r3's alone.
    assert caught.planning["change_rows"] == (2 if kept else 1), caught.planning
    assert went_on in (caught.message or ""), caught.message

    refresh("COMPLETE", "r4", 1)
    recomputed = read_watermark(spark, s, "by_state")
    assert recomputed is not None
    mvlog.purge(spark, s, "events", safepoint=recomputed.watermark["events"] + 1)  # r3's rows gone
    charged = refresh("FORCE", "r5", 1)
    assert charged.planning is not None and charged.planning["choice"] == (COMPLETE if kept else FAST)
    assert ("state rebuild" in charged.planning["reason"]) == kept, charged.planning
