"""The operator tree of a FAST plan of kind ``tree`` as it travels: plain values, their JSON form
(``FastRefreshPlan.tree``), and ``describe()``. No sqlglot here (workers read it, never parse).

A tree is, from the leaves up: one ``Scan`` per occurrence of a base table (a self-join reads the
same table twice, as two scans); ``Block`` nodes, one Spark SQL SELECT over its inputs' views (inner
and left outer joins, filter, projection, EXISTS / IN / scalar subqueries over inputs of their own);
``Aggregate`` nodes (a derived table's GROUP BY or DISTINCT, an aggregate its merge cannot keep, a
UNION's distinct) over a block; ``Union`` nodes (UNION ALL of its inputs by position). The root
block's rows are the MV's (``top == "projection"``) or the input of the aggregate at the top
(``aggregate``: the plan of a one-input aggregate over ``INPUT_VIEW``, applied by the aggregate
machinery).

Each node's change is computed from its inputs' (``workers.jobs.fast.operators``): a block is linear
in the inputs it joins (``Block.inputs`` minus ``Block.keyed``) and is recomputed only for the keys a
``Keyed`` input's change reaches; an aggregate is recomputed for the groups its input's change reaches.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any, Literal

from workers.ddl.plan import FastRefreshPlan, JoinKey, fast_plan_from_record, fast_plan_record

# The temp view the top aggregate reads its input (the block's rows) from.
INPUT_VIEW = "__mvs_input"
ROOT_VIEW = "__mvs_root"
TopKind = Literal["projection", "aggregate"]


def scan_view(index: int) -> str:
    """The temp view a run binds the ``index``-th scan to (its rows at a version, or its changes)."""
    return f"__mvs_scan{index}"


def node_view(index: int) -> str:
    """The temp view a run binds the ``index``-th interior node (block, aggregate) to."""
    return f"__mvs_node{index}"


@dataclass(frozen=True)
class Scan:
    """One occurrence of a base table: the table, the alias the query reads it by, its view."""

    table: str
    alias: str
    view: str


@dataclass(frozen=True)
class Keyed:
    """An input of a block that the block is not linear in (the right side of a LEFT JOIN, the left
    of a RIGHT JOIN, either side of a FULL JOIN, a table of an EXISTS / IN / scalar subquery): its
    rows reach only the block's rows whose ``outer`` column (of a linear input, or the other side of
    a FULL JOIN) equals their ``column``. ``column`` None: no such key, a change of
    the input recomputes the block whole. ``operator`` names it (describe)."""

    view: str
    operator: str
    column: str | None = None
    outer_view: str | None = None
    outer_column: str | None = None
    # ``SELECT <outer column> FROM <outer view> WHERE …``: the block's conditions on the outer input
    # alone (None: none). A key no outer row passing them holds reaches no row of the block, so a
    # change's keys are narrowed by it before the keyed input is read (TPC-H Q17: part's brand and
    # container leave ~1 in 1,000 of the parts a lineitem change reaches).
    outer_keys: str | None = None
    # ``SELECT <column> FROM <view> WHERE <the subquery's own conditions>``: an EXISTS / NOT EXISTS /
    # IN whose input's rows matter only by how many per key match (``counted.counted_subquery``;
    # None: not so).
    # A run keeps those counts as helper state and reads the input as the set of keys with one or
    # more (``Block.over_key_sets``), not the input (``workers.jobs.fast.operators.semi_join``).
    matches: str | None = None
    # A LEFT JOIN's right input read only by ``COUNT(<column>)`` above it (``counted.counted_left_join``:
    # TPC-H Q13): its rows counted per key as for a semi join (``matches``: those with that column not
    # NULL), the input read as one row per key holding its count in that column, and the aggregate
    # above summing it (``Aggregate.over_key_sets``). None: a set of keys, a semi / anti join's.
    count_column: str | None = None

    @property
    def null_keys(self) -> bool:
        """A change of a row whose key is NULL reaches the block: a FULL JOIN pads such a row (a LEFT
        JOIN's right side, a subquery's rows, match nothing by a NULL key)."""
        return self.operator == "full outer join"


@dataclass(frozen=True)
class Block:
    """One SELECT over ``inputs`` (by view). ``keys``: equalities of columns of two linear inputs
    the join holds (to narrow reads, never for results); ``left_keys``: a LEFT JOIN's ON equalities
    (left side first: narrowing the left narrows the right, not the reverse); ``lineage``: the
    output columns that are an input's column, as (output, input view, column)."""

    view: str
    sql: str
    inputs: tuple[Node, ...]
    keys: tuple[JoinKey, ...] = ()
    keyed: tuple[Keyed, ...] = ()
    left_keys: tuple[JoinKey, ...] = ()
    lineage: tuple[tuple[str, str, str], ...] = ()
    filtered: bool = False
    # ``sql`` with each subquery whose input is counted (``Keyed.matches``) reading it as a set of
    # keys: its own conditions gone, the input's view bound to the keys (a column named as the key).
    over_key_sets: str | None = None

    def keyed_input(self, view: str) -> Keyed | None:
        """The keyed input read by ``view`` (None: a linear input)."""
        return next((k for k in self.keyed if k.view == view), None)

    def ties(self, *, left_joins: bool) -> list[tuple[tuple[str, str], tuple[str, str]]]:
        """Pairs ((view, column), (other view, column)): a restriction of the first to some values
        allows the second's to them too, without changing the block's rows that hold them. The
        equalities of the inner join (both ways), of a subquery's correlation (to the subquery) and,
        with ``left_joins``, of a LEFT JOIN's ON (from its left side to its right)."""
        pairs: list[tuple[tuple[str, str], tuple[str, str]]] = []
        for key in self.keys:
            pairs += [
                ((key.left_table, key.left_column), (key.right_table, key.right_column)),
                ((key.right_table, key.right_column), (key.left_table, key.left_column)),
            ]
        if left_joins:
            pairs += [
                ((j.left_table, j.left_column), (j.right_table, j.right_column)) for j in self.left_keys
            ]
        pairs += [
            ((k.outer_view, k.outer_column), (k.view, k.column))
            for k in self.keyed
            if k.column is not None and k.outer_view is not None and k.outer_column is not None
        ]
        return pairs

    def reached_by(self, view: str, column: str) -> dict[str, str]:
        """The inputs (by view, with their column) whose rows a restriction of input ``view``'s
        ``column`` to some values restricts too (``ties``, followed from one to the next): ``view``
        itself and the inputs its equalities reach."""
        reached = {view: column}
        work = [(view, column)]
        pairs = self.ties(left_joins=True)
        while work:
            at = work.pop()
            for mine, (other, other_column) in pairs:
                if mine == at and other not in reached:
                    reached[other] = other_column
                    work.append((other, other_column))
        return reached


@dataclass(frozen=True)
class Aggregate:
    """A GROUP BY (or DISTINCT, a UNION's distinct, a SELECT's windows) over the block ``input``:
    ``sql`` over its view, recomputed for the groups (partitions) its input's change reaches, found
    by the input column ``key`` (a group / PARTITION BY column, named ``output`` in the node's rows,
    None when not output); ``key`` None: one group, recomputed whole."""

    view: str
    sql: str
    input: Block
    key: str | None
    output: str | None
    operator: str  # "aggregate", "distinct", "distinct (UNION)", "window (PARTITION BY)"
    # ``sql`` over an input whose LEFT JOIN reads its right side as counts per key
    # (``Keyed.count_column``): each ``COUNT`` of that side's column a ``COALESCE(SUM(…), 0)`` of them.
    over_key_sets: str | None = None


@dataclass(frozen=True)
class Union:
    """UNION ALL of ``inputs`` by position (``sql``: their views' rows one after the other), named
    by the first input's columns; ``columns``: each input's column names, in order (a restriction of
    one output column is each input's column at its position). Linear: its change is the signed
    union of its inputs'. A UNION (distinct) is an ``Aggregate`` (``distinct (UNION)``) above it."""

    view: str
    sql: str
    inputs: tuple[Node, ...]
    columns: tuple[tuple[str, ...], ...]


Node = Scan | Block | Aggregate | Union


@dataclass(frozen=True)
class TreePlan:
    """The operator tree (see the module's note). ``scans``: every scan of the tree; ``keys``,
    ``filtered`` and ``block_sql``: the root block's (``root``)."""

    scans: tuple[Scan, ...]
    keys: tuple[JoinKey, ...]
    filtered: bool  # the block has a WHERE / ON condition beyond its keys (for describe)
    block_sql: str
    top: TopKind
    aggregate: FastRefreshPlan | None = None  # top == "aggregate": over INPUT_VIEW
    aggregate_sql: str | None = None
    distinct: bool = False  # the aggregate is the query's SELECT DISTINCT (GROUP BY every output)
    root: Block | None = None  # None: the flat tree, one block over ``scans``

    @property
    def block(self) -> Block:
        """The root block (the flat form's: an inner join of the scans)."""
        if self.root is not None:
            return self.root
        return Block(ROOT_VIEW, self.block_sql, self.scans, self.keys, filtered=self.filtered)

    @property
    def linear(self) -> bool:
        """Every operator is linear (no keyed input, no interior aggregate): appends only append."""
        return all(isinstance(n, Scan) for n in self.block.inputs) and not self.block.keyed

    def counted_inputs(self) -> list[tuple[Keyed, Node]]:
        """Every counted input (``Keyed.matches``) of the tree's blocks and its node, leaves first
        (the numbering of their key counts); not those inside a counted input (its key sets stand
        for the whole subtree), nor those of a block without ``over_key_sets``."""
        found: list[tuple[Keyed, Node]] = []

        def walk(node: Node) -> None:
            if isinstance(node, Aggregate):
                walk(node.input)
                return
            if isinstance(node, Scan):
                return
            counted: list[Keyed] = []
            if isinstance(node, Block) and node.over_key_sets is not None:
                counted = [k for k in node.keyed if k.matches is not None]
            views = {k.view for k in counted}
            for n in node.inputs:
                if n.view not in views:
                    walk(n)
            inputs = {n.view: n for n in node.inputs}
            found.extend((k, inputs[k.view]) for k in counted)

        walk(self.block)
        return found

    def describe(self) -> list[str]:
        """One line per operator, "operator: rule", from the leaves up (for run messages, EXPLAIN)."""
        lines = _describe(self.block, set())
        if self.top == "projection":
            lines.append("project (top): signed rows merged into the MV by row value")
        else:
            assert self.aggregate is not None
            how = "recompute of the groups reached" if self.aggregate.kind == "aggregate_having" else "merge"
            what = "distinct (top, as GROUP BY of every output)" if self.distinct else "aggregate (top)"
            lines.append(f"{what}: {how} of the signed input rows ({self.aggregate.kind})")
        return lines


def _describe(block: Block, seen: set[str]) -> list[str]:
    lines: list[str] = []
    for node in block.inputs:
        lines.extend(_describe_node(node, seen))
    linear = len(block.inputs) - len(block.keyed)
    if linear > 1:
        lines.append(f"inner join of {linear} inputs: linear, Σ_i T1'⋈…⋈ΔTi⋈…⋈Tn over the occurrences")
    if block.filtered:
        lines.append("filter: linear, applied to the change rows")
    for keyed in block.keyed:
        if keyed.column is None:
            lines.append(f"{keyed.operator}: recompute of the block whole when its input changes")
        elif keyed.matches is not None and keyed.count_column is not None:
            lines.append(
                f"{keyed.operator}: matching rows counted per {keyed.column} (helper state), read as one "
                f"row per key with its count, which the COUNT above sums; the rows whose "
                f"{keyed.outer_column} its change reaches recomputed (keyed)"
            )
        elif keyed.matches is not None:
            lines.append(
                f"{keyed.operator}: matching rows counted per {keyed.column} (helper state), the rows "
                f"whose {keyed.outer_column} gains its first match or loses its last recomputed (keyed)"
            )
        else:
            reached = f"the rows whose {keyed.outer_column} its change reaches"
            if keyed.null_keys:
                reached += ", NULL keys included"
            lines.append(f"{keyed.operator}: recompute of {reached} (keyed)")
    return lines


def _describe_node(node: Node, seen: set[str]) -> list[str]:
    if isinstance(node, Scan):
        return [f"scan {node.table} AS {node.alias}: MV-log change rows"]
    found = identity(node)
    if found in seen:
        return [f"{label(node)}: the same subtree as an earlier occurrence, computed once"]
    seen.add(found)
    if isinstance(node, Block):
        return _describe(node, seen)
    if isinstance(node, Union):
        lines = [line for n in node.inputs for line in _describe_node(n, seen)]
        return [*lines, f"union all of {len(node.inputs)} inputs: linear, the signed union of their changes"]
    reached = "partitions" if node.operator.startswith("window") else "groups"
    what = (
        f" by {node.output or node.key}: recompute of the {reached} reached (keyed)"
        if node.key
        else ": recomputed whole"
    )
    return [*_describe(node.input, seen), f"{node.operator}{what}"]


def label(node: Node) -> str:
    """A few words naming an interior node (the run message's count of its change rows)."""
    if isinstance(node, Aggregate):
        return f"{node.operator} by {node.output or node.key}" if node.key else node.operator
    if isinstance(node, Union):
        return "union all"
    if isinstance(node, Block):
        kinds = list(dict.fromkeys(k.operator for k in node.keyed))
        return f"block of {len(node.inputs)} inputs" + (f" with {' and '.join(kinds)}" if kinds else "")
    return f"scan {node.table}"


_VIEW_NAME = re.compile(r"__mvs_(?:scan|node)\d+\b")


def identity(node: Node) -> str:
    """What ``node`` computes, whatever its views are named: its record with every view of its subtree
    renamed by order of first appearance. Two occurrences of one subtree (a CTE or derived table read
    twice, inlined as two copies with views of their own: a block binds each occurrence to its own
    frame) have one identity, so a run computes their rows and changes once (TPC-H Q15's revenue)."""
    if isinstance(node, Scan):
        return f"scan {node.table}"  # a base's rows and changes: the alias is the reader's
    names: dict[str, str] = {}
    text = json.dumps(_node_record(node), sort_keys=True)
    return _VIEW_NAME.sub(lambda m: names.setdefault(m.group(0), f"__v{len(names)}"), text)


def _key_record(key: JoinKey) -> list[str]:
    return [key.left_table, key.left_column, key.right_table, key.right_column]


def _node_record(node: Node) -> dict[str, Any]:
    if isinstance(node, Scan):
        return {"scan": {"table": node.table, "alias": node.alias, "view": node.view}}
    if isinstance(node, Union):
        return {
            "union": {
                "view": node.view,
                "sql": node.sql,
                "inputs": [_node_record(n) for n in node.inputs],
                "columns": [list(c) for c in node.columns],
            }
        }
    if isinstance(node, Aggregate):
        return {
            "aggregate": {
                "view": node.view,
                "sql": node.sql,
                "input": _node_record(node.input),
                "key": node.key,
                "output": node.output,
                "operator": node.operator,
                **({} if node.over_key_sets is None else {"over_key_sets": node.over_key_sets}),
            }
        }
    return {
        "block": {
            "view": node.view,
            "sql": node.sql,
            "inputs": [_node_record(n) for n in node.inputs],
            "keys": [_key_record(k) for k in node.keys],
            "keyed": [_keyed_record(k) for k in node.keyed],
            "left_keys": [_key_record(k) for k in node.left_keys],
            "lineage": [list(item) for item in node.lineage],
            "filtered": node.filtered,
            **({} if node.over_key_sets is None else {"over_key_sets": node.over_key_sets}),
        }
    }


def _keyed_record(k: Keyed) -> list[str | None]:
    found = [k.view, k.operator, k.column, k.outer_view, k.outer_column]
    if k.count_column is not None:
        return [*found, k.outer_keys, k.matches, k.count_column]
    if k.matches is not None:
        return [*found, k.outer_keys, k.matches]
    return found if k.outer_keys is None else [*found, k.outer_keys]  # older records: five items


def _node_from_record(record: dict[str, Any]) -> Node:
    if "scan" in record:
        s = record["scan"]
        return Scan(s["table"], s["alias"], s["view"])
    if "union" in record:
        u = record["union"]
        inputs = tuple(_node_from_record(n) for n in u["inputs"])
        return Union(u["view"], u["sql"], inputs, tuple(tuple(c) for c in u["columns"]))
    if "aggregate" in record:
        a = record["aggregate"]
        found = _node_from_record(a["input"])
        assert isinstance(found, Block)
        return Aggregate(
            a["view"], a["sql"], found, a["key"], a["output"], a["operator"], a.get("over_key_sets")
        )
    b = record["block"]
    return Block(
        view=b["view"],
        sql=b["sql"],
        inputs=tuple(_node_from_record(n) for n in b["inputs"]),
        keys=tuple(JoinKey(*k) for k in b["keys"]),
        keyed=tuple(Keyed(*k) for k in b["keyed"]),
        left_keys=tuple(JoinKey(*k) for k in b["left_keys"]),
        lineage=tuple((o, v, c) for o, v, c in b["lineage"]),
        filtered=bool(b["filtered"]),
        over_key_sets=b.get("over_key_sets"),
    )


def tree_json(tree: TreePlan) -> str:
    """``tree`` as the JSON text stored in ``FastRefreshPlan.tree``."""
    record: dict[str, Any] = {
        "scans": [{"table": s.table, "alias": s.alias, "view": s.view} for s in tree.scans],
        "keys": [_key_record(k) for k in tree.keys],
        "filtered": tree.filtered,
        "block_sql": tree.block_sql,
        "top": tree.top,
        "aggregate": None if tree.aggregate is None else fast_plan_record(tree.aggregate),
        "aggregate_sql": tree.aggregate_sql,
        "distinct": tree.distinct,
    }
    if tree.root is not None:  # the flat form stays as it was (older workers read it)
        record["root"] = _node_record(tree.root)
    return json.dumps(record, sort_keys=True)


def tree_from_json(text: str) -> TreePlan:
    """The tree stored as ``text`` by ``tree_json``."""
    record = json.loads(text)
    aggregate = record.get("aggregate")
    root = record.get("root")
    found = None if root is None else _node_from_record(root)
    assert found is None or isinstance(found, Block)
    return TreePlan(
        scans=tuple(Scan(s["table"], s["alias"], s["view"]) for s in record["scans"]),
        keys=tuple(JoinKey(*k) for k in record.get("keys", ())),
        filtered=bool(record.get("filtered")),
        block_sql=record["block_sql"],
        top=record["top"],
        aggregate=None if aggregate is None else fast_plan_from_record(aggregate),
        aggregate_sql=record.get("aggregate_sql"),
        distinct=bool(record.get("distinct")),
        root=found,
    )
