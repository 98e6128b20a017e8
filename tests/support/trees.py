"""Operator trees of queries over two small tables (``t``, ``u``) and TPC-H's, as the coordinator's
analysis builds them from the tables' columns (pure: sqlglot only)."""

from __future__ import annotations

from workers.ddl import analyze_query
from workers.ddl.tree.values import Block, TreePlan, tree_from_json

TPCH_COLUMNS = {
    "lineitem": "l_orderkey l_partkey l_suppkey l_linenumber l_quantity l_extendedprice l_discount l_tax "
    "l_returnflag l_linestatus l_shipdate l_commitdate l_receiptdate l_shipinstruct l_shipmode l_comment",
    "orders": "o_orderkey o_custkey o_orderstatus o_totalprice o_orderdate o_orderpriority o_clerk "
    "o_shippriority o_comment",
    "customer": "c_custkey c_name c_address c_nationkey c_phone c_acctbal c_mktsegment c_comment",
    "part": "p_partkey p_name p_mfgr p_brand p_type p_size p_container p_retailprice p_comment",
    "supplier": "s_suppkey s_name s_address s_nationkey s_phone s_acctbal s_comment",
    "partsupp": "ps_partkey ps_suppkey ps_availqty ps_supplycost ps_comment",
    "nation": "n_nationkey n_name n_regionkey n_comment",
    "region": "r_regionkey r_name r_comment",
}
COLUMNS = {"t": ("k", "g", "v"), "u": ("k", "w")}


def tpch_columns(table: str) -> tuple[str, ...] | None:
    found = TPCH_COLUMNS.get(table)
    return None if found is None else tuple(found.split())


def columns(table: str) -> tuple[str, ...] | None:
    return COLUMNS.get(table)


def tree_of(sql: str) -> TreePlan:
    info = analyze_query(sql, columns_of=columns)
    assert info.fast_refresh is not None, info.fast_reason
    assert info.fast_refresh.kind == "tree" and info.fast_refresh.tree is not None
    return tree_from_json(info.fast_refresh.tree)


def nested_of(sql: str) -> Block:
    tree = tree_of(sql)
    assert tree.root is not None, "a nested tree keeps its root block"
    return tree.root
