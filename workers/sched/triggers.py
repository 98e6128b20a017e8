"""When an MV's next refresh is due, per trigger kind (``Trigger.kind`` of the MvSpec record).

All times are seconds on the scheduling clock (``Clock.monotonic``); callers convert
``interval_ms`` to seconds. The result may lie in the past ("due now"); pass it through
``validate_next_due`` only when it came from somewhere untrusted, not for ON_DEMAND's None.
"""

from __future__ import annotations

import math

from workers.catalog.specs import EVERY, ON_CHANGE, ON_DEMAND, TARGET_LAG

TRIGGER_KINDS = frozenset({EVERY, ON_CHANGE, ON_DEMAND, TARGET_LAG})

# ON_CHANGE: the maintainer compares base-table Delta versions (a cheap metadata read) this often.
ON_CHANGE_POLL_S = 1.0
# TARGET_LAG without a measured run duration: reserve this share of the target for the run itself.
TARGET_LAG_MARGIN_FRACTION = 0.2
# Never start a task again sooner than this after its last start (seed 000 risk 2: no tight loops).
MIN_RUN_SPACING_S = 1.0


def next_refresh_due(
    kind: str,
    interval_s: float | None,
    *,
    now: float,
    last_started: float | None,
    last_success_data_time: float | None,
    expected_duration_s: float | None = None,
) -> float | None:
    """The time the next refresh should start, or None when only an explicit request runs it.

    - ``EVERY``: ``last_started + interval`` (``now`` if it never ran). Measured from the last
      *start*, so a long run does not drift the schedule; an overrun makes it due at once.
    - ``ON_CHANGE``: ``now + ON_CHANGE_POLL_S``: the maintainer then checks base versions and
      refreshes only if they moved (otherwise records a skip).
    - ``ON_DEMAND``: None.
    - ``TARGET_LAG`` (``interval_s`` is the target lag): scheduled by data age, not the clock.
      With ``D = last_success_data_time`` (the time the MV content reflects) a run started at
      ``s`` that takes ``d`` finishes with age ``s + d - D`` just before it lands; keeping that
      ``<= target`` gives ``s <= D + target - d``, so::

          due = D + target - margin,  margin = clamp(expected_duration_s, 0, target)
                                     (default TARGET_LAG_MARGIN_FRACTION * target)

      never earlier than ``last_started + MIN_RUN_SPACING_S``; ``now`` if it never succeeded.
      Failures do not move ``D``, so their pacing must come from the retry policy.
    """
    if kind == ON_DEMAND:
        return None
    if kind == ON_CHANGE:
        return now + ON_CHANGE_POLL_S
    if kind not in TRIGGER_KINDS:
        raise ValueError(f"unknown trigger kind {kind!r}")
    interval = _positive_interval(kind, interval_s)
    if kind == EVERY:
        return now if last_started is None else last_started + interval
    # TARGET_LAG
    if last_success_data_time is None:
        return now
    if expected_duration_s is None or math.isnan(expected_duration_s):
        margin = TARGET_LAG_MARGIN_FRACTION * interval
    else:
        margin = min(max(expected_duration_s, 0.0), interval)
    due = last_success_data_time + interval - margin
    if last_started is not None:
        due = max(due, last_started + MIN_RUN_SPACING_S)
    return due


def data_lag_s(now: float, last_success_data_time: float | None) -> float | None:
    """Age of the MV's data (the ``lag seconds`` gauge); None before the first success."""
    if last_success_data_time is None:
        return None
    return max(0.0, now - last_success_data_time)


def _positive_interval(kind: str, interval_s: float | None) -> float:
    if interval_s is None or math.isnan(interval_s) or interval_s <= 0 or math.isinf(interval_s):
        raise ValueError(f"{kind} needs a positive finite interval, got {interval_s!r}")
    return float(interval_s)
