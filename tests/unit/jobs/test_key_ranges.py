"""The ranges a change's keys narrow a read to (``key_filter.value_spans``): every key inside one,
at most the number asked for, split at the widest gaps."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from workers.jobs.delta.key_filter import value_spans


def test_inserted_and_deleted_keys_at_both_ends_of_the_key_range_are_two_ranges() -> None:
    # RF1's new orders above the loaded keys, RF2's deletes at the bottom: one span would be all.
    assert value_spans([5_000_001, 5_000_003, 1, 2, 4, 5_000_002], 2) == [(1, 4), (5_000_001, 5_000_003)]


def test_the_widest_gaps_are_cut_first() -> None:
    assert value_spans([1, 2, 3, 100, 101, 1000], 3) == [(1, 3), (100, 101), (1000, 1000)]
    assert value_spans([1, 2, 3, 100, 101, 1000], 2) == [(1, 101), (1000, 1000)]
    assert value_spans([], 4) == []


@settings(max_examples=50, deadline=None)
@given(st.lists(st.integers(-(2**40), 2**40), max_size=40), st.integers(1, 8))
def test_spans_hold_every_key_in_at_most_most_disjoint_ranges(points: list[int], most: int) -> None:
    spans = value_spans(points, most)
    assert len(spans) == min(most, len(set(points)))
    assert all(any(lo <= p <= hi for lo, hi in spans) for p in points)
    assert all(lo <= hi for lo, hi in spans)
    assert all(a[1] < b[0] for a, b in zip(spans, spans[1:], strict=False))
    assert all(lo in points and hi in points for lo, hi in spans)
