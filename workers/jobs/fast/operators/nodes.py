"""Every node of the operator tree as a run sees it: its rows at the MV's watermark (``at(node,
new=False)``) and at the pinned versions (``new=True``), lazy DataFrames of its Spark SQL over its
inputs' rows; its change (``delta``: the rows it gains and the rows it loses, each node by its
rule); and its rows ``restricted`` to some values of one of its columns, exactly (``restrict``), the
restriction pushed down to the scans through the column's lineage so that recomputing a few keys
reads and joins only their rows.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from workers.ddl.tree.values import Aggregate, Keyed, Node, Scan, Union, identity
from workers.jobs.complete import run_query
from workers.jobs.fast import apply
from workers.jobs.fast.operators.inner_join import block_delta
from workers.jobs.fast.operators.keyed import KEY, Keys, Signed, aggregate_delta, plain_rows
from workers.jobs.fast.operators.restrict import restricted_rows
from workers.jobs.fast.operators.scan import ScanFrames, split_changes
from workers.jobs.fast.operators.union_all import union_delta
from workers.jobs.spark.held import hold_counted, hold_distinct

_GAINED = "__mvs_gained"  # a held change row's sign (true: gained), beside the node's columns


@dataclass
class Evaluation:
    """One run's view of the tree's nodes (memoized per node: each is built once, and so is a subtree
    read twice, by its ``identity``)."""

    scope: apply.Scope
    frames: ScanFrames
    _at: dict[tuple[str, bool], DataFrame] = field(default_factory=dict)
    _delta: dict[str, Signed | None] = field(default_factory=dict)
    _scan_delta: dict[str, tuple[object, Signed]] = field(default_factory=dict)  # by table: its read
    _both: dict[str, DataFrame] = field(default_factory=dict)  # held changes, both signs (``_GAINED``)
    _identity: dict[str, str] = field(default_factory=dict)  # by view
    # Rows read restricted once and held, at new and at old, by (identity, column, keys, nulls).
    _held_reads: dict[tuple[str, str, int, bool], tuple[Keys, DataFrame, DataFrame]] = field(
        default_factory=dict
    )
    _keys: dict[tuple[str, str], Keys] = field(default_factory=dict)
    _outer_keys: dict[tuple[str, str, bool, int, bool], tuple[Keys, Keys]] = field(default_factory=dict)
    _held_at: set[str] = field(default_factory=set)  # identities whose ``_at`` are held (``at_once``)
    _held_new: set[tuple[str, bool]] = field(default_factory=set)  # ``_at`` keys held by ``hold_new``
    # Each interior node's change rows (both signs), in the order held: what the run says it touched.
    changed_rows: list[tuple[Node, int]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)  # how the run applied a rule, for its message

    def note(self, text: str) -> None:
        self.notes.append(text)

    def sql(self, query: str, tables: dict[str, DataFrame]) -> DataFrame:
        self.scope.views.update(tables)
        scope = self.scope
        return run_query(scope.session, scope.settings, query, tables, mv_name=scope.mv_name)

    def _id(self, node: Node) -> str:
        found = self._identity.get(node.view)
        if found is None:
            found = self._identity[node.view] = identity(node)
        return found

    def changed(self, node: Node) -> bool:
        if isinstance(node, Scan):
            return node.table in self.frames.reads
        if isinstance(node, Aggregate):
            return self.changed(node.input)
        return any(self.changed(n) for n in node.inputs)

    def at(self, node: Node, new: bool) -> DataFrame:
        """``node``'s rows at the pinned versions (``new``) or at the MV's watermark."""
        if isinstance(node, Scan):
            return (self.frames.new if new else self.frames.old)[node.table]
        if not self.changed(node):
            new = False  # one frame for both
        found = self._at.get((self._id(node), new))
        if found is None:
            if isinstance(node, Aggregate):
                found = self.sql(node.sql, {node.input.view: self.at(node.input, new)})
            else:
                found = self.sql(node.sql, {n.view: self.at(n, new) for n in node.inputs})
            self._at[(self._id(node), new)] = found
        return found

    def delta(self, node: Node) -> Signed | None:
        """``node``'s change by its rule; None when none of its scans changed."""
        if isinstance(node, Scan):
            read = self.frames.reads.get(node.table)
            if read is None:
                return None
            split = self._scan_delta.get(node.table)
            if split is None or split[0] is not read:  # once per read (each step asks, ~20 calls each)
                split = self._scan_delta[node.table] = (read, split_changes(read.frame))
            return split[1]
        if self._id(node) not in self._delta:
            if isinstance(node, Aggregate):
                found = aggregate_delta(self, node)
            elif isinstance(node, Union):
                found = union_delta(self, node)
            else:
                found = block_delta(self, node)
            if found is not None:  # an interior node's change: computed once, read by every use
                found = self._held(node, found)
            self._delta[self._id(node)] = found
        return self._delta[self._id(node)]

    def _held(self, node: Node, signed: Signed) -> Signed:
        """Both signs of ``node``'s change computed by one query (the inputs both read are read
        once: a Delta scan and its file skipping, a broadcast) and held as one frame, then split."""
        # By position: both signs are the same SQL over the same inputs (its names may repeat).
        both = signed[0].withColumn(_GAINED, F.lit(True)).union(signed[1].withColumn(_GAINED, F.lit(False)))
        held, rows = hold_counted(self.scope.session, both)
        self._both[self._id(node)] = held
        self.changed_rows.append((node, rows))
        return held.where(F.col(_GAINED)).drop(_GAINED), held.where(~F.col(_GAINED)).drop(_GAINED)

    def keys(self, node: Node, column: str) -> Keys:
        """The distinct values of ``column`` among ``node``'s change rows (both signs), held (no job
        where the change rows are held on the driver: ``hold_distinct``); once per subtree and column."""
        memo = (self._id(node), column.lower())
        if memo not in self._keys:
            delta = self.delta(node)
            assert delta is not None
            both = self.frames.reads[node.table].frame if isinstance(node, Scan) else self._both[memo[0]]
            self._keys[memo] = self.distinct_keys(both.select(F.col(f"`{column}`")))
        return self._keys[memo]

    def outer_keys(self, keyed: Keyed, outer: Node, new: bool, keys: Keys, *, nulls: bool) -> Keys:
        """Those of ``keys`` that a row of ``outer`` (at new, or at old) passing the block's own
        conditions on it holds (``Keyed.outer_keys``), held; once per version of ``outer`` and
        ``keys``, so that every step restricting ``keyed``'s input by them restricts it alike."""
        assert keyed.outer_keys is not None and keyed.outer_column is not None
        new = new and self.changed(outer)  # an unchanged input: one version
        memo = (keyed.outer_keys, self._id(outer), new, id(keys), nulls)
        if memo not in self._outer_keys:
            rows = self.restricted(outer, new, keyed.outer_column, keys, nulls=nulls)
            self._outer_keys[memo] = (
                keys,
                self.distinct_keys(self.sql(keyed.outer_keys, {outer.view: rows})),
            )
        return self._outer_keys[memo][1]

    def distinct_keys(self, rows: DataFrame) -> Keys:
        """The distinct values of ``rows``' one column, held (``hold_distinct``)."""
        values = rows.select(F.col(f"`{rows.columns[0]}`").alias(KEY))
        frame, count = hold_distinct(self.scope.session, values)
        return Keys(frame, count)

    def same(self, node: Node, other: Node) -> bool:
        """``node`` and ``other`` compute the same rows (one subtree, or scans of one base)."""
        return self._id(node) == self._id(other)

    def _with_old(
        self,
        node: Node,
        rows: DataFrame,
        restrict: Callable[[DataFrame], DataFrame],
        read_old: Callable[[], DataFrame],
    ) -> Signed:
        """``rows`` (``node``'s rows at new that ``restrict`` keeps) held, and ``node``'s rows at old
        that it keeps derived from them and its change rows, not read again: as bags old ⊎ gained =
        new ⊎ lost, so old = (new ⊎ lost) − gained (EXCEPT ALL: exact, duplicates included). Only
        where a change row is the very row the rows at new hold (``derivable``); else read at old
        (``read_old``) and held too."""
        delta = self.delta(node)
        assert delta is not None
        new = hold_counted(self.scope.session, rows)[0]
        if not derivable(node, new):
            return new, hold_counted(self.scope.session, read_old())[0]
        gained, lost = (restrict(d) for d in delta)
        if len(set(new.columns)) == len(new.columns):  # by name (a base's change rows: their order)
            gained, lost = (d.select(*[F.col(f"`{c}`") for c in new.columns]) for d in (gained, lost))
        return new, new.union(lost).exceptAll(gained)  # else by position: the node's own SQL

    def at_once(self, node: Node) -> Signed:
        """``node``'s rows at new and at old (``at``), computed once: at new held, at old derived
        (``_with_old``); every later ``at`` of the same subtree takes them (TPC-H Q15's revenue, read
        by the join and by the scalar subquery)."""
        found = self._id(node)
        if found not in self._held_at:
            new, old = self._with_old(
                node, self.at(node, True), lambda rows: rows, lambda: self.at(node, False)
            )
            self._at[(found, True)], self._at[(found, False)] = new, old
            self._held_at.add(found)
        return self._at[(found, True)], self._at[(found, False)]

    def hold_new(self, node: Node) -> None:
        """``node``'s rows at new computed once and held: every later ``at`` of the same subtree at new
        takes them (a scalar subquery runs as a job of its own; held, it shares the other read's)."""
        found = (self._id(node), self.changed(node))  # as ``at`` finds it
        if found not in self._held_new:
            self._at[found] = hold_counted(self.scope.session, self.at(node, True))[0]
            self._held_new.add(found)

    def restricted_once(self, node: Node, column: str, keys: Keys, *, nulls: bool) -> Signed:
        """``node``'s rows restricted (``restricted``) at new and at old, read once: at new held, at
        old derived (``_with_old``); later ``restricted`` calls of the same rows (another occurrence
        of the same base at new: TPC-H Q17's lineitem outside its subquery) take the held rows."""
        memo = (self._id(node), column.lower(), id(keys), nulls)
        if memo not in self._held_reads:
            rows = self.restricted(node, True, column, keys, nulls=nulls)
            new, old = self._with_old(
                node,
                rows,
                lambda d: restricted_rows(d, column, keys, nulls=nulls, held=True),
                lambda: self.restricted(node, False, column, keys, nulls=nulls),
            )
            self._held_reads[memo] = (keys, new, old)  # ``keys`` kept alive: its id is in the memo
        _, new, old = self._held_reads[memo]
        return new, old

    def restricted(self, node: Node, new: bool, column: str, keys: Keys, *, nulls: bool) -> DataFrame:
        """``node``'s rows whose ``column`` is among ``keys`` (NULL-safe when ``nulls``), exactly
        (``restrict``): read restricted at the scans where the column's lineage and the node's
        equalities reach, so that recomputing a few keys reads and joins only their rows."""
        held = self._held_reads.get((self._id(node), column.lower(), id(keys), nulls))
        if held is not None:
            return held[1] if new else held[2]
        at = self.at(node, new)
        if isinstance(node, Scan):
            return restricted_rows(at, column, keys, nulls=nulls, held=self.frames.is_held(node))
        if isinstance(node, Aggregate):
            if node.key is None or column != node.output:
                return restricted_rows(at, column, keys, nulls=nulls, held=True)
            rows = self.restricted(node.input, new, node.key, keys, nulls=nulls)
            return self.sql(node.sql, {node.input.view: rows})
        if isinstance(node, Union):  # each input restricted by its column at the same position
            if column not in node.columns[0]:
                return restricted_rows(at, column, keys, nulls=nulls, held=True)
            index = node.columns[0].index(column)
            tables = {
                n.view: self.restricted(n, new, names[index], keys, nulls=nulls)
                for n, names in zip(node.inputs, node.columns, strict=True)
            }
            return self.sql(node.sql, tables)
        origin = next(((v, c) for o, v, c in node.lineage if o == column), None)
        if origin is None:
            return restricted_rows(at, column, keys, nulls=nulls, held=True)
        tables = {n.view: self.at(n, new) for n in node.inputs}
        for view, reached in node.reached_by(*origin).items():
            found = next(n for n in node.inputs if n.view == view)
            tables[view] = self.restricted(found, new, reached, keys, nulls=nulls)
        rows = self.sql(node.sql, tables)  # filtered again: exact even where a scan could not be
        return restricted_rows(rows, column, keys, nulls=nulls, held=True)


def derivable(node: Node, rows: DataFrame) -> bool:
    """Whether ``node``'s rows at old may be derived from its rows at new and its change by EXCEPT ALL:
    each change row is bit for bit a row the rows at new hold, as where no aggregate is below (a
    ``SUM`` of doubles differs in its last bits between two plans: a gained row then removes nothing),
    and Spark can compare its columns (no map or variant)."""
    return plain_rows(node) and not apply.unmatchable_columns(rows.schema)
