"""The consistent cut of a run over MVs (``workers.worker.cut``): pure, over scripted MV histories."""

from __future__ import annotations

from collections.abc import Callable

from workers.worker.cut import Cut, Reflection, consistent_cut

# MV -> its refresh commits, oldest first: (Delta version, base versions reflected).
History = dict[str, list[tuple[int, dict[str, int]]]]


def _reflected(history: History) -> Callable[[str, int], Reflection | None]:
    def reflected(mv: str, version: int) -> Reflection | None:
        found = [Reflection(v, r) for v, r in history.get(mv, []) if v <= version]
        return found[-1] if found else None

    return reflected


def test_a_chain_reads_its_upstream_at_its_latest_and_reflects_what_it_reflects() -> None:
    history: History = {"a": [(0, {"sales": 3}), (2, {"sales": 5})]}
    cut = consistent_cut({"a": 3}, ["a"], {"a": 0}, _reflected(history))
    assert cut == Cut({"a": 3}, {"sales": 5})


def test_a_fan_in_reads_the_newer_upstream_where_it_met_the_older_one() -> None:
    # a and b over sales, c over both (and sales itself): b is ahead; it reflected sales@5 at v1.
    history: History = {
        "a": [(0, {"sales": 5})],
        "b": [(0, {"sales": 3}), (1, {"sales": 5}), (4, {"sales": 6})],
    }
    cut = consistent_cut({"a": 2, "b": 5, "sales": 6}, ["a", "b"], {}, _reflected(history))
    assert cut == Cut({"a": 2, "b": 3, "sales": 5}, {"sales": 5})


def test_a_fan_in_waits_when_an_upstream_refreshed_past_the_cut_in_one_step() -> None:
    history: History = {"a": [(0, {"sales": 4})], "b": [(0, {"sales": 3}), (1, {"sales": 6})]}
    why = consistent_cut({"a": 0, "b": 1}, ["a", "b"], {}, _reflected(history))
    assert why == "waiting for a consistent cut at sales@v4 (a reflects sales@v4; b reflects sales@v6)"


def test_no_cut_behind_what_the_mv_reflects_and_an_unbuilt_upstream_is_waited_for() -> None:
    history: History = {"a": [(0, {"sales": 4})], "b": [(0, {"sales": 4}), (3, {"sales": 6})]}
    why = consistent_cut({"a": 0, "b": 3}, ["a", "b"], {"b": 3}, _reflected(history))
    assert isinstance(why, str) and why.startswith("waiting for a consistent cut at sales@v4 not behind")
    assert consistent_cut({"a": 0}, ["a"], {}, _reflected({})) == "waiting for a's first refresh"
