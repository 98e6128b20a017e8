"""The union of a block's reached key sets (``keyed_block._union``): an empty set adds nothing, so
the other is taken as it is, with no distinct (a Spark job) over the two (pure: stand-in frames, an
evaluation that fails if asked for a distinct)."""

from __future__ import annotations

from typing import Any, cast

from workers.jobs.fast.operators.keyed import Keys
from workers.jobs.fast.operators.keyed_block import _union


class NoDistinct:
    def distinct_keys(self, rows: Any) -> Keys:
        raise AssertionError("a distinct over the key sets was asked for")


def keys(rows: int) -> Keys:
    return Keys(cast(Any, object()), rows)


def test_an_empty_key_set_is_dropped_and_the_other_taken_as_it_is() -> None:
    gained, lost = keys(3), keys(0)
    assert _union(cast(Any, NoDistinct()), [lost, gained]) is gained
    assert _union(cast(Any, NoDistinct()), [gained, lost]) is gained


def test_only_empty_key_sets_give_an_empty_one() -> None:
    first, second = keys(0), keys(0)
    assert _union(cast(Any, NoDistinct()), [first, second]) is first


def test_one_set_found_twice_is_taken_once() -> None:
    shared = keys(5)
    assert _union(cast(Any, NoDistinct()), [shared, shared]) is shared
