"""Clock, DueQueue, validate_next_due and Wakeup (pure logic, no sleeping)."""

from __future__ import annotations

import math
import threading

import pytest

from workers.sched.clock import Clock, ManualClock, SystemClock
from workers.sched.due import DueQueue, Wakeup, validate_next_due


def test_manual_clock_advances_both_readings() -> None:
    clock = ManualClock(start=1000.0, wall_start_ms=1_700_000_000_000)
    assert isinstance(clock, Clock)
    assert clock.advance(2.5) == 1002.5
    assert clock.monotonic() == 1002.5
    assert clock.wall_ms() == 1_700_000_002_500
    for _ in range(10):
        clock.advance(0.0001)  # sub-millisecond steps add up instead of being lost
    assert clock.wall_ms() == 1_700_000_002_501
    with pytest.raises(ValueError):
        clock.advance(-1)


def test_system_clock_is_a_clock() -> None:
    clock = SystemClock()
    assert isinstance(clock, Clock)
    assert clock.wall_ms() > 1_600_000_000_000
    assert clock.monotonic() <= clock.monotonic()


def test_pop_due_returns_due_keys_earliest_first() -> None:
    q: DueQueue[str] = DueQueue()
    q.schedule("c", 30.0)
    q.schedule("a", 10.0)
    q.schedule("b", 20.0)
    q.schedule("late", 100.0)
    assert len(q) == 4 and "a" in q and "zzz" not in q
    assert q.next_due() == 10.0
    assert q.pop_due(now=5.0) == []
    assert q.pop_due(now=30.0) == ["a", "b", "c"]
    assert q.next_due() == 100.0
    assert len(q) == 1 and "a" not in q


def test_ties_keep_insertion_order() -> None:
    q: DueQueue[str] = DueQueue()
    for key in "xyzw":
        q.schedule(key, 7.0)
    assert q.pop_due(now=7.0) == ["x", "y", "z", "w"]


def test_reschedule_moves_a_key() -> None:
    q: DueQueue[str] = DueQueue()
    q.schedule("a", 10.0)
    q.schedule("b", 20.0)
    q.schedule("a", 30.0)  # later
    assert len(q) == 2
    assert q.due_at("a") == 30.0
    assert q.next_due() == 20.0
    assert q.pop_due(now=25.0) == ["b"]
    q.schedule("a", 1.0)  # earlier again
    assert q.next_due() == 1.0
    assert q.pop_due(now=100.0) == ["a"]
    assert q.next_due() is None


def test_remove_and_missing_keys() -> None:
    q: DueQueue[str] = DueQueue()
    q.schedule("a", 1.0)
    q.schedule("b", 2.0)
    q.remove("a")
    q.remove("never-there")
    assert q.due_at("a") is None
    assert q.next_due() == 2.0
    assert q.pop_due(now=10.0) == ["b"]
    assert len(q) == 0


def test_pop_due_limit() -> None:
    q: DueQueue[int] = DueQueue()
    for i in range(10):
        q.schedule(i, float(i))
    assert q.pop_due(now=100.0, limit=3) == [0, 1, 2]
    assert q.pop_due(now=100.0, limit=0) == []
    assert q.pop_due(now=5.0) == [3, 4, 5]
    assert q.keys() == [6, 7, 8, 9]


def test_many_reschedules_stay_correct_after_compaction() -> None:
    q: DueQueue[int] = DueQueue()
    for round_ in range(50):
        for key in range(20):
            q.schedule(key, float(1000 - key + round_))
    assert len(q) == 20
    assert len(q._heap) < 200  # stale entries were compacted away
    assert q.pop_due(now=math.inf) == list(range(19, -1, -1))


def test_nan_due_is_refused() -> None:
    q: DueQueue[str] = DueQueue()
    with pytest.raises(ValueError):
        q.schedule("a", math.nan)


@pytest.mark.parametrize(
    ("proposed", "reason"),
    [
        (None, "missing"),
        (0.0, "zero"),
        (math.nan, "nan"),
        (50.0, "past"),
        (100.0, "past"),
        (100.5, "too_soon"),
    ],
)
def test_validate_next_due_never_allows_a_tight_loop(proposed: float | None, reason: str) -> None:
    assert validate_next_due(proposed, now=100.0) == (101.0, reason)


def test_validate_next_due_pulls_in_absurd_times() -> None:
    year = 366 * 86400.0
    assert validate_next_due(100.0 + 10 * year, now=100.0) == (100.0 + year, "too_far")
    assert validate_next_due(math.inf, now=100.0) == (100.0 + year, "too_far")
    assert validate_next_due(500.0, now=100.0, max_delay=60.0) == (160.0, "too_far")


def test_validate_next_due_keeps_sane_times() -> None:
    assert validate_next_due(160.0, now=100.0) == (160.0, None)
    assert validate_next_due(101.0, now=100.0) == (101.0, None)
    assert validate_next_due(100.2, now=100.0, min_delay=0.1) == (100.2, None)
    with pytest.raises(ValueError):
        validate_next_due(1.0, now=0.0, min_delay=5.0, max_delay=1.0)


def test_wakeup_coalesces_many_wakes_into_one() -> None:
    w = Wakeup()
    assert w.wait(0) is False
    for _ in range(100):
        w.wake()
    assert w.is_set()
    assert w.wait(0) is True
    assert w.wait(0) is False  # consumed: one wait per burst
    w.wake()
    w.clear()
    assert w.wait(0) is False


def test_wakeup_releases_a_waiting_consumer() -> None:
    w = Wakeup()
    woke = threading.Event()
    results: list[bool] = []

    def consumer() -> None:
        results.append(w.wait(10.0))
        woke.set()

    t = threading.Thread(target=consumer)
    t.start()
    for _ in range(5):
        w.wake()
    assert woke.wait(5.0)
    t.join(5.0)
    assert results == [True]
    assert w.wait(0) is False  # the five wakes were one
