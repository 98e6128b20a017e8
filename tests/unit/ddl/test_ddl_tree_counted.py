"""Semi and anti joins whose input is counted by key (``workers.ddl.tree.counted``): which subqueries
qualify, and the block's SQL over the key sets that stand for them (pure: sqlglot only)."""

from __future__ import annotations

import pytest

from bench.tpch.queries import load_queries
from tests.support.trees import nested_of, tpch_columns, tree_of
from workers.ddl import analyze_query
from workers.ddl.tree.values import Aggregate, Keyed, tree_from_json, tree_json


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


def _left_join_input(sql: str) -> Keyed:
    """The keyed input of the block under the derived aggregate of ``sql`` (``FROM (…) x``)."""
    (derived,) = nested_of(sql).inputs
    assert isinstance(derived, Aggregate)
    (keyed,) = derived.input.keyed
    return keyed


def test_a_left_join_read_only_by_count_of_one_column_is_counted_by_key() -> None:
    """TPC-H Q13's form: the right side's rows per key with the counted column not NULL are all the
    aggregate needs; the block then reads one row per key with its count (its own conditions gone
    from the ON), which the aggregate sums."""
    sql = (
        "SELECT x.n, COUNT(*) AS c FROM (SELECT t.k, COUNT(u.w) AS n FROM t LEFT JOIN u ON u.k = t.k "
        "AND u.w > 2 GROUP BY t.k) x GROUP BY x.n"
    )
    views = {s.alias: s.view for s in tree_of(sql).scans}
    keyed = _left_join_input(sql)
    assert (keyed.operator, keyed.column, keyed.outer_column, keyed.count_column) == (
        "left outer join",
        "k",
        "k",
        "w",
    )
    assert keyed.matches == (
        f"SELECT `u`.`k` FROM {views['u']} AS `u` WHERE `u`.`w` > 2 AND NOT `u`.`w` IS NULL"
    )
    (derived,) = nested_of(sql).inputs
    assert isinstance(derived, Aggregate)
    over = derived.input.over_key_sets
    assert over is not None and over.endswith(f"LEFT JOIN {views['u']} AS `u` ON `u`.`k` = `t`.`k`")
    assert "`u`.`w` > 2" in derived.input.sql  # Spark's recompute reads the input as written
    assert derived.sql.endswith("COUNT(`__mvs_a0`) AS `n` FROM __mvs_node1 GROUP BY `k`")
    assert derived.over_key_sets == (
        "SELECT `k`, COALESCE(SUM(`__mvs_a0`), 0) AS `n` FROM __mvs_node1 GROUP BY `k`"
    )
    tree = tree_of(sql)
    assert tree_from_json(tree_json(tree)) == tree
    assert [k for k, _ in tree.counted_inputs()] == [keyed]
    assert any("read as one row per key with its count" in line for line in tree.describe())
    q13 = analyze_query(load_queries()["q13"], columns_of=tpch_columns)
    assert q13.fast_refresh is not None and q13.fast_refresh.tree is not None
    ((counted, _),) = tree_from_json(q13.fast_refresh.tree).counted_inputs()
    assert (counted.column, counted.count_column) == ("o_custkey", "o_orderkey")


@pytest.mark.parametrize(
    "derived",
    [
        # Another aggregate: a match with a NULL u.w still makes a row (COUNT(*), SUM of t's columns).
        "SELECT t.k, COUNT(u.w) AS n, COUNT(*) AS r FROM t LEFT JOIN u ON u.k = t.k GROUP BY t.k",
        "SELECT t.k, COUNT(u.w) AS n, SUM(t.v) AS s FROM t LEFT JOIN u ON u.k = t.k GROUP BY t.k",
        "SELECT t.k, COUNT(DISTINCT u.w) AS n FROM t LEFT JOIN u ON u.k = t.k GROUP BY t.k",
        "SELECT t.k, SUM(u.w) AS n FROM t LEFT JOIN u ON u.k = t.k GROUP BY t.k",
        "SELECT t.k, COUNT(u.w + 1) AS n FROM t LEFT JOIN u ON u.k = t.k GROUP BY t.k",
        # Two columns of u counted (their NULLs differ), u read outside the aggregate, u grouped by.
        "SELECT t.k, COUNT(u.w) AS n, COUNT(u.k) AS m FROM t LEFT JOIN u ON u.k = t.k GROUP BY t.k",
        "SELECT t.k, COUNT(u.w) AS n FROM t LEFT JOIN u ON u.k = t.k WHERE u.w IS NULL GROUP BY t.k",
        "SELECT t.k, u.w, COUNT(u.w) AS n FROM t LEFT JOIN u ON u.k = t.k GROUP BY t.k, u.w",
        # The join key counted: its counts would share the key's column (its rows are counted alike,
        # but the block would read two columns of one name).
        "SELECT t.k, COUNT(u.k) AS n FROM t LEFT JOIN u ON u.k = t.k GROUP BY t.k",
        "SELECT t.k, COUNT(u.K) AS n FROM t LEFT JOIN u ON u.k = t.k GROUP BY t.k",
        # A second ON condition tied to t, an inner join: not a count of u's rows per key.
        "SELECT t.k, COUNT(u.w) AS n FROM t LEFT JOIN u ON u.k = t.k AND u.w = t.v GROUP BY t.k",
        "SELECT t.k, COUNT(u.w) AS n FROM t JOIN u ON u.k = t.k GROUP BY t.k",
    ],
)
def test_a_left_join_read_otherwise_is_recomputed_by_key(derived: str) -> None:
    sql = f"SELECT x.k, x.n FROM ({derived}) x"
    (node,) = nested_of(sql).inputs
    assert isinstance(node, Aggregate)
    assert node.input.over_key_sets is None
    assert all(k.matches is None and k.count_column is None for k in node.input.keyed)


def test_a_left_join_under_the_top_aggregate_is_recomputed_by_key() -> None:
    """The top aggregate merges its input's signed rows (a count per row), which the counts per key
    are not: only a derived table's GROUP BY sums them."""
    root = nested_of("SELECT t.k, COUNT(u.w) AS n FROM t LEFT JOIN u ON u.k = t.k GROUP BY t.k")
    assert root.over_key_sets is None and all(k.count_column is None for k in root.keyed)
