"""A block whose changed inputs are all tied by one key, recomputed for the keys their changes reach.

The block's delta rule (``inner_join.block_delta``) sums one term per changed input, each the block's
whole SQL over the other inputs: with n inputs changed, 2n copies of the join in one plan. TPC-H Q21
(lineitem l1 ⋈ orders with EXISTS over l2 and NOT EXISTS over l3, all by the order key) changes four
of its inputs per refresh: eight copies of a six-input join, 41 stages, 2 s of Catalyst's optimizer
and 2.5 s of stages for ~150 change rows.

Where one key class ties every changed input (inner equalities both ways, a subquery's or a LEFT JOIN's
from the outer side; ``Block.reached_by`` from a linear input's column), every row of the block holds
one value k of it, read from rows of the changed inputs holding k, and from nothing else of theirs:
the block's rows holding a key no change row holds are the same before and after. With K the keys the
changes hold (any superset is exact),

    Δ block = block(the class's inputs at new, restricted to K) − block(at old, restricted to K)

two copies whatever the number of changed inputs, each input read restricted (``Evaluation.restricted``:
at new once and held, at old derived, where exact). NULL keys: a NULL matches nothing, so the rows
holding one depend on no other input's rows; K holds NULL when a change row does (restrictions are
NULL-safe). Not for a FULL JOIN (it pads the other side's rows). K is narrowed as the sum's steps
narrow a subquery's keys: to those an outer row passing the block's conditions on it alone holds
(``Keyed.outer_keys``).
"""

from __future__ import annotations

from functools import reduce

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from workers.ddl.tree.values import Aggregate, Block, Node, Scan, label
from workers.jobs.fast.operators.keyed import KEY, Evaluation, Keys, Signed, plain_rows

# Below this many changed inputs the sum's terms (2 per changed input) are few, and read the change rows
# themselves rather than the inputs restricted to the keys: at TPC-H SF 1 (one process, A/B by round)
# Q21 (4-5 changed inputs) took 5.4-6.3 s by this rule against 7.5-8.5 s by the sum, Q18 (3) 4.8-6.5
# against 5.3-7.3 s, but Q4 (2) 2.3-2.4 s against 1.4-2.2 s. And only where a keyed input changed (its
# term is a keyed recompute already): the sum's linear terms narrow the unchanged inputs outside the
# class by the change's other keys (TPC-H Q9's partsupp by part and supplier), this rule does not.
MIN_CHANGED_INPUTS = 3


def key_class(ev: Evaluation, block: Block) -> dict[str, str] | None:
    """The inputs (view → column) of one key class that ties every changed input, from a linear
    input's column; None where none does (or the rule does not apply: the module's note)."""
    changed = [n.view for n in block.inputs if ev.changed(n)]
    if len(changed) < MIN_CHANGED_INPUTS or not any(block.keyed_input(v) for v in changed):
        return None
    if any(k.null_keys for k in block.keyed):
        return None
    starts = dict.fromkeys(mine for mine, _ in block.ties(left_joins=True))
    for view, column in starts:
        if block.keyed_input(view) is not None:
            continue  # a keyed input's rows are not the block's rows: no class starts there
        reached = block.reached_by(view, column)
        if all(v in reached for v in changed):
            return reached
    return None


def keyed_block_delta(ev: Evaluation, block: Block, tied: dict[str, str]) -> Signed | None:
    """The block's rows restricted to the keys its changed inputs' change rows hold (``tied``: the
    key class, ``key_class``), at new (gained) and at old (lost); None where the class's columns are
    not all of one type (the block's ``=`` casts one side, a restriction to one set of keys would
    compare them as they are: '01' = 1 in the block, not '01' among '1')."""
    inputs = {n.view: n for n in block.inputs}
    types = {_column_type(ev.at(inputs[view], False), column) for view, column in tied.items()}
    if len(types) != 1:
        return None
    changed = [n for n in block.inputs if ev.changed(n)]
    reached = _union(ev, [_change_keys(ev, n, tied[n.view]) for n in changed])
    keys, read = _narrowed(ev, block, tied, reached)
    new: dict[str, DataFrame] = {}
    old: dict[str, DataFrame] = {}
    for view, node in inputs.items():
        column = tied.get(view)
        if view in read:  # read by the narrowing already (restricted to more keys: still exact)
            new[view], old[view] = read[view]
        elif column is None:  # not in the class, so unchanged: one version
            new[view] = old[view] = ev.at(node, False)
        elif not ev.changed(node):
            new[view] = old[view] = ev.restricted(node, False, column, keys, nulls=True)
        elif plain_rows(node):  # read once, at old derived
            new[view], old[view] = ev.restricted_once(node, column, keys, nulls=True)
        else:
            new[view] = ev.restricted(node, True, column, keys, nulls=True)
            old[view] = ev.restricted(node, False, column, keys, nulls=True)
    view, column = next(iter(tied.items()))
    start = inputs[view]
    name = start.alias if isinstance(start, Scan) else label(start)
    ev.note(f"{len(changed)} changed inputs: the block recomputed by {name}.{column} for {keys.rows} keys")
    return ev.sql(block.sql, new), ev.sql(block.sql, old)


def _narrowed(
    ev: Evaluation, block: Block, tied: dict[str, str], keys: Keys
) -> tuple[Keys, dict[str, Signed]]:
    """``keys`` narrowed to those a row of a subquery's outer input passing the block's conditions on
    it alone holds, at new or at old (``Keyed.outer_keys``): a block row holding another key exists at
    neither version (TPC-H Q17: part's brand and container keep ~1 in 1,000 of the part keys). And the
    rows of each changed outer input read for it (restricted to ``keys``, read once): the block reads
    them as they are, since its other inputs' rows restricted to the narrowed keys meet no more."""
    inputs = {n.view: n for n in block.inputs}
    read: dict[str, Signed] = {}
    narrowings: dict[tuple[str, str], Keys] = {}  # Q21's EXISTS and NOT EXISTS: one outer, one condition
    for keyed in block.keyed:
        view, column = keyed.outer_view, keyed.outer_column
        if keyed.outer_keys is None or view is None or column is None or tied.get(view) != column:
            continue
        if (keyed.outer_keys, view) in narrowings:
            continue
        outer = inputs[view]
        versions = (True, False) if ev.changed(outer) else (False,)
        if ev.changed(outer) and plain_rows(outer) and view not in read:  # later reads take these
            read[view] = ev.restricted_once(outer, column, keys, nulls=True)
        found = [ev.outer_keys(keyed, outer, new, keys, nulls=True) for new in versions]
        narrowings[(keyed.outer_keys, view)] = _union(ev, found)
    subsets = list(narrowings.values())  # each of ``keys``
    if not subsets:
        return keys, read
    return reduce(lambda a, b: _intersection(ev, a, b), subsets[1:], subsets[0]), read


def _change_keys(ev: Evaluation, node: Node, column: str) -> Keys:
    """The values of ``column`` among ``node``'s change rows, or a superset found without computing
    the change: an aggregate's by its group key are its input change's (a group changes only where its
    input's rows do; TPC-H Q18's orders over 300 in quantity)."""
    if isinstance(node, Aggregate) and node.key is not None and (node.output or "").lower() == column.lower():
        return ev.keys(node.input, node.key)
    return ev.keys(node, column)


def _column_type(frame: DataFrame, column: str) -> str:
    named = (f for f in frame.schema.fields if f.name.lower() == column.lower())
    return next((f.dataType.simpleString() for f in named), f"no column {column}")


def _union(ev: Evaluation, found: list[Keys]) -> Keys:
    """One set of the keys (of one type: ``keyed_block_delta``); each set once (Q21's three lineitem
    occurrences hold the same change rows: one memoized set). An empty set adds nothing: an insert-only
    run's lost keys, say; dropped, the other set is taken as it is, with no job for its distinct."""
    found = list({id(k): k for k in found}.values())
    found = [k for k in found if k.rows] or found[:1]
    if len(found) == 1:
        return found[0]
    return ev.distinct_keys(reduce(DataFrame.union, [k.frame.select(F.col(KEY)) for k in found]))


def _intersection(ev: Evaluation, keys: Keys, other: Keys) -> Keys:
    """The keys in both (NULL-safe: a NULL key in both stays)."""
    if keys is other:
        return keys
    both = keys.frame.join(other.frame, keys.frame[KEY].eqNullSafe(other.frame[KEY]), "left_semi")
    return ev.distinct_keys(both.select(F.col(KEY)))
