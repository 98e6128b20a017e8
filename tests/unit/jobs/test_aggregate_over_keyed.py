"""When an interior aggregate takes its input's change as it is (``keyed.recomputed_by``): the
input's one changed input is keyed by the column the aggregate groups by (TPC-H Q13's LEFT JOIN
under its count per customer, only the orders changed), so the change's two signs are every row of
the keys reached, at new and at old. Any other change, a FULL JOIN's (NULL keys padded), or a group
by another column reads the reached groups' rows (pure: the tree from the analysis, an injected
set of changed inputs)."""

from __future__ import annotations

from typing import Any

from workers.ddl import analyze_query
from workers.ddl.tree.values import Aggregate, Block, Node, tree_from_json
from workers.jobs.fast.operators.keyed import plain_rows, recomputed_by

COLUMNS = {"c": ("ck", "name"), "o": ("ok", "ck", "note")}
Q13 = (
    "SELECT n, COUNT(*) AS dist FROM (SELECT c.{group}, COUNT(o.ok) AS n FROM c {join} o "
    "ON c.ck = o.ck AND o.note NOT LIKE '%x%' GROUP BY c.{group}) s GROUP BY n"
)


class Changed:
    """An evaluation whose changed inputs are the scans of the given tables."""

    def __init__(self, *tables: str) -> None:
        self.tables = tables

    def delta(self, node: Node) -> Any:
        changed = getattr(node, "table", None) in self.tables
        return ("gained", "lost") if changed else None


def interior(sql: str) -> Aggregate:
    info = analyze_query(sql, columns_of=COLUMNS.get)
    assert info.fast_refresh is not None and info.fast_refresh.tree is not None, info.fast_reason
    root = tree_from_json(info.fast_refresh.tree).block
    found = [n for n in _nodes(root) if isinstance(n, Aggregate)]
    assert len(found) == 1
    return found[0]


def _nodes(node: Node) -> list[Node]:
    if isinstance(node, Block):
        return [node, *(m for n in node.inputs for m in _nodes(n))]
    if isinstance(node, Aggregate):
        return [node, *_nodes(node.input)]
    return [node]


def test_a_left_join_whose_right_side_alone_changed_is_taken_as_it_is() -> None:
    node = interior(Q13.format(group="ck", join="LEFT JOIN"))
    assert isinstance(node.input, Block) and node.key is not None
    assert recomputed_by(Changed("o"), node.input, node.key)  # type: ignore[arg-type]


def test_any_other_change_reads_the_groups_reached() -> None:
    node = interior(Q13.format(group="ck", join="LEFT JOIN"))
    assert isinstance(node.input, Block) and node.key is not None
    assert not recomputed_by(Changed("c", "o"), node.input, node.key)  # type: ignore[arg-type]
    assert not recomputed_by(Changed("c"), node.input, node.key)  # the preserved side: linear


def test_a_full_join_or_a_group_by_another_column_reads_the_groups_reached() -> None:
    full = interior(Q13.format(group="ck", join="FULL JOIN"))
    assert isinstance(full.input, Block) and full.key is not None
    assert not recomputed_by(Changed("o"), full.input, full.key)  # type: ignore[arg-type]
    other = interior(Q13.format(group="name", join="LEFT JOIN"))
    assert isinstance(other.input, Block) and other.key is not None
    assert not recomputed_by(Changed("o"), other.input, other.key)  # type: ignore[arg-type]


def test_rows_at_old_are_derived_only_below_no_aggregate() -> None:
    """A change row of a subtree with an aggregate may differ from its twin at new in its last bits (a
    SUM of doubles in another order): such rows at old are read, not derived (``plain_rows``)."""
    over_scans = interior(Q13.format(group="ck", join="LEFT JOIN"))
    assert plain_rows(over_scans.input)
    sql = (
        "SELECT n, COUNT(*) AS dist FROM (SELECT c.ck, COUNT(*) AS n FROM c JOIN (SELECT ck, "
        "COUNT(*) AS m FROM o GROUP BY ck) s ON c.ck = s.ck GROUP BY c.ck) t GROUP BY n"
    )
    info = analyze_query(sql, columns_of=COLUMNS.get)
    assert info.fast_refresh is not None and info.fast_refresh.tree is not None, info.fast_reason
    found = [n for n in _nodes(tree_from_json(info.fast_refresh.tree).block) if isinstance(n, Aggregate)]
    assert len(found) == 2
    assert [plain_rows(n.input) for n in found] == [False, True]  # the count per customer, the derived
