"""Trigger formulas: when the next refresh of an MV is due."""

from __future__ import annotations

import math

import pytest

from workers.sched.triggers import (
    MIN_RUN_SPACING_S,
    ON_CHANGE_POLL_S,
    TARGET_LAG_MARGIN_FRACTION,
    data_lag_s,
    next_refresh_due,
)


def due(
    kind: str,
    interval: float | None,
    now: float,
    started: float | None,
    data: float | None,
    expected: float | None = None,
) -> float | None:
    return next_refresh_due(
        kind,
        interval,
        now=now,
        last_started=started,
        last_success_data_time=data,
        expected_duration_s=expected,
    )


def test_every_counts_from_the_last_start() -> None:
    assert due("EVERY", 60.0, 500.0, None, None) == 500.0
    assert due("EVERY", 60.0, 500.0, 450.0, None) == 510.0
    # an overrun run: due at once (in the past), the caller runs it now
    assert due("EVERY", 60.0, 500.0, 300.0, 1.0) == 360.0


def test_on_change_polls_and_on_demand_never_schedules() -> None:
    assert due("ON_CHANGE", None, 10.0, 5.0, 5.0) == 10.0 + ON_CHANGE_POLL_S
    assert due("ON_DEMAND", None, 10.0, None, None) is None


def test_target_lag_schedules_by_data_age() -> None:
    # target 100 s, data from t=1000, a run takes ~15 s: start by 1085 so the age stays <= 100
    assert due("TARGET_LAG", 100.0, 1010.0, 1000.0, 1000.0, expected=15.0) == 1085.0
    # no measured duration: reserve a fraction of the target
    no_history = due("TARGET_LAG", 100.0, 1010.0, 1000.0, 1000.0)
    assert no_history == 1000.0 + 100.0 * (1 - TARGET_LAG_MARGIN_FRACTION)
    # a run longer than the target: margin clamped to the target, i.e. start right away
    assert due("TARGET_LAG", 100.0, 1010.0, 990.0, 1000.0, expected=500.0) == 1000.0


def test_target_lag_never_succeeded_is_due_now_and_respects_spacing() -> None:
    assert due("TARGET_LAG", 60.0, 7.0, None, None) == 7.0
    # failures keep the data old: not sooner than MIN_RUN_SPACING_S after the last start
    assert due("TARGET_LAG", 60.0, 500.0, 499.5, 10.0) == 499.5 + MIN_RUN_SPACING_S


@pytest.mark.parametrize("interval", [None, 0.0, -5.0, math.nan, math.inf])
def test_interval_kinds_need_a_positive_interval(interval: float | None) -> None:
    for kind in ("EVERY", "TARGET_LAG"):
        with pytest.raises(ValueError):
            due(kind, interval, 0.0, None, None)


def test_unknown_kind_is_refused() -> None:
    with pytest.raises(ValueError):
        due("HOURLY", 60.0, 0.0, None, None)


def test_data_lag() -> None:
    assert data_lag_s(100.0, None) is None
    assert data_lag_s(100.0, 40.0) == 60.0
    assert data_lag_s(100.0, 140.0) == 0.0
