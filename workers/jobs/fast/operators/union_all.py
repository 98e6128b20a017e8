"""UNION ALL (``workers.ddl.tree.values.Union``), by its delta rule: linear in each input, so

    Δ(A_1 ⊎ … ⊎ A_n) = ΔA_1 ⊎ … ⊎ ΔA_n

(signed bags: duplicates within and across the inputs are kept, each copy its own). The node's own
SQL (its inputs' rows by position, named and typed as Spark unites them) over the inputs' gained rows,
then over their lost rows; an input without change contributes no rows (its rows at old, none kept).
A UNION (distinct) is the keyed recompute of an aggregate above this node (``keyed.aggregate_delta``).
"""

from __future__ import annotations

from workers.ddl.tree.values import Union
from workers.jobs.fast.operators.keyed import Evaluation, Signed


def union_delta(ev: Evaluation, node: Union) -> Signed | None:
    """The signed union of the inputs' changes; None when none changed."""
    deltas = [ev.delta(n) for n in node.inputs]
    if all(d is None for d in deltas):
        return None
    signed = []
    for side in (0, 1):
        tables = {
            n.view: ev.at(n, False).limit(0) if d is None else d[side]
            for n, d in zip(node.inputs, deltas, strict=True)
        }
        signed.append(ev.sql(node.sql, tables))
    return signed[0], signed[1]
