"""A block (one SELECT over its inputs: inner join, filter, projection, and the inputs it is not
linear in), by its delta rule.

Over signed bags a join is linear in each input, so with T the inputs at the MV's watermark, T' at
the pinned versions and ΔT their changes, exactly (duplicates, NULL keys and self-joins included,
as the sum runs over occurrences, not tables):

    Δ(T_1 ⋈ … ⋈ T_n) = Σ_i  T_1' ⋈ … ⋈ T_{i-1}' ⋈ ΔT_i ⋈ T_{i+1} ⋈ … ⋈ T_n

Filter and projection are linear too: each term is the block's own SQL (the user's expressions, join
semantics and types) over the inputs' views bound to those frames. The other side of each key
equality of the changed input is narrowed to the keys its change rows hold
(``workers.jobs.fast.join.narrowed``: a filter Delta skips files by, or a broadcast semi-join), and so
is a subquery's input correlated to it; an input tied only to such a side, to that side's narrowed
rows (``_narrow_beyond``).

The inputs the block is not linear in (``Block.keyed``: the right side of a LEFT JOIN, the left of a
RIGHT JOIN, both sides of a FULL JOIN, a subquery's tables) come after, one step each of the same
telescoping sum with every linear input at new: the block recomputed for the keys their change
reaches (``keyed``). Rows two occurrences read alike are read once: a subtree read twice and keyed
whole is held before any step (``Evaluation.at_once``), and a keyed input restricted like another
occurrence of the same base (TPC-H Q17's lineitem in and outside its subquery) is read at new once,
held, and its rows at old derived (``_keyed_rows``).
"""

from __future__ import annotations

from functools import reduce

from pyspark.sql import DataFrame

from workers.ddl.tree.values import Block, Keyed, Node, Scan
from workers.jobs.fast.join import RANGE_KEYS_LIMIT, narrowed, semi_joined
from workers.jobs.fast.operators.keyed import KEY, Evaluation, Keys, Signed
from workers.jobs.fast.operators.keyed_block import key_class, keyed_block_delta


def block_delta(ev: Evaluation, block: Block) -> Signed | None:
    """Σ over the block's changed inputs of its term (gained rows, lost rows); None when none changed.
    Where one key ties every changed input (three or more), the block recomputed for the keys they
    reach instead (``keyed_block``: two copies of the join, not two per changed input)."""
    tied = key_class(ev, block)
    recomputed = keyed_block_delta(ev, block, tied) if tied is not None else None
    if recomputed is not None:
        return recomputed
    gained: list[DataFrame] = []
    lost: list[DataFrame] = []
    for node in block.inputs:  # a subtree read twice, one occurrence keyed whole (TPC-H Q15's revenue):
        keyed = block.keyed_input(node.view)  # computed once, held, before any step reads it (``at``)
        whole = keyed is not None and keyed.column is None and not isinstance(node, Scan)
        if (
            whole
            and ev.delta(node) is not None
            and any(ev.same(n, node) for n in block.inputs if n is not node)
        ):
            ev.at_once(node)
    current = {n.view: ev.at(n, False) for n in block.inputs}
    at_new: set[str] = set()  # the inputs ``current`` holds at new (the sum's steps so far)
    linear = [n for n in block.inputs if block.keyed_input(n.view) is None]
    for node in linear:
        delta = ev.delta(node)
        if delta is not None:
            tables = _narrowed_for(ev, block, node, current, at_new)
            gained.append(ev.sql(block.sql, {**tables, node.view: delta[0]}))
            lost.append(ev.sql(block.sql, {**tables, node.view: delta[1]}))
        current[node.view] = ev.at(node, True)
        at_new.add(node.view)
    for node in block.inputs:
        keyed = block.keyed_input(node.view)
        if keyed is not None and ev.delta(node) is not None:
            term = _keyed_term(ev, block, node, keyed, current, at_new)
            gained.append(term[0])
            lost.append(term[1])
        current[node.view] = ev.at(node, True)
        at_new.add(node.view)
    if not gained:
        return None
    return reduce(DataFrame.unionByName, gained), reduce(DataFrame.unionByName, lost)


def _narrowed_for(
    ev: Evaluation, block: Block, node: Node, current: dict[str, DataFrame], at_new: set[str]
) -> dict[str, DataFrame]:
    """The other inputs as ``node``'s term reads them, each an equality ties to one of its columns,
    directly or through other inputs (``Block.reached_by``: a subquery correlated to an input
    joined to it), narrowed to the keys its change holds (once for both signs); a keyed input whose
    outer input is reached, to the keys an outer row passing its own conditions holds, as its own
    step reads it (``_keyed_rows``: TPC-H Q17's lineitem read once for both)."""
    tables = dict(current)
    inputs = {n.view: n for n in block.inputs}
    columns = dict.fromkeys(column for (view, column), _ in block.ties(left_joins=True) if view == node.view)
    near: set[str] = set()  # the other inputs narrowed to the change's keys
    small = True  # every change the narrowing used is of at most RANGE_KEYS_LIMIT rows
    for column in columns:
        if isinstance(node, Scan):  # the change rows as read (both signs): no job of their own
            read = ev.frames.reads[node.table]
            keys, key, rows = read.frame, column, read.rows
        else:
            found = ev.keys(node, column)
            keys, key, rows = found.frame, KEY, found.rows
        small = small and rows is not None and rows <= RANGE_KEYS_LIMIT
        reached = block.reached_by(node.view, column)
        for other, other_column in reached.items():
            if other != node.view:
                held = ev.frames.is_held(inputs[other])
                cut = narrowed(tables[other], other_column, keys, key, nulls=False, held=held, rows=rows)
                if cut is not tables[other]:  # a held input may be left whole
                    near.add(other)
                tables[other] = cut
        for keyed in block.keyed:
            outer = keyed.outer_view
            if keyed.outer_keys is None or outer is None or reached.get(outer) != keyed.outer_column:
                continue
            if outer == node.view:  # the term's outer rows are the change rows, not a version's rows
                continue
            narrower = ev.outer_keys(
                keyed, inputs[outer], outer in at_new, ev.keys(node, column), nulls=False
            )
            tables[keyed.view] = _keyed_rows(ev, block, keyed, narrower, reached, nulls=False)[1]  # at old
    if small:
        _narrow_beyond(ev, block, node, tables, near)
    return tables


def _narrow_beyond(
    ev: Evaluation, block: Block, node: Node, tables: dict[str, DataFrame], near: set[str]
) -> None:
    """A linear input of ``node``'s term that its change reaches only through another input (one of
    ``near``: narrowed to the change's keys) is read as the rows whose keys meet that input's narrowed
    rows: a semi-join with them, broadcast (narrowed to a change of at most ``RANGE_KEYS_LIMIT`` rows,
    they are few). Else such an input (TPC-H Q9's ``partsupp`` in the ``orders`` term) is read whole
    and shuffled for its join, Spark sizing the term's other side as the product of its inputs:
    ``bench.tpch`` at SF 3, q09's FAST run 8.1-8.8 s → 6.4-7.1 s. Exact: an inner join's equality
    never matches a row whose key no row of ``near`` holds. Inputs held whole on the driver (small)
    are left as they are."""
    inputs = {n.view: n for n in block.inputs}
    beyond: dict[tuple[str, str], list[tuple[str, str]]] = {}
    for key in block.keys:  # the inner join's equalities
        for (far, far_column), (by, by_column) in (
            ((key.left_table, key.left_column), (key.right_table, key.right_column)),
            ((key.right_table, key.right_column), (key.left_table, key.left_column)),
        ):
            other = inputs.get(far)
            if (
                by in near
                and far not in near
                and far != node.view
                and isinstance(other, Scan)
                and block.keyed_input(far) is None
                and not ev.frames.is_held(other)
            ):
                beyond.setdefault((far, by), []).append((far_column, by_column))
    for (far, by), pairs in beyond.items():
        tables[far] = semi_joined(tables[far], tables[by], pairs)


def _keyed_rows(
    ev: Evaluation, block: Block, keyed: Keyed, keys: Keys, reached: dict[str, str], *, nulls: bool
) -> Signed:
    """The keyed input's rows restricted to ``keys``, at new and at old; read once and held, its rows
    at old derived (``restricted_once``), where another occurrence of the same rows is restricted
    alike (``reached``: TPC-H Q17's lineitem, outside its correlated subquery and in it)."""
    assert keyed.column is not None
    inputs = {n.view: n for n in block.inputs}
    node = inputs[keyed.view]
    if ev.delta(node) is not None and any(
        view != node.view and column == keyed.column and ev.same(inputs[view], node)
        for view, column in reached.items()
    ):
        return ev.restricted_once(node, keyed.column, keys, nulls=nulls)
    new = ev.restricted(node, True, keyed.column, keys, nulls=nulls)
    return new, ev.restricted(node, False, keyed.column, keys, nulls=nulls)


def _keyed_term(
    ev: Evaluation, block: Block, node: Node, keyed: Keyed, current: dict[str, DataFrame], at_new: set[str]
) -> Signed:
    """The block's step for the keyed input ``node``: recomputed with ``node`` at new (gained) and
    at old (lost), both restricted to the keys its change reaches (whole without a key): its outer
    input and every input an equality ties to it (``Block.reached_by``) restricted, each as far as the
    sum has stepped (``at_new``: at new; a FULL JOIN's other side may not be)."""
    if keyed.column is None or keyed.outer_view is None or keyed.outer_column is None:
        return (
            ev.sql(block.sql, {**current, node.view: ev.at(node, True)}),
            ev.sql(block.sql, {**current, node.view: ev.at(node, False)}),
        )
    keys = ev.keys(node, keyed.column)
    inputs = {n.view: n for n in block.inputs}
    tables = dict(current)
    # A NULL key matches nothing: the rows holding one are the same before and after (but for a FULL
    # JOIN's, which pad them: ``null_keys``).
    nulls = keyed.null_keys
    if keyed.outer_keys is not None:  # only the keys an outer row passing its own conditions holds
        view = keyed.outer_view
        keys = ev.outer_keys(keyed, inputs[view], view in at_new, keys, nulls=nulls)
    reached = block.reached_by(keyed.outer_view, keyed.outer_column)
    new, old = _keyed_rows(ev, block, keyed, keys, reached, nulls=nulls)
    for view, column in reached.items():
        if view != node.view:
            tables[view] = ev.restricted(inputs[view], view in at_new, column, keys, nulls=nulls)
    return ev.sql(block.sql, {**tables, node.view: new}), ev.sql(block.sql, {**tables, node.view: old})
