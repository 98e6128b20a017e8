"""FORCE's choice by cost and the planning information of a run (pure: ``workers.worker.planning``),
and the change sizes read from Delta commit actions (``workers.jobs.delta.sizes``)."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.support.change_sizes import size
from workers.ddl import analyze_query
from workers.jobs.delta.metadata import decode_user_metadata, encode_user_metadata
from workers.jobs.delta.sizes import (
    BaseChange,
    ChangeSize,
    TableSize,
)
from workers.jobs.rebuilt import Rebuilt
from workers.worker.costs import (
    FAST_FIXED_MS,
    FAST_JOIN_READ_SHARE,
    FAST_MS_PER_SCAN,
    FAST_TOP_N_MS,
    FAST_TREE_MS,
    FAST_TREE_READ_SHARE,
    REBUILD,
    PlanShape,
    joined_rows,
)
from workers.worker.decision import plan_shape
from workers.worker.planning import (
    BULK_SHARE,
    COMPLETE,
    FAST,
    CostModel,
    TechniqueCost,
    plan_run,
)

# Both techniques measured (COMPLETE by a recompute: runs > 0), so the costs alone decide.
MODEL = CostModel(fast=TechniqueCost(1000.0, 0.02, 1), complete=TechniqueCost(1000.0, 0.002, 1))


def test_force_takes_the_cheaper_and_says_both_estimates() -> None:
    small = plan_run("FORCE", None, size(10, 1_000_000), MODEL)
    assert small.choice == FAST
    assert small.reason == (
        "fast: cost: 10 change rows ≈ 0.001 % of the base; FAST est. 1.0 s vs COMPLETE est. 3.0 s"
    )
    big = plan_run("FORCE", None, size(400_000, 1_000_000), MODEL)
    assert big.choice == COMPLETE
    assert big.reason == (
        "complete: cost: 400.0 k change rows ≈ 40 % of the base; FAST est. 9.0 s vs COMPLETE est. 3.0 s"
    )
    assert [(c.technique, c.estimated_ms, c.available) for c in big.candidates] == [
        (FAST, 9000.0, True),
        (COMPLETE, 3000.0, True),
    ]


def test_a_bulk_change_is_recomputed_whatever_the_estimates() -> None:
    cheap_fast = CostModel(fast=TechniqueCost(0.0, 0.0), complete=TechniqueCost(1e9, 1.0))
    planned = plan_run("FORCE", None, size(640, 1000), cheap_fast)
    assert planned.choice == COMPLETE
    assert planned.reason == "complete: bulk change: 640 change rows ≈ 64 % of the base"


@pytest.mark.parametrize(
    ("mode", "blocker", "choice", "reason", "fast_note"),
    [
        ("COMPLETE", None, COMPLETE, "complete: refresh mode COMPLETE", "refresh mode COMPLETE"),
        ("FAST", "complete: first build", COMPLETE, "complete: first build", "first build"),
        ("FORCE", "complete: no MV log on t", COMPLETE, "complete: no MV log on t", "no MV log on t"),
        # FAST stays strict: even a bulk change is applied incrementally
        ("FAST", None, FAST, "fast: refresh mode FAST", ""),
    ],
)
def test_the_mode_and_the_preconditions_come_before_the_cost(
    mode: str, blocker: str | None, choice: str, reason: str, fast_note: str
) -> None:
    planned = plan_run(mode, blocker, size(900, 1000), MODEL)
    assert (planned.choice, planned.reason) == (choice, reason)
    fast = planned.candidates[0]
    assert (fast.technique, fast.available, fast.note) == (FAST, not fast_note, fast_note)
    assert (fast.estimated_ms is None) == bool(fast_note)


def test_unknown_sizes_keep_force_on_fast() -> None:
    for unknown in (None, size(None, 1000), size(5, None)):
        planned = plan_run("FORCE", None, unknown, MODEL)
        assert planned.choice == FAST and planned.reason.startswith("fast: cost: ")


def test_the_record_carries_the_candidates_and_sizes() -> None:
    record = plan_run("FORCE", None, ChangeSize(3, 300, TableSize(100, 9000, 2), TableSize(50, 10, 1)), MODEL)
    assert record.record() == {
        "choice": FAST,
        "reason": record.reason,
        "candidates": [
            {"technique": FAST, "estimated_ms": 1000.06, "available": True, "note": None},
            {"technique": COMPLETE, "estimated_ms": 1000.3, "available": True, "note": None},
        ],
        "change_rows": 3,
        "change_bytes": 300,
        "base_rows": 100,
        "base_bytes": 9000,
        "base_files": 2,
        "mv_rows": 50,
    }


@settings(max_examples=60, deadline=None)
@given(
    base=st.integers(1, 10**8),
    changes=st.lists(st.integers(0, 10**8), min_size=2, max_size=6),
    fast=st.tuples(st.floats(0, 1e4), st.floats(0, 1.0)),
    complete=st.tuples(st.floats(0, 1e4), st.floats(0, 1.0)),
)
def test_force_never_picks_the_dearer_and_once_complete_stays_complete_for_bigger_changes(
    base: int, changes: list[int], fast: tuple[float, float], complete: tuple[float, float]
) -> None:
    model = CostModel(fast=TechniqueCost(*fast, runs=1), complete=TechniqueCost(*complete, runs=1))
    choices = []
    for change in sorted(min(c, base * 2) for c in changes):
        planned = plan_run("FORCE", None, size(change, base), model)
        fast_ms, complete_ms = (c.estimated_ms for c in planned.candidates)
        assert fast_ms is not None and complete_ms is not None
        if change / base >= BULK_SHARE:
            assert planned.choice == COMPLETE
        else:
            cheaper = COMPLETE if complete_ms < fast_ms else FAST
            assert planned.choice == cheaper
        choices.append(planned.choice)
    assert choices == sorted(choices, key=lambda c: c == COMPLETE)  # FAST..., then COMPLETE...


def test_the_model_learns_the_part_that_dominated_from_outcomes() -> None:
    """The first outcome of a technique replaces its prior; later ones weigh 1/2, 1/3, then 0.3."""
    model = CostModel(fast=TechniqueCost(1000.0, 0.01), complete=TechniqueCost(1000.0, 0.001))
    tiny = size(10, 1000)
    slow_start = model.learned(FAST, tiny, took_ms=3000.0)
    assert slow_start.fast == TechniqueCost(3000.0 - 0.1, 0.01, 1, rows=10)
    assert slow_start.complete == replace(model.complete, idle=1)  # a run older than FAST's
    again = slow_start.learned(FAST, tiny, took_ms=1000.0)
    assert again.fast is not None and again.fast.fixed_ms == pytest.approx((2999.9 + 999.9) / 2)
    settled = CostModel(fast=TechniqueCost(1000.0, 0.01, runs=5))
    big = size(1_000_000, 2_000_000)
    slow_rows = settled.learned(FAST, big, took_ms=1000.0 + 0.05 * 1_000_000)
    assert slow_rows.fast == TechniqueCost(1000.0, pytest.approx(0.7 * 0.01 + 0.3 * 0.05), 6, rows=1_000_000)
    whole = ChangeSize(5, None, TableSize(10**7, 1, 1), TableSize(10**6, 1, 1))
    recompute = model.learned(COMPLETE, whole, 5000.0)
    assert recompute.complete == TechniqueCost(1000.0, pytest.approx(4000 / 11_000_000), 1, rows=11_000_000)
    assert model.learned(FAST, None, 99.0) == model  # rows unknown: nothing learnt
    nothing_changed = CostModel(fast=TechniqueCost(0.0, 1.0)).learned(FAST, size(0, 10), 50.0)
    assert nothing_changed.fast == TechniqueCost(50.0, 1.0, 1, rows=0)  # no row: the fixed part, no 0/0


def test_an_outcome_an_order_of_magnitude_away_replaces_the_estimate_at_its_size() -> None:
    """``bench.fast_vs_complete`` at 1M rows (session 35): FAST appended 1 row in 0.1 s, then merged
    1,100 in 0.9 s; weighed at 0.3, FORCE estimated 0.5 s at 1,100 rows after three runs."""
    appends = TechniqueCost(100.0, 0.02, 5, rows=1)
    merged = appends.learned(1_100, 900.0)
    assert merged.estimate_ms(1_100) == pytest.approx(900.0) and merged.rows == 1_100
    # Within the span, the usual weight: a run of 5,000 rows moves it by 0.3.
    nearer = merged.learned(5_000, 1_500.0)
    assert nearer.fixed_ms == pytest.approx(0.7 * merged.fixed_ms + 0.3 * (1_500.0 - 0.02 * 5_000))
    # Back down by more than the span: replaced again. Kept in MV commits with the rows.
    assert nearer.learned(1, 100.0).estimate_ms(1) == pytest.approx(100.0)
    kept = CostModel(fast=nearer)
    assert CostModel().restored(kept.record()) == kept
    assert CostModel().restored({"FAST": (100.0, 0.02, 5, 0)}).fast == TechniqueCost(
        100.0, 0.02, 5, rows=None
    )


def test_learning_flips_force_after_fast_turned_out_slow() -> None:
    model, change = MODEL, size(50_000, 1_000_000)
    assert plan_run("FORCE", None, change, model).choice == FAST
    model = model.learned(FAST, change, took_ms=20_000.0)  # one outcome is enough
    assert plan_run("FORCE", None, change, model).choice == COMPLETE


# -- the priors and the state rebuild ----------------------------------------------------------------
def _bases(**tables: tuple[int, int]) -> ChangeSize:
    """A run over ``tables`` (name=(rows, change rows)), the MV empty."""
    bases = tuple(BaseChange(name, rows, changed) for name, (rows, changed) in tables.items())
    change = sum(b.change_rows or 0 for b in bases)
    return ChangeSize(
        change, None, TableSize(sum(b.rows or 0 for b in bases), 1, 1), TableSize(0, 1, 1), bases
    )


def test_fasts_prior_grows_with_the_plan_and_the_bases_its_change_meets() -> None:
    machine = CostModel(complete=TechniqueCost(500.0, 0.001, runs=1))  # learnt from the first build
    one = PlanShape("aggregate", ("sales",))
    assert machine.estimate_ms(FAST, size(100, 10**6), one) == pytest.approx(FAST_FIXED_MS + 100 * 0.02)
    # A join whose change is on the big side only reads the small side; when both change, both.
    join = PlanShape("join_aggregate", ("lineitem", "part"))
    only_big = _bases(lineitem=(6_000_000, 100), part=(200_000, 0))
    assert joined_rows(join.scans, only_big) == 200_000
    assert joined_rows(join.scans, _bases(lineitem=(6_000_000, 100), part=(200_000, 5))) == 6_200_000
    assert joined_rows(("lineitem", "lineitem"), _bases(lineitem=(6_000_000, 100))) == 6_000_000  # self-join
    assert joined_rows(join.scans, size(100, 10)) == 0  # per-base sizes unknown: nothing assumed
    joined = machine.estimate_ms(FAST, only_big, join)
    read = 0.001 * 200_000  # a complete read of the small side, at the learnt pace
    assert joined == pytest.approx(
        FAST_FIXED_MS + FAST_MS_PER_SCAN + FAST_JOIN_READ_SHARE * read + 100 * 0.02
    )
    tree = machine.estimate_ms(FAST, only_big, PlanShape("tree", join.scans, top_n=True))
    share = FAST_TREE_READ_SHARE - FAST_JOIN_READ_SHARE  # a tree reads more of the joined bases
    assert tree == pytest.approx(joined + FAST_TREE_MS + FAST_TOP_N_MS + share * read)
    # Once FAST is measured, the MV's own figure, not the plan's prior.
    measured = replace(machine, fast=TechniqueCost(300.0, 0.0, 1))
    assert measured.estimate_ms(FAST, only_big, join) == 300.0


def test_an_unmeasured_technique_is_priced_at_the_pace_the_measured_one_shows() -> None:
    """Under load every run takes several times its prior: the technique not measured yet is priced
    at the pace of the one measured (bounded), not at the quiet machine's prior."""
    one_row, shape = size(1, 1_000_000, 1), PlanShape("aggregate", ("sales",))  # COMPLETE prior 1.0 s
    # bench.fast_vs_complete, 1-row aggregate: FAST measured at 3 s (its prior 0.8 s); COMPLETE
    # unmeasured (the build, dearer than the prior, taught nothing) then took 11.5 s.
    fast_measured = CostModel().learned(FAST, one_row, 3000.0, shape)
    assert fast_measured.fast is not None and fast_measured.complete is None
    assert fast_measured.pace(shape, one_row) == pytest.approx(3000.0 / (FAST_FIXED_MS + 0.02))
    assert fast_measured.estimate_ms(COMPLETE, one_row, shape) == pytest.approx(1000.0 * 3000 / 800.02)
    # Not a switch by cost (3.75 s against 3 s): COMPLETE, never measured, is tried once.
    planned = plan_run("FORCE", None, one_row, fast_measured, shape)
    assert planned.probe and planned.reason.startswith("complete: probe: never measured by a recompute")
    assert fast_measured.pace() == 1.0  # the sizes unknown: no pace
    # Bounded: never faster than the priors, at most 10x slower.
    light = CostModel(fast=TechniqueCost(100.0, 0.0, 1))
    assert light.pace(shape, one_row) == 1.0
    assert CostModel(fast=TechniqueCost(100_000.0, 0.0, 1)).pace(shape, one_row) == 10.0
    # Not the other way: COMPLETE measured at 5x its prior (a join's rows, not only the machine)
    # leaves FAST's prior as it is, so FAST is still probed and measured; both measured: no pace.
    slow = CostModel(complete=TechniqueCost(0.0, 0.005, 1))
    assert slow.pace(shape, one_row) == 1.0
    assert slow.estimate_ms(FAST, one_row, shape) == pytest.approx(FAST_FIXED_MS + 0.02)
    assert replace(slow, fast=TechniqueCost(3000.0, 0.0, 1)).pace(shape, one_row) == 1.0


def test_a_fast_run_after_a_complete_one_counts_its_state_rebuild() -> None:
    """The rebuild is in FAST's estimate of the run and, spread over REBUILD_PAYBACK_RUNS runs, in
    the choice: FAST's steady runs pay it back."""
    model = CostModel(
        fast=TechniqueCost(1000.0, 0.0, 2),
        complete=TechniqueCost(0.0, 0.001, 1),
        rebuild=TechniqueCost(0.0, 0.002, 1),
    )
    change = size(10, 3_000_000)  # COMPLETE est. 3.0 s, a rebuild 6.0 s
    steady = plan_run("FORCE", None, change, model)
    assert (steady.choice, steady.candidates[0].estimated_ms) == (FAST, 1000.0)
    after = plan_run("FORCE", None, change, model, after_complete=True)
    assert after.choice == FAST and after.candidates[0].estimated_ms == 7000.0  # 1 + 6/3 < 3
    assert after.reason.endswith(
        "FAST est. 7.0 s (6.0 s of it a state rebuild, over 3 runs) vs COMPLETE est. 3.0 s"
    )
    dear = replace(model, rebuild=TechniqueCost(0.0, 0.01, 1))  # 1 + 30/3 > 3
    assert plan_run("FORCE", None, change, dear, after_complete=True).choice == COMPLETE


def test_a_rebuild_run_teaches_the_rebuild_not_the_steady_cost() -> None:
    """The run times its own rebuild (``Rebuilt``): the steady cost learns the rest of the run."""
    change = size(10, 1_000_000)
    known = CostModel(fast=TechniqueCost(500.0, 0.0, 3), complete=TechniqueCost(0.0, 0.001, 1))
    taught = known.learned(FAST, change, 2500.0, after_complete=True, rebuilt=Rebuilt(2000.0))
    assert taught.fast == TechniqueCost(pytest.approx(500.0), 0.0, 4, rows=10)
    assert taught.rebuild == TechniqueCost(0.0, pytest.approx(2000.0 / 1_000_000), 1, rows=1_000_000)
    # A first run after the build that rebuilt nothing: the MV keeps no state, whatever it took.
    fresh, shape = CostModel(complete=TechniqueCost(0.0, 0.001, 1)), PlanShape("aggregate", ("t",))
    steady_prior = FAST_FIXED_MS + 10 * 0.02
    stateless = fresh.learned(FAST, change, 3 * steady_prior, shape, after_complete=True)
    # (FAST's first figure, which counts as a prior: ``runs`` 0)
    assert stateless.fast == TechniqueCost(pytest.approx(3 * steady_prior - 0.2), 0.02, 0, rows=10)
    assert stateless.estimate_ms(REBUILD, change) == 0.0
    # A rebuild that replaced the change (a top-N's rows table): REBUILD learns it, the steady cost
    # stays the prior.
    stateful = fresh.learned(FAST, change, 5000.0, shape, after_complete=True, rebuilt=Rebuilt(4500.0, True))
    assert stateful.fast is None and stateful.rebuild == TechniqueCost(
        0.0, pytest.approx(4500.0 / 1_000_000), 1, rows=1_000_000
    )
    # Then FAST has run for this MV: no probe; its steady prior against COMPLETE decides.
    after = plan_run("FORCE", None, size(10, 1_000_000), stateful, shape)
    assert after.choice == FAST and after.reason.startswith("fast: cost:")


def test_a_model_kept_in_an_mv_commit_is_restored_whole() -> None:
    taught = CostModel(
        fast=TechniqueCost(800.0, 0.5, 2),
        complete=TechniqueCost(300.0, 0.01, 1),
        rebuild=TechniqueCost(0.0, 0.3, 1),
    )
    assert CostModel().restored(taught.record()) == taught
    assert CostModel().restored({}) == CostModel()  # an older commit keeps none: the priors
    assert CostModel().record() == {}  # nothing learnt: nothing kept
    # A commit of before session 23: pairs, counted as one outcome; the old priors as none.
    old = {FAST: (800.0, 0.5), COMPLETE: (1000.0, 0.002)}
    assert CostModel().restored(old) == CostModel(fast=TechniqueCost(800.0, 0.5, 1))


def test_costs_ride_in_the_commit_metadata_and_a_damaged_value_is_ignored() -> None:
    """A commit's costs decode as written; a foreign or damaged ``costs`` value never costs the
    watermark beside it (costs only inform the choice)."""
    taught = CostModel(fast=TechniqueCost(800.0, 0.5, 3), complete=TechniqueCost(300.0, 0.01, 1, rows=1_100))
    text = encode_user_metadata("mv:a", 3, "run-1", {"sales": 7}, costs=taught.record())
    decoded = decode_user_metadata(text, delta_version=4)
    assert decoded is not None and decoded.costs == taught.record()
    assert CostModel().restored(decoded.costs) == taught  # the rows of the last outcome too
    assert decode_user_metadata(encode_user_metadata("mv:a", 3, "run-1", {"sales": 7})).costs == {}  # type: ignore[union-attr]
    made = decode_user_metadata(encode_user_metadata("mv:a", 3, "r", {"sales": 7}, technique=COMPLETE))
    assert made is not None and made.technique == COMPLETE  # the next owner knows a FAST run rebuilds
    assert decoded.technique is None  # older commits say nothing of it
    older = decode_user_metadata(encode_user_metadata("mv:a", 3, "r", {"sales": 7}, costs={FAST: (8.0, 0.5)}))
    assert older is not None and older.costs == {FAST: (8.0, 0.5)}  # a pair still reads
    body = json.loads(text)
    for damaged in (
        {"FAST": [1.0]},
        {"FAST": [-1, 2]},
        {"FAST": ["x", 1]},
        [1, 2],
        {"FAST": [True, 1]},
    ):
        body["mvs"]["costs"] = damaged
        body["mvs"]["technique"] = damaged if isinstance(damaged, list) else "SOMETIMES"
        found = decode_user_metadata(json.dumps(body))
        assert found is not None and found.watermark == {"sales": 7} and found.costs == {}
        assert found.technique is None


def test_the_plan_shape_is_read_from_the_coordinators_analysis() -> None:
    def shape(query: str) -> PlanShape:
        fast = analyze_query(query).plan.fast_refresh
        assert fast is not None, query
        return plan_shape(fast)

    assert shape("SELECT id, amount FROM sales WHERE amount > 9") == PlanShape("projection", ("sales",))
    top = shape(
        "SELECT s.customer, sum(s.amount) AS total, count(*) AS n FROM sales s JOIN customers c "
        "ON s.customer = c.id GROUP BY s.customer ORDER BY total DESC LIMIT 5"
    )
    assert (top.scans, top.top_n) == (("sales", "customers"), True)
