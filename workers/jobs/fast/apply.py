"""How MV-log change rows become one Delta MERGE into the MV table (used by ``workers.jobs.fast.refresh``).

The MV table holds exactly the query's columns (no hidden helper columns; an aggregate MV's helper
state lives in a table of its own, ``workers.jobs.fast.aggregate.state``), so every rule here must be
exact from what the MV (and its state) shows plus the change rows, or else rewrite the affected rows
from the base:

* projection/filter: the MV is a bag of rows without identity. Change rows are run through the MV's
  own query (so expressions and types are exactly the complete refresh's), counted per distinct output
  row with a sign (insert/postimage +1, delete/preimage -1), and every distinct output row whose net
  count is negative is rewritten: all its copies are deleted and ``old + net`` copies re-inserted.
  Duplicates therefore stay exact (deleting one of two equal base rows leaves one MV row).
* aggregate (``workers.jobs.fast.aggregate.merge``): per group, signed deltas are merged with the
  MV's columns and its helper state (COUNT, COUNT(col), SUM, AVG, vanishing groups, MIN/MAX on
  inserts); groups where that is not exact (a delete of the current MIN/MAX, a float too large to
  keep exactly) are recomputed with the MV query over the base at the pinned version, restricted to
  those groups. Recomputing is always exact, so correctness never rests on guessing.

This module holds the shared parts (``Scope``, ``Change``, ``StateWrite``) and the projection rules.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field, replace

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import MapType, StructType, VariantType

from workers import warehouse
from workers.config import Settings
from workers.ddl.plan import FastRefreshPlan
from workers.jobs.changes.mvlog import CHANGE_COLUMNS
from workers.jobs.changes.reads import Changes
from workers.jobs.changes.reads import read as read_changes
from workers.jobs.complete import read_at, run_query
from workers.jobs.delta import arrow as rs_arrow
from workers.jobs.delta import files, rs_commit
from workers.jobs.delta.key_filter import KeyFilter, key_filter
from workers.jobs.delta.metadata import MvWatermark
from workers.jobs.delta.rs_commit import PlainMerge
from workers.jobs.delta.write import MergeSpec, Target
from workers.jobs.rebuilt import NO_REBUILD, Rebuilt
from workers.jobs.spark import held
from workers.jobs.spark.columns import col, q
from workers.jobs.spark.guard import check_expression
from workers.jobs.spark.session import Checksum, compile_for, confs

INSERT_TYPES = ("insert", "update_postimage")
DELETE_TYPES = ("delete", "update_preimage")
_P = "__mvs_"  # prefix of helper columns; never reaches the MV table
SIGN, NET, NEW, OLD = f"{_P}sign", f"{_P}net", f"{_P}new", f"{_P}old"
OP, PRESENT, RECOMPUTE = f"{_P}op", f"{_P}present", f"{_P}recompute"
ROWS, ALL_ROWS = f"{_P}rows", f"{_P}all_rows"
# What a MERGE that derives values itself fails with when a row needs the base after all
# (``aggregate.rules.one_pass_merge``): the run then takes its ``Change.fallback``.
RECOMPUTE_NEEDED = "mvs: a changed group needs recomputing from the base"
# The run's step whose Spark jobs compute what to commit (after the change rows are read).
COMPUTE_STEP = "compute the change to the MV"
# What computing a projection's rewritten rows fails with when the change data deletes more copies of
# a row than the MV holds (``projection_change``): the run raises ``Inconsistent`` then.
FEWER_COPIES = "mvs: the MV holds fewer copies of a row than the change data deletes"
# The most changed groups whose MV rows are read by a filter on their key values; more are found by
# a semi-join instead. A long IN list costs more to plan and run than the broadcast it saves
# (bench.fast_vs_complete, 1,000 groups: 1.3-3 s slower than the semi-join; 1 group: 2-3 jobs fewer).
GROUP_FILTER_LIMIT = 50
# Without it, every join of a run's small frames is a broadcast: a Spark job of its own per side.
_BROADCAST_THRESHOLD = "spark.sql.autoBroadcastJoinThreshold"


class Inconsistent(Exception):
    """The MV content cannot be what its watermark says (e.g. more deletes than copies)."""


def null_safe(left: str, right: str, pairs: Sequence[tuple[str, str]]) -> Column:
    """``left.a <=> right.b AND …`` (TRUE for no pairs): MVs may hold NULL keys and values. One SQL
    expression (a Column per term cost ~4 gateway round trips a pair: 120 in a TPC-H Q18 run)."""
    terms = [f"{left}.{q(x)} <=> {right}.{q(y)}" for x, y in pairs]
    return F.expr(" AND ".join(terms)) if terms else F.lit(True)


def unmatchable_columns(schema: StructType) -> list[str]:
    """Columns that can be neither grouped nor compared (rows holding them cannot be matched)."""
    return [f.name for f in schema.fields if isinstance(f.dataType, MapType | VariantType)]


@dataclass
class Scope:
    """The run's session and the temp views made in it, dropped by ``close``."""

    session: SparkSession
    settings: Settings
    mv_name: str
    mv_version: int | None = None  # the MV version the run read
    # Decided once per run (``rs_commit``): may delta-rs commit to that version, and read it whole?
    delta_rs_commits: bool = False
    delta_rs_reads: bool = False
    mv_schema: StructType | None = None  # the MV's at ``mv_version`` (its checksum) where delta-rs commits
    run_id: str = ""
    views: set[str] = field(default_factory=set)
    checksum: Checksum | None = None  # the run's reader of Delta's per-version checksums (read once each)
    # What the run spent rebuilding helper state from the bases (``rebuilding``: its time, and whether
    # that replaced the change): what a steady run would not pay, so the cost model learns the two
    # apart (``workers.worker.costs``).
    rebuilt: Rebuilt = NO_REBUILD
    # The names of the bases' columns the run holds (``FastRefreshPlan.read_names``); None: every column.
    read_names: Collection[str] | None = None
    _snapshot: DataFrame | None = field(default=None, init=False, repr=False)
    _rebuilding: int = field(default=0, init=False, repr=False)

    def step(self, what: str) -> None:
        """Name the Spark jobs of the run's next step (Spark UI, status store, ``run_stats``)."""
        self.session.sparkContext.setJobDescription(f"{self.run_id}: {what}")

    @contextmanager
    def rebuilding(self, *, instead: bool = False) -> Iterator[None]:
        """Time the step inside as a rebuild of helper state (``rebuilt``); ``instead``: it replaces
        the change the run would apply (what is left of the run says nothing of a steady one)."""
        began, self._rebuilding = time.monotonic(), self._rebuilding + 1
        try:
            yield
        finally:
            self._rebuilding -= 1
            # The outermost step's time only: a nested step's is in it already.
            took_ms = 0.0 if self._rebuilding else (time.monotonic() - began) * 1000
            self.rebuilt = self.rebuilt.plus(took_ms, instead=instead)

    def mv_frame(self) -> DataFrame:
        """The MV's columns, for a run to derive its change from. Its rows are read by
        ``mv_rows_by_delta_rs``, else from ``mv_snapshot``: where delta-rs commits (and so may read), a
        frame of the MV's schema stands in for Spark's Delta snapshot (whose load costs ~0.1 s, paid
        only when delta-rs does not read), and reading its rows fails loudly."""
        if self.mv_schema is None:
            return self.mv_snapshot()
        unread = F.raise_error(F.lit(f"mvs: rows of the MV {self.mv_name} are read by delta-rs, not here"))
        return self.session.range(1).select(*[unread.cast(f.dataType).alias(f.name) for f in self.mv_schema])

    def mv_snapshot(self) -> DataFrame:
        """The MV's latest snapshot in Spark (lazy), loaded once per run: the one a Spark MERGE uses.
        After the fence only a newer epoch can commit in between, and then Delta skips our commit."""
        if self._snapshot is None:
            path = warehouse.table_path(self.settings, self.mv_name)
            self._snapshot = self.session.read.format("delta").load(path)
        return self._snapshot

    def bases_at(
        self, ranges: Mapping[str, tuple[int, int]]
    ) -> tuple[dict[str, DataFrame], dict[str, DataFrame], frozenset[str]]:
        """Each base of ``ranges`` at the MV's watermark and at the pinned version (lazy Delta reads),
        and the unchanged ones read whole instead: small, by delta-rs, held across runs
        (``read_small_kept``, by this run's checksum of it) and one frame for both, so no Delta
        snapshot, file-skipping or broadcast job per term reading them."""
        session, settings = self.session, self.settings
        whole = {
            b: self._as_read(frame)
            for b, (since, until) in ranges.items()
            if since == until
            and (frame := rs_arrow.read_small_kept(session, settings, b, since, self.checksum)) is not None
        }
        old = {
            b: whole[b] if b in whole else self._as_read(read_at(session, settings, b, since))
            for b, (since, _) in ranges.items()
        }
        new = {
            b: old[b] if since == until else self._as_read(read_at(session, settings, b, until))
            for b, (since, until) in ranges.items()
        }
        return old, new, frozenset(whole)

    def changes(self, base: str, since: int, until: int) -> Changes:
        """The change rows of ``base`` in (since, until] (``workers.jobs.changes.reads``: read once, shared);
        many of them make the run compile its plans (``session.compile_for``)."""
        found = read_changes(self.session, self.settings, base, since, until)
        compile_for(self.session, found.rows)
        return replace(found, frame=self._as_read(found.frame))

    def _as_read(self, frame: DataFrame) -> DataFrame:
        """``frame`` (a base's rows, or its change rows) with only its columns the query may read
        (``read_names``) and the change feed's own: held rows projected once a run, not by every query
        over them (``held.narrowed``). The frames a rule combines (rows at old and at new, change rows:
        ``bases_at``, ``changes``) alike; a base that reads none keeps its first column (no frame of
        no columns)."""
        if self.read_names is None:
            return frame
        wanted = {c.lower() for c in (*self.read_names, *CHANGE_COLUMNS.names)}
        kept = [c for c in frame.columns if c.lower() in wanted]
        if all(c in CHANGE_COLUMNS.names for c in kept):
            kept = [c for i, c in enumerate(frame.columns) if i == 0 or c in kept]
        narrowed = held.narrowed(self.session, frame, kept)
        return files.same_read(narrowed, frame)  # a Delta read still narrowed to files by key

    def run_query(self, query: str, base: str, rows: DataFrame) -> DataFrame:
        """The MV query, as written, over ``rows`` as its base table (a temp view named ``base``)."""
        self.views.add(base)
        return run_query(self.session, self.settings, query, {base: rows}, mv_name=self.mv_name)

    def check_expression(self, text: str) -> None:
        """Refuse (QueryRefused) an expression of the MV query that the guard would refuse."""
        check_expression(self.session, text, extra_functions=self.settings.allowed_functions)

    def in_memory(self, frame: DataFrame, *, shuffled_joins: bool = False) -> DataFrame:
        """``frame`` computed once and held (``workers.jobs.spark.held``): meant for small frames (the
        per-group delta, the affected MV rows), whose later reads then run no job of their own.
        ``shuffled_joins``: its joins without a broadcast hint shuffle both sides within the one job
        (each broadcast is a job of its own); for joins of small, already narrowed sides."""
        with confs(self.session, {_BROADCAST_THRESHOLD: "-1"} if shuffled_joins else {}):
            return held.hold(self.session, frame)

    def mv_rows_by_delta_rs(self, schema: StructType, narrow: KeyFilter | None) -> DataFrame | None:
        """The MV rows at the run's version that ``narrow`` keeps (or more), read by delta-rs: no Spark
        job (``rs_commit.read_rows``; a large MV only by a narrow that keeps few files); None where
        the caller reads them with Spark (``mv_snapshot``)."""
        if not self.delta_rs_commits or self.mv_version is None:
            return None
        session, settings, name, version = self.session, self.settings, self.mv_name, self.mv_version
        return rs_commit.read_rows(session, settings, name, version, schema, narrow, self.delta_rs_reads)

    def close(self) -> None:
        for view in self.views:
            self.session.catalog.dropTempView(view)


def table_scope(
    session: SparkSession,
    settings: Settings,
    name: str,
    version: int,
    run_id: str,
    checksum: Checksum,
    read_names: Collection[str] | None,
) -> tuple[Scope, Target]:
    """The scope of a run that commits to table ``name`` (an MV, or a top-N MV's rows table) read at
    ``version``, and that commit's target: whether delta-rs may commit to it and read it, decided
    once here from Delta's checksum of that version. ``read_names``: the plan's (``Scope``)."""
    summary = checksum(name, version)
    target = Target(settings, name, version, summary, rs_commit.usable(settings, name, version))
    reads = target.delta_rs and rs_arrow.small(summary)
    schema = rs_arrow.schema_of(summary) if target.delta_rs else None
    scope = Scope(
        session,
        settings,
        name,
        version,
        target.delta_rs,
        reads,
        schema,
        run_id,
        checksum=checksum,
        read_names=read_names,
    )
    return scope, target


def _plus(a: str, b: str) -> Column:
    return F.coalesce(F.col(a), F.lit(0)) + F.coalesce(F.col(b), F.lit(0))


def signed(changes: DataFrame) -> DataFrame:
    kind = F.col("_change_type")
    sign = F.when(kind.isin(*INSERT_TYPES), 1).when(kind.isin(*DELETE_TYPES), -1)
    return changes.withColumn(SIGN, sign).where(F.col(SIGN).isNotNull())


def group_columns(plan: FastRefreshPlan, mv_schema: StructType) -> list[str]:
    """The MV column of each GROUP BY key (items are the MV's columns, in order; a key selected twice
    is matched by its first column)."""
    by_column = [(i.column, f.name) for i, f in zip(plan.items, mv_schema.fields, strict=True) if i.column]
    return [next(m for c, m in by_column if c == key) for key in plan.group_by]


def keyed_upsert(
    source: DataFrame, keys: list[str], schema: StructType, narrow: KeyFilter | None = None
) -> MergeSpec:
    """The MERGE of MV rows keyed by ``keys`` (NULL-safe): each source row's ``OP`` says whether its
    key's row is deleted or upserted (updated when present, else inserted). A few keys are also
    listed for the target alone, so Delta rewrites only the MV files that can hold them: ``narrow``
    (a filter on the MV's key columns the caller already made from a superset of ``source``'s keys),
    else the held ``source``'s values (``GROUP_FILTER_LIMIT``)."""
    others = [f.name for f in schema.fields if f.name not in keys]
    pairs = [(k, k) for k in keys]
    condition = null_safe("t", "s", pairs)
    if narrow is None:
        narrow = key_filter(schema, pairs, source, limit=GROUP_FILTER_LIMIT)
    return MergeSpec(
        source=source,
        condition=condition & narrow.on("t") if narrow is not None else condition,
        delete_when=F.col(f"s.{OP}") == "delete",
        update_set={q(c): col("s", c) for c in others},
        insert_when=F.col(f"s.{OP}") == "upsert",
        insert_values={q(f.name): col("s", f.name) for f in schema.fields},
        plain=PlainMerge(
            tuple(keys), tuple(schema.names), OP, delete_op="delete", upsert_op="upsert", narrow=narrow
        ),
    )


@dataclass(frozen=True)
class StateWrite:
    """What a run writes to an aggregate MV's helper state (``workers.jobs.fast.aggregate.state``):
    ``merge`` (the changed groups only) or, when it is None, ``frame`` replaces the whole state (a
    rebuild)."""

    frame: DataFrame
    layout: str
    merge: MergeSpec | None = None


@dataclass(frozen=True)
class HelperState:
    """A helper table the run writes besides the aggregate's state (``table``: by the same trust rule,
    before the MV commit): ``write`` applied, or where it is None the trusted state carried as it is.
    ``trusted_by``: the MV commit that state belongs to where it is not the MV's newest (caught up
    from before complete runs, ``StateStore.origin``)."""

    table: str
    write: StateWrite | None
    trusted_by: MvWatermark | None = None


@dataclass(frozen=True)
class Change:
    """What one run commits, by the plan named ``plan``: ``merge`` applied, else ``appended`` appended;
    ``state`` and ``helpers`` are written first, when the MV keeps helper state. ``fallback``: what to
    commit instead when ``merge`` fails with ``RECOMPUTE_NEEDED`` (nothing committed then)."""

    plan: str  # "append", "keyed merge", "rewrite merge" (named in the run message)
    change_rows: int  # change rows read
    summary: str
    merge: MergeSpec | None = None
    appended: DataFrame | None = None
    state: StateWrite | None = None
    fallback: Callable[[], Change] | None = None
    helpers: tuple[HelperState, ...] = ()


# ---------------------------------------------------------------------------------------- projection


def _narrowed(frame: DataFrame, narrow: KeyFilter | None) -> DataFrame:
    return frame.where(narrow.on()) if narrow is not None else frame


def _copies(frame: DataFrame, cols: Sequence[str], how_many: str) -> DataFrame:
    """``how_many`` copies of each row of ``frame`` (none where it is 0 or less), columns ``cols``."""
    copy = f"{_P}copy"
    repeated = F.explode(F.array_repeat(F.lit(0), F.col(how_many).cast("int"))).alias(copy)
    return frame.where(F.col(how_many) > 0).select(*[F.col(q(c)) for c in cols], repeated).drop(copy)


def projection_change(
    scope: Scope,
    query: str,
    base: str,
    changes: DataFrame,
    mv: DataFrame,
    outputs: tuple[DataFrame, DataFrame] | None = None,
) -> Change:
    """Net copies per distinct output row, in one pass over the change rows. Growth only: the new
    copies are appended. Else every distinct output row whose multiplicity drops is rewritten (all its
    copies deleted, ``old + net`` re-inserted) and the ones that grow are inserted, in one MERGE.

    ``outputs``: the query's rows gained and lost, when the caller derived them (a join's delta rules,
    ``workers.jobs.fast.join``); ``changes`` then only counts the change rows."""
    cols = mv.columns
    keyed = [F.col(q(c)) for c in cols]
    if outputs is None:
        ins = scope.run_query(query, base, changes.where(F.col("_change_type").isin(*INSERT_TYPES)))
        dels = scope.run_query(query, base, changes.where(F.col("_change_type").isin(*DELETE_TYPES)))
    else:
        ins, dels = outputs
    tally = f"{_P}tally"  # the one extra row counting every change row (the run message reports it)
    counted = changes.agg(F.count(F.lit(1)).alias(NET)).select(
        *[F.lit(None).cast(f.dataType).alias(f.name) for f in mv.schema.fields], NET, F.lit(True).alias(tally)
    )
    net = (
        ins.withColumn(SIGN, F.lit(1))
        .unionByName(dels.withColumn(SIGN, F.lit(-1)))
        .groupBy(*keyed)
        .agg(F.sum(SIGN).alias(NET))
        .where(F.col(NET) != 0)
        .withColumn(tally, F.lit(False))
    )
    net = scope.in_memory(net.unionByName(counted))  # the one pass over the change rows
    one, counts, grows = F.lit(1), ~F.col(tally), F.col(NET) > 0
    # What the run asks of the net rows, in one aggregate (no job while they are a local relation).
    change_rows, shrinking_rows, growing_rows, added = held.sums(
        net,
        F.when(F.col(tally), F.col(NET)),
        F.when(counts & (F.col(NET) < 0), one),
        F.when(counts & grows, one),
        F.when(counts & grows, F.col(NET)),
    )
    net = net.where(counts).drop(tally)
    if not shrinking_rows:
        return Change("append", change_rows, f"{added} rows added", appended=_copies(net, cols, NET))
    shrinking = net.where(F.col(NET) < 0)
    pairs = [(c, c) for c in cols]
    # The MV files that can hold the shrinking rows: the only ones read, and rewritten by the MERGE.
    narrow = key_filter(
        mv.schema, pairs, shrinking, limit=GROUP_FILTER_LIMIT, ranges=True, rows=shrinking_rows
    )
    read = scope.mv_rows_by_delta_rs(mv.schema, narrow)
    old = (
        (read if read is not None else _narrowed(scope.mv_snapshot(), narrow))
        .alias("m")
        .join(F.broadcast(shrinking).alias("n"), null_safe("m", "n", pairs), "left_semi")
        .groupBy(*keyed)
        .agg(F.count(F.lit(1)).alias(OLD))
    )
    left = _plus(OLD, NET)  # checked while the rows are computed: no job of its own
    rewritten = (
        shrinking.alias("n")
        .join(old.alias("o"), null_safe("n", "o", pairs), "left")
        .select(
            *[col("n", c).alias(c) for c in cols],
            F.when(left < 0, F.raise_error(F.lit(FEWER_COPIES))).otherwise(left).alias(NEW),
        )
        .withColumn(OP, F.lit("rewrite"))
    )
    growing = net.where(F.col(NET) > 0).select(*keyed, F.col(NET).alias(NEW)).withColumn(OP, F.lit("add"))
    try:
        changed = scope.in_memory(rewritten.unionByName(growing))  # the MV rows of shrinking output rows
    except Exception as error:  # noqa: BLE001 - only the check's own failure is told apart
        if FEWER_COPIES not in str(error):
            raise
        raise Inconsistent(FEWER_COPIES.removeprefix("mvs: ")) from None
    markers = changed.where(F.col(OP) == "rewrite").select(*keyed).withColumn(OP, F.lit("del"))
    copies = _copies(changed, cols, NEW).withColumn(OP, F.lit("ins"))
    merge = MergeSpec(
        source=markers.unionByName(copies),
        # Only "del" markers match, so they delete every copy; copies never match and are inserted.
        condition=(F.col(f"s.{OP}") == "del")
        & null_safe("t", "s", pairs)
        & (narrow.on("t") if narrow is not None else F.lit(True)),
        delete_when=F.col(f"s.{OP}") == "del",
        update_set={},
        insert_when=F.col(f"s.{OP}") == "ins",
        insert_values={q(c): col("s", c) for c in cols},
        plain=PlainMerge(tuple(cols), tuple(cols), OP, delete_op="del", insert_op="ins", narrow=narrow),
    )
    summary = f"{shrinking_rows + growing_rows} distinct rows changed, {shrinking_rows} rewritten"
    return Change("rewrite merge", change_rows, summary, merge=merge)
