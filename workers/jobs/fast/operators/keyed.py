"""Keyed recompute: the one rule of the operators that are not linear (an aggregate below the top,
the inputs of semi / anti joins, of LEFT JOINs and of scalar subqueries). With K the key values
(group key, join key, correlation key) the inputs' changes reach, a node's rows outside K are the same
before and after, so exactly

    Δ node = node(inputs at new, restricted to K) − node(inputs at old, restricted to K)

the restriction pushed down to the scans (``nodes.Evaluation.restricted``), its rows at new read once
and held, at old derived from them and the input's change (``restricted_once``). Where the input's
change is itself one keyed recompute by the aggregate's key (``recomputed_by``: TPC-H Q13's LEFT JOIN
under its count per customer), its two signs are those rows already: nothing is read again. Without a
key (an aggregate without GROUP BY, an uncorrelated subquery, NOT IN's NULL semantics) K is
everything: the node is recomputed whole, before and after.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from pyspark.sql import DataFrame

from workers.ddl.tree.values import Aggregate, Block, Keyed, Node, Scan
from workers.jobs.fast.operators.scan import ScanFrames

KEY = "__mvs_key"  # the one column of a set of key values

# A node's change: the rows it gains and the rows it loses (signed bags; a row in both cancels).
Signed = tuple[DataFrame, DataFrame]


@dataclass(frozen=True)
class Keys:
    """Key values (one column, ``KEY``), held on the driver, and how many rows hold them."""

    frame: DataFrame
    rows: int


class Evaluation(Protocol):
    """What a rule asks of the run's nodes (``nodes.Evaluation``: rows at a version, changes, key
    values, restricted rows; the block's SQL over its inputs' frames)."""

    @property
    def frames(self) -> ScanFrames: ...

    def sql(self, query: str, tables: dict[str, DataFrame]) -> DataFrame: ...

    def at(self, node: Node, new: bool) -> DataFrame: ...

    def delta(self, node: Node) -> Signed | None: ...

    def keys(self, node: Node, column: str) -> Keys: ...

    def distinct_keys(self, rows: DataFrame) -> Keys: ...

    def restricted(self, node: Node, new: bool, column: str, keys: Keys, *, nulls: bool) -> DataFrame: ...

    def at_once(self, node: Node) -> Signed: ...

    def outer_keys(self, keyed: Keyed, outer: Node, new: bool, keys: Keys, *, nulls: bool) -> Keys: ...

    def restricted_once(self, node: Node, column: str, keys: Keys, *, nulls: bool) -> Signed: ...

    def same(self, node: Node, other: Node) -> bool: ...

    def changed(self, node: Node) -> bool: ...

    def note(self, text: str) -> None: ...


def aggregate_delta(ev: Evaluation, node: Aggregate) -> Signed | None:
    """The groups the input's change reaches, recomputed at new (gained) and at old (lost)."""
    change = ev.delta(node.input)
    if change is None:
        return None
    if node.key is None:
        return ev.at(node, True), ev.at(node, False)
    if isinstance(node.input, Block) and recomputed_by(ev, node.input, node.key):
        new, old = change  # the reached groups' rows at new and at old already
    else:  # read once, at old derived where exact (``nodes.derivable``)
        keys = ev.keys(node.input, node.key)
        new, old = ev.restricted_once(node.input, node.key, keys, nulls=True)
    view = node.input.view
    return ev.sql(node.sql, {view: new}), ev.sql(node.sql, {view: old})


def recomputed_by(ev: Evaluation, block: Block, column: str) -> bool:
    """Whether ``block``'s change is its rows at new (gained) and at old (lost) whose output
    ``column`` holds one of a set of keys, all of them: its one changed input is keyed by the input
    column ``column`` is (its one step, ``inner_join._keyed_term``, restricts the rest by it), and a
    NULL key is not one of them (a FULL JOIN pads rows of other keys with NULLs)."""
    changed = [n for n in block.inputs if ev.delta(n) is not None]
    if len(changed) != 1:
        return False
    keyed = block.keyed_input(changed[0].view)
    if keyed is None or keyed.column is None or keyed.null_keys:
        return False
    if keyed.outer_view is None or keyed.outer_column is None:
        return False
    origin = (keyed.outer_view, keyed.outer_column.lower())
    return any(
        output.lower() == column.lower() and (view, name.lower()) == origin
        for output, view, name in block.lineage
    )


def plain_rows(node: Node) -> bool:
    """No aggregate, window or DISTINCT in ``node``'s subtree: its rows are its scans' rows joined,
    filtered and projected, the same whichever plan computes them."""
    if isinstance(node, Scan):
        return True
    if isinstance(node, Aggregate):
        return False
    return all(plain_rows(n) for n in node.inputs)
