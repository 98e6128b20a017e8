"""The operator tree (FAST plan kind ``tree``, ``workers.ddl.tree``) built from queries the shape
planners refuse, its record form, and its refusals (pure: sqlglot only)."""

from __future__ import annotations

import pytest
import sqlglot

from bench.tpch.queries import load_queries
from tests.support.trees import columns, nested_of, tpch_columns, tree_of
from workers.ddl import analyze_query
from workers.ddl.dialect import DIALECT
from workers.ddl.output_names import spark_name
from workers.ddl.plan import JoinKey, QueryPlan, plan_from_record, plan_record
from workers.ddl.tree.values import (
    INPUT_VIEW,
    Aggregate,
    Block,
    Keyed,
    Union,
    identity,
    tree_from_json,
    tree_json,
)


def test_tpch_q7_is_a_self_join_of_nation_under_an_aggregate_by_year() -> None:
    info = analyze_query(load_queries()["q07"], columns_of=tpch_columns)
    assert info.fast_refresh is not None and info.fast_refresh.kind == "tree", info.fast_reason
    tree = tree_from_json(info.fast_refresh.tree or "")
    assert [(s.table, s.alias) for s in tree.scans] == [
        ("supplier", "supplier"),
        ("lineitem", "lineitem"),
        ("orders", "orders"),
        ("customer", "customer"),
        ("nation", "n1"),
        ("nation", "n2"),
    ]
    assert info.fast_refresh.base_tables == ("supplier", "lineitem", "orders", "customer", "nation")
    assert tree.aggregate is not None and tree.aggregate.base_table == INPUT_VIEW
    assert tree.aggregate.group_by == ("supp_nation", "cust_nation", "l_year")
    assert "EXTRACT(YEAR FROM `lineitem`.`l_shipdate`) AS `l_year`" in tree.block_sql
    assert "__mvs_scan4 AS `n1`" in tree.block_sql and "__mvs_scan5 AS `n2`" in tree.block_sql
    assert "ORDER BY" not in tree.block_sql  # not stored
    keyed = {(k.left_table, k.left_column, k.right_table, k.right_column) for k in tree.keys}
    assert ("__mvs_scan3", "c_nationkey", "__mvs_scan5", "n_nationkey") in keyed
    assert tree.describe() == [
        "scan supplier AS supplier: MV-log change rows",
        "scan lineitem AS lineitem: MV-log change rows",
        "scan orders AS orders: MV-log change rows",
        "scan customer AS customer: MV-log change rows",
        "scan nation AS n1: MV-log change rows",
        "scan nation AS n2: MV-log change rows",
        "inner join of 6 inputs: linear, Σ_i T1'⋈…⋈ΔTi⋈…⋈Tn over the occurrences",
        "filter: linear, applied to the change rows",
        "aggregate (top): merge of the signed input rows (aggregate)",
    ]


@pytest.mark.parametrize("name", ["q07", "q08", "q09"])
def test_the_tpch_queries_the_shape_planners_refuse_get_a_tree(name: str) -> None:
    info = analyze_query(load_queries()[name], columns_of=tpch_columns)
    assert info.fast_refresh is not None and info.fast_refresh.kind == "tree", info.fast_reason


def test_a_cte_read_twice_is_two_scans_of_its_table() -> None:
    tree = tree_of(
        "WITH x AS (SELECT k, v * 2 AS vv FROM t WHERE v > 0) "
        "SELECT a.k, b.vv AS bv FROM x a JOIN x b ON a.k = b.k"
    )
    assert [s.table for s in tree.scans] == ["t", "t"] and tree.top == "projection"
    assert tree.block_sql.count("> 0") == 2  # each copy keeps the CTE's filter
    assert tree.filtered and len(tree.keys) == 1


def test_a_cte_read_twice_is_one_subtree_by_identity_computed_once() -> None:
    info = analyze_query(load_queries()["q15"], columns_of=tpch_columns)
    assert info.fast_refresh is not None and info.fast_refresh.tree is not None, info.fast_reason
    tree = tree_from_json(info.fast_refresh.tree)
    assert tree.root is not None
    supplier, revenue, subquery = tree.root.inputs  # the join's revenue0, the scalar subquery's
    assert isinstance(revenue, Aggregate) and isinstance(subquery, Aggregate)
    assert revenue.view != subquery.view  # each occurrence bound to its own frame by the block
    assert identity(revenue) == identity(subquery) != identity(revenue.input)
    assert identity(revenue) != identity(supplier)
    assert (
        "aggregate by supplier_no: the same subtree as an earlier occurrence, computed once"
        in tree.describe()
    )
    assert tree.describe().count("aggregate by supplier_no: recompute of the groups reached (keyed)") == 1


def test_subtrees_that_differ_have_different_identities() -> None:
    tree = tree_of(
        "SELECT a.g, a.n, b.n AS bn FROM (SELECT g, COUNT(*) AS n FROM t WHERE v > 0 GROUP BY g) a "
        "JOIN (SELECT g, COUNT(*) AS n FROM t WHERE v > 1 GROUP BY g) b ON a.g = b.g"
    )
    assert tree.root is not None
    first, second = tree.root.inputs
    assert identity(first) != identity(second)  # the same shape, another condition
    assert not any("computed once" in line for line in tree.describe())


def test_group_by_expressions_and_aggregate_arguments_become_input_columns() -> None:
    tree = tree_of(
        "SELECT upper(t.g) AS ug, COUNT(*) AS n, SUM(t.v * u.w) AS s, MAX(t.v * u.w) AS hi "
        "FROM (SELECT * FROM t) t JOIN u ON t.k = u.k GROUP BY upper(t.g)"
    )
    assert tree.aggregate is not None and tree.aggregate.group_by == ("ug",)
    assert tree.aggregate_sql == (
        "SELECT `ug`, COUNT(*) AS `n`, SUM(`__mvs_a0`) AS `s`, MAX(`__mvs_a0`) AS `hi` FROM __mvs_input "
        "GROUP BY `ug`"
    )  # one input column for the argument both aggregates read
    assert "UPPER(`t`.`g`) AS `ug`" in tree.block_sql and "AS `__mvs_a0`" in tree.block_sql


def test_having_at_the_top_is_recomputed_by_group() -> None:
    tree = tree_of(
        "SELECT g, SUM(v) AS s FROM (SELECT g, v FROM t WHERE k > 0) d GROUP BY g HAVING COUNT(*) > 1"
    )
    assert tree.aggregate is not None and tree.aggregate.kind == "aggregate_having"
    assert tree.describe()[-1].startswith("aggregate (top): recompute of the groups reached")


def test_select_distinct_is_a_group_by_of_every_output() -> None:
    tree = tree_of("SELECT DISTINCT upper(t.g) AS ug, u.w, upper(t.g) AS ug2 FROM t, u WHERE t.k = u.k")
    assert tree.distinct and tree.aggregate is not None and tree.aggregate.group_by == ("ug", "w")
    assert tree.aggregate_sql == "SELECT `ug`, `w`, `ug` AS `ug2` FROM __mvs_input GROUP BY `ug`, `w`"
    assert tree.describe()[-1].startswith("distinct (top, as GROUP BY of every output): merge")


def test_the_plan_record_carries_the_tree() -> None:
    info = analyze_query("SELECT a.k, b.v FROM t a JOIN t b ON a.k = b.g", columns_of=columns)
    assert info.fast_refresh is not None and info.fast_refresh.kind == "tree"
    back = plan_from_record(plan_record(QueryPlan(info.fast_refresh)))
    assert back.fast_refresh == info.fast_refresh
    assert back.fast_refresh.base_tables == ("t",)  # each base once, however many scans read it


@pytest.mark.parametrize(
    ("sql", "construct", "words"),
    [
        # where its first token sqlglot keeps a place for is (the joined table, the subquery's body)
        (
            "SELECT t.k FROM t JOIN u ON t.k = u.k FULL JOIN t AS t2 ON t2.k = u.k",
            "t AS t2",
            "FULL JOIN after",
        ),
        ("SELECT k FROM t WHERE k IN (SELECT u.k FROM u LIMIT 2)", "2)", "LIMIT inside a subquery"),
        ("SELECT t.k FROM t, u RIGHT JOIN t AS t2 ON t2.k = u.k", "t AS t2", "put it first"),
        ("SELECT k FROM t INTERSECT SELECT k FROM u", None, "INTERSECT is not yet FAST"),
        (
            "SELECT t.k FROM t WHERE t.v IN (SELECT MAX(u.w) OVER (PARTITION BY u.k) FROM u)",
            "MAX(u.w)",
            "inside a subquery",
        ),
        (
            "SELECT t.k, SUM(SUM(t.v)) OVER (PARTITION BY t.k) AS s FROM t GROUP BY t.k",
            None,
            "over an aggregate",
        ),
        ("SELECT k FROM t EXCEPT SELECT k FROM u", None, "WHERE NOT EXISTS"),
        ("SELECT t.k, upper(t.v) FROM t", "upper(t.v)", "name the output column"),
        ("WITH x AS (SELECT k FROM t) SELECT x.k, v FROM x JOIN t USING (k) LIMIT 3", None, "LIMIT"),
        ("SELECT DISTINCT COUNT(*) AS n FROM t JOIN u USING (k)", None, "DISTINCT over an aggregate"),
    ],
)
def test_a_refusal_names_the_operator_and_where_it_is(sql: str, construct: str | None, words: str) -> None:
    info = analyze_query(sql, columns_of=columns)
    assert info.fast_refresh is None and words in info.fast_reason, info.fast_reason
    if construct is not None:
        assert info.fast_position is not None
        assert sql[info.fast_position :].startswith(construct), sql[info.fast_position :]


def test_without_the_tables_columns_the_shape_planners_reason_stands() -> None:
    info = analyze_query("WITH x AS (SELECT k FROM t) SELECT k FROM x")
    assert info.fast_refresh is None and "CTE" in info.fast_reason
    ambiguous = analyze_query("SELECT k FROM t JOIN u ON g = w", columns_of=columns)
    assert ambiguous.fast_reason.startswith("column k is ambiguous")


def test_exists_and_not_exists_are_keyed_inputs_by_their_correlation() -> None:
    root = nested_of(
        "SELECT t.g, COUNT(*) AS n FROM t WHERE EXISTS (SELECT * FROM u WHERE u.k = t.k AND u.w <> t.v) "
        "AND NOT EXISTS (SELECT 1 FROM u u2 WHERE u2.w = t.v) GROUP BY t.g"
    )
    assert [type(n).__name__ for n in root.inputs] == ["Scan", "Scan", "Scan"]
    counted = "SELECT `u2`.`w` FROM __mvs_scan2 AS `u2`"  # its one correlation and nothing else
    assert root.keyed == (
        Keyed("__mvs_scan1", "semi join (EXISTS)", "k", "__mvs_scan0", "k"),
        Keyed("__mvs_scan2", "anti join (NOT EXISTS)", "w", "__mvs_scan0", "v", matches=counted),
    )
    assert "EXISTS(SELECT" in root.sql and "FROM __mvs_scan1 AS `u`" in root.sql  # Spark evaluates them


def test_in_is_keyed_by_its_pair_and_not_in_only_by_a_correlation() -> None:
    sql = (
        "SELECT t.k FROM t WHERE t.g IN (SELECT u.w FROM u) AND t.v NOT IN (SELECT u2.w FROM u u2) "
        "AND t.k NOT IN (SELECT u3.w FROM u u3 WHERE u3.k = t.g)"
    )
    root = nested_of(sql)
    tables = {s.view: s.alias for s in tree_of(sql).scans}
    assert {(tables[k.view], k.operator, k.column, k.outer_column) for k in root.keyed} == {
        ("u", "semi join (IN)", "w", "g"),
        ("u2", "anti join (NOT IN)", None, None),  # NULL semantics reach every row: whole
        ("u3", "anti join (NOT IN)", "k", "g"),
    }


def test_a_keyed_input_carries_the_conditions_on_its_outer_input_alone() -> None:
    sql = (
        "SELECT t.k FROM t WHERE t.g = 1 AND t.v > (SELECT AVG(u.w) FROM u WHERE u.k = t.k) "
        "AND t.v + t.k < 9 AND t.k = t.g"
    )
    (keyed,) = nested_of(sql).keyed
    assert keyed.outer_keys == (
        "SELECT `t`.`k` FROM __mvs_scan0 AS `t` "
        "WHERE `t`.`g` = 1 AND `t`.`v` + `t`.`k` < 9 AND `t`.`k` = `t`.`g`"
    )
    back = tree_from_json(tree_json(tree_of(sql)))
    assert back.root is not None and back.root.keyed == (keyed,)
    # A FULL JOIN pads a key without an outer row: not narrowed.
    full = nested_of("SELECT t.k, u.w FROM t FULL JOIN u ON t.k = u.k WHERE t.g = 1")
    assert [k.outer_keys for k in full.keyed] == [None, None]


def test_an_in_under_or_is_recomputed_whole() -> None:
    root = nested_of("SELECT t.k FROM t WHERE t.g IN (SELECT u.w FROM u) OR t.v > 1")
    assert root.keyed == (Keyed("__mvs_scan1", "semi join (IN)"),)


def test_a_derived_aggregate_is_a_node_recomputed_by_its_first_group_key() -> None:
    root = nested_of(
        "SELECT t.k, s.n FROM t JOIN (SELECT u.k, u.w, COUNT(*) AS n FROM u GROUP BY u.k, u.w) s ON s.k = t.k"
    )
    node = root.inputs[1]
    assert isinstance(node, Aggregate) and (node.key, node.output, node.operator) == ("k", "k", "aggregate")
    assert node.sql == "SELECT `k`, `w`, COUNT(*) AS `n` FROM __mvs_node1 GROUP BY `k`, `w`"
    assert root.keys == (JoinKey(node.view, "k", "__mvs_scan0", "k"),)
    assert ("k", "__mvs_scan0", "k") in root.lineage


def test_correlated_and_uncorrelated_scalar_subqueries() -> None:
    root = nested_of(
        "SELECT t.k FROM t WHERE t.v < (SELECT AVG(u.w) FROM u WHERE u.k = t.k) "
        "AND t.v > (SELECT MIN(w) FROM u)"
    )
    assert root.keyed == (
        Keyed("__mvs_scan1", "scalar subquery", "k", "__mvs_scan0", "k"),
        Keyed("__mvs_scan2", "scalar subquery"),
    )


def test_a_left_join_is_keyed_by_its_on_equality_left_to_right() -> None:
    root = nested_of("SELECT t.k, u.w FROM t LEFT JOIN u ON u.k = t.k AND u.w > 1")
    assert root.keyed == (Keyed("__mvs_scan1", "left outer join", "k", "__mvs_scan0", "k"),)
    assert root.left_keys == (JoinKey("__mvs_scan0", "k", "__mvs_scan1", "k"),)
    assert root.lineage == (("k", "__mvs_scan0", "k"),)  # u.w can be NULL-padded: no lineage


def test_a_subquery_in_having_is_a_filter_block_above_the_aggregate() -> None:
    tree = tree_of(
        "SELECT d.g, d.s FROM (SELECT g, SUM(v) AS s FROM t GROUP BY g HAVING SUM(v) > "
        "(SELECT MAX(w) FROM u)) d"
    )
    assert tree.root is not None
    (filtered,) = [n for n in tree.root.inputs if isinstance(n, Block)]
    assert "`__mvs_having`.`__mvs_h0` > (SELECT MAX(" in filtered.sql
    (node,) = [n for n in filtered.inputs if isinstance(n, Aggregate)]
    assert "SUM(`__mvs_a0`) AS `__mvs_h0`" in node.sql  # the HAVING's aggregate, a hidden column
    assert [k.operator for k in filtered.keyed] == ["scalar subquery"]


def test_count_distinct_at_the_top_is_recomputed_by_group_and_merged_as_rows() -> None:
    tree = tree_of("SELECT t.g, COUNT(DISTINCT t.v) AS n FROM t GROUP BY t.g")
    assert tree.top == "projection" and tree.root is not None
    node = tree.root.inputs[0]
    assert isinstance(node, Aggregate)
    assert node.sql == "SELECT `g`, COUNT(DISTINCT `__mvs_a0`) AS `n` FROM __mvs_node1 GROUP BY `g`"
    assert tree.describe()[-2:] == [
        "aggregate by g: recompute of the groups reached (keyed)",
        "project (top): signed rows merged into the MV by row value",
    ]


def test_the_nested_tree_travels_as_json() -> None:
    info = analyze_query(load_queries()["q13"], columns_of=tpch_columns)
    assert info.fast_refresh is not None and info.fast_refresh.tree is not None, info.fast_reason
    tree = tree_from_json(info.fast_refresh.tree)
    assert tree_from_json(tree_json(tree)) == tree
    back = plan_from_record(plan_record(QueryPlan(info.fast_refresh)))
    assert back.fast_refresh == info.fast_refresh


@pytest.mark.parametrize("name", ["q04", "q13", "q15", "q16", "q17", "q20", "q22"])
def test_the_tpch_queries_with_subqueries_outer_joins_and_count_distinct_get_a_nested_tree(name: str) -> None:
    info = analyze_query(load_queries()[name], columns_of=tpch_columns)
    assert info.fast_refresh is not None and info.fast_refresh.kind == "tree", info.fast_reason
    assert tree_from_json(info.fast_refresh.tree or "").root is not None


@pytest.mark.parametrize("name", ["q02", "q18", "q21"])
def test_the_inner_query_of_the_tpch_top_n_queries_gets_a_nested_tree(name: str) -> None:
    sql = load_queries()[name]
    inner = sql[: sql.upper().rindex("ORDER BY")]  # LIMIT is the topn branch's (a wrapper)
    info = analyze_query(inner, columns_of=tpch_columns)
    assert info.fast_refresh is not None and info.fast_refresh.kind == "tree", info.fast_reason


def test_a_right_join_is_a_left_join_mirrored() -> None:
    root = nested_of("SELECT t.k AS tk, u.w FROM t RIGHT JOIN u ON t.k = u.k AND t.v > 1")
    assert root.keyed == (Keyed("__mvs_scan0", "right outer join", "k", "__mvs_scan1", "k"),)
    assert root.left_keys == (JoinKey("__mvs_scan1", "k", "__mvs_scan0", "k"),)
    assert root.lineage == (("w", "__mvs_scan1", "w"),)  # t.k can be NULL-padded: no lineage


def test_a_full_join_keys_each_side_to_the_other_null_keys_included() -> None:
    tree = tree_of(
        "SELECT t.k AS tk, u.k AS uk, u.w FROM t FULL OUTER JOIN u ON u.k = t.k JOIN t AS t2 ON t2.g = u.w"
    )
    assert tree.root is not None
    assert tree.root.keyed == (
        Keyed("__mvs_scan0", "full outer join", "k", "__mvs_scan1", "k"),
        Keyed("__mvs_scan1", "full outer join", "k", "__mvs_scan0", "k"),
    )
    assert all(k.null_keys for k in tree.root.keyed)
    assert tree.root.lineage == ()  # both sides can be NULL-padded
    line = "full outer join: recompute of the rows whose k its change reaches, NULL keys included (keyed)"
    assert line in tree.describe()


def test_an_unnamed_output_is_named_as_spark_names_it() -> None:
    tree = tree_of(
        "SELECT t.g, SUM(t.v * (1 - t.k)), COUNT(*), count(DISTINCT u.w) AS n FROM t JOIN u ON t.k = u.k "
        "GROUP BY t.g"
    )
    assert tree.root is not None
    (node,) = [n for n in tree.root.inputs if isinstance(n, Aggregate)]
    assert "AS `sum((v * (1 - k)))`" in node.sql and "AS `count(1)`" in node.sql, node.sql


@pytest.mark.parametrize(
    ("expression", "name"),
    [
        ("sum(l.l_quantity)", "sum(l_quantity)"),
        ("COUNT(*)", "count(1)"),
        ("AVG(a * (1 - b))", "avg((a * (1 - b)))"),
        ("-a % 2", "((- a) % 2)"),
        ("MAX(DISTINCT a)", None),
        ("upper(a)", None),
        ("CASE WHEN a > 0 THEN 1 END", None),
    ],
)
def test_spark_names_the_forms_it_knows_and_no_other(expression: str, name: str | None) -> None:
    assert spark_name(sqlglot.parse_one(expression, dialect=DIALECT)) == name


def test_the_tpch_q18_as_written_is_a_top_n_around_the_nested_tree() -> None:
    info = analyze_query(load_queries()["q18"], columns_of=tpch_columns)
    assert info.fast_refresh is not None and info.fast_refresh.kind == "top_n", info.fast_reason
    assert info.fast_refresh.top_n is not None
    inner = info.fast_refresh.top_n.inner
    assert inner.kind == "tree" and inner.tree is not None
    assert "AS `sum(l_quantity)`" in (tree_from_json(inner.tree).aggregate_sql or "")


def test_union_all_is_a_linear_node_and_union_its_distinct() -> None:
    tree = tree_of(
        "SELECT s.k, COUNT(*) AS n FROM (SELECT k FROM t WHERE v > 0 UNION ALL SELECT k FROM u "
        "UNION ALL SELECT k FROM t) s GROUP BY s.k"
    )
    (union,) = [n for n in tree.block.inputs if isinstance(n, Union)]
    assert union.columns == (("k",), ("k",), ("k",)) and len(union.inputs) == 3
    assert "union all of 3 inputs: linear, the signed union of their changes" in tree.describe()
    top = tree_of("SELECT k, v FROM t UNION SELECT k, w FROM u")
    assert top.top == "projection" and top.root is not None
    (distinct,) = top.root.inputs
    assert isinstance(distinct, Aggregate) and distinct.operator == "distinct (UNION)"
    assert distinct.sql == "SELECT `k`, `v` FROM __mvs_node3 GROUP BY `k`, `v`"
    assert isinstance(distinct.input.inputs[0], Union)
    assert tree_from_json(tree_json(top)) == top


def test_a_window_is_a_node_recomputed_by_the_partition_its_windows_share() -> None:
    tree = tree_of(
        "SELECT t.k, SUM(t.v) OVER (PARTITION BY t.k ORDER BY t.g) AS run, RANK() OVER (PARTITION BY "
        "t.g, t.k ORDER BY u.w) AS r FROM t JOIN u ON u.k = t.k WHERE u.w > 0"
    )
    assert tree.root is not None
    (node,) = tree.root.inputs
    assert isinstance(node, Aggregate) and node.operator == "window (PARTITION BY)"
    assert (node.key, node.output) == ("__mvs_w0", "k")
    assert "SUM(`__mvs_w1`) OVER (PARTITION BY `__mvs_w0` ORDER BY `__mvs_w2`) AS `run`" in node.sql
    assert node.input.lineage[0] == ("__mvs_w0", "__mvs_scan0", "k")  # pushed down to the scan
    assert "window (PARTITION BY) by k: recompute of the partitions reached (keyed)" in tree.describe()
