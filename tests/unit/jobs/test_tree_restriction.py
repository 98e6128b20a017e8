"""Which inputs of a block a restriction of one input's column reaches (``Block.reached_by``):
through the inner join's equalities both ways, a LEFT JOIN's ON only from its left side, a subquery's
correlation to the subquery, never across a column the equality does not hold (pure)."""

from __future__ import annotations

from workers.ddl import analyze_query
from workers.ddl.tree.values import Block, tree_from_json

COLUMNS = {"t": ("k", "g", "v"), "u": ("k", "w"), "s": ("k", "w")}


def root_of(sql: str) -> Block:
    info = analyze_query(sql, columns_of=COLUMNS.get)
    assert info.fast_refresh is not None and info.fast_refresh.tree is not None, info.fast_reason
    tree = tree_from_json(info.fast_refresh.tree)
    assert tree.root is not None
    return tree.root


def test_a_restriction_follows_inner_equalities_both_ways_and_a_left_join_left_to_right() -> None:
    root = root_of(
        "SELECT t.k, u.w, s.w AS sw FROM t JOIN u ON u.k = t.k LEFT JOIN s ON s.k = u.k "
        "WHERE EXISTS (SELECT 1 FROM u u2 WHERE u2.w = t.g)"
    )
    assert root.reached_by("__mvs_scan1", "k") == {
        "__mvs_scan1": "k",
        "__mvs_scan0": "k",
        "__mvs_scan2": "k",
    }
    assert root.reached_by("__mvs_scan2", "k") == {"__mvs_scan2": "k"}  # not from the padded side
    assert root.reached_by("__mvs_scan0", "g") == {"__mvs_scan0": "g", "__mvs_scan3": "w"}
    assert root.reached_by("__mvs_scan0", "v") == {"__mvs_scan0": "v"}
