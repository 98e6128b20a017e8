"""Semi and anti joins whose input is counted by key (``workers.ddl.tree.counted``): which subqueries
qualify, and the block's SQL over the key sets that stand for them (pure: sqlglot only)."""

from __future__ import annotations

import pytest

from bench.tpch.queries import load_queries
from tests.support.trees import nested_of, tpch_columns, tree_of
from workers.ddl import analyze_query
from workers.ddl.tree.values import Aggregate, tree_from_json, tree_json


def test_a_semi_or_anti_join_on_one_key_and_its_own_conditions_is_counted_by_key() -> None:
    sql = (
        "SELECT t.g, COUNT(*) AS n FROM t WHERE t.v > 1 AND EXISTS (SELECT * FROM u WHERE u.k = t.k "
        "AND u.w > 2 AND u.w < 9) AND t.g IN (SELECT u2.w FROM u u2 WHERE u2.k IS NOT NULL) "
        "AND NOT EXISTS (SELECT 1 FROM u u3 WHERE u3.k = t.g AND u3.w = t.v) GROUP BY t.g"
    )
    root = nested_of(sql)
    views = {s.alias: s.view for s in tree_of(sql).scans}
    matches = {k.view: k.matches for k in root.keyed}
    assert matches == {
        views["u"]: f"SELECT `u`.`k` FROM {views['u']} AS `u` WHERE `u`.`w` > 2 AND `u`.`w` < 9",
        views["u2"]: f"SELECT `u2`.`w` FROM {views['u2']} AS `u2` WHERE NOT `u2`.`k` IS NULL",
        views["u3"]: None,  # a second correlation: its rows matter by more than their key
    }
    # Over key sets: the counted subqueries lose their own conditions, the others keep theirs.
    assert root.over_key_sets is not None
    assert f"EXISTS(SELECT 1 FROM {views['u']} AS `u` WHERE `u`.`k` = `t`.`k`)" in root.over_key_sets
    assert f"IN (SELECT `u2`.`w` AS `w` FROM {views['u2']} AS `u2`)" in root.over_key_sets
    assert "`u3`.`w` = `t`.`v`" in root.over_key_sets and "`u`.`w` > 2" in root.sql
    back = tree_from_json(tree_json(tree_of(sql)))
    assert back.root == root
    assert any("matching rows counted per k" in line for line in tree_of(sql).describe())
    # EXISTS over what its rows select: a generator makes none from some rows (not a match).
    sql = (
        "SELECT t.g FROM t WHERE NOT EXISTS (SELECT explode(array(u.w)) FROM u WHERE u.k = t.v) "
        "AND EXISTS (SELECT u2.w AS x, 1 FROM u u2 WHERE u2.k = t.k)"
    )
    aliases = {s.view: s.alias for s in tree_of(sql).scans}
    counted = {aliases[k.view]: k.matches is not None for k in nested_of(sql).keyed}
    assert counted == {"u": False, "u2": True}


@pytest.mark.parametrize(
    ("name", "counted"), [("q04", ["lineitem"]), ("q22", ["orders"]), ("q16", []), ("q20", [])]
)
def test_tpch_semi_and_anti_joins_counted_by_key(name: str, counted: list[str]) -> None:
    info = analyze_query(load_queries()[name], columns_of=tpch_columns)
    assert info.fast_refresh is not None and info.fast_refresh.tree is not None, info.fast_reason
    tree = tree_from_json(info.fast_refresh.tree)
    tables = {s.view: s.table for s in tree.scans}
    found: list[str] = []

    def walk(node: object) -> None:
        for child in getattr(node, "inputs", ()):
            walk(child)
        if isinstance(node, Aggregate):
            walk(node.input)
        found.extend(tables[k.view] for k in getattr(node, "keyed", ()) if k.matches is not None)

    walk(tree.root)
    assert found == counted
