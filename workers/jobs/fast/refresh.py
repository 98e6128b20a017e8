"""Incremental (FAST) refresh of an MV from its base table's MV log, and its preconditions.

A run reads the change rows of versions (watermark, v] from the MV log, ``v`` being the version its
request pinned (``workers.jobs.request``), and applies them to the MV table so that it holds
exactly what a complete refresh at ``v`` would write (the rules of ``workers.jobs.fast``).
Data and the new watermark land in one Delta commit of the MV with the same ``userMetadata`` /
``txnAppId`` / ``txnVersion`` as ``refresh_complete``: a replay or a stale owner's commit is skipped by
Delta (an aggregate's helper state is committed before it, to its own table: ``fast.commit``). The plan
kind's rule is looked up in ``fast.kinds``.

MERGE takes the idempotent-write id and ``userMetadata`` only from session confs, so every run
works in its own session (``session.run_session``: own SQL conf and temp views, same SparkContext,
so the run's job group and cancellation still apply). The MV query runs there as written, over temp
views named like its base table (``complete.run_query``).

Fencing: an incremental result is only right on top of the MV content it was computed from. Within
one epoch a task runs one refresh at a time; across epochs, a stale owner could still commit between
our read of the MV and our MERGE. So the first incremental run of an epoch commits an empty "fence"
first, with ``txnVersion = epoch * 2**32`` (above every older epoch's): from then on Delta skips
every older-epoch commit, and the MV content we read can only change by a newer epoch (whose commit
makes ours skipped, or fail as a concurrent transaction; ``RunCommit.fence``).
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from dataclasses import dataclass, replace

from pyspark.sql import SparkSession

from workers import warehouse
from workers.config import Settings
from workers.ddl.plan import FastRefreshPlan
from workers.ddl.tree.values import tree_from_json
from workers.jobs import complete
from workers.jobs.changes import mvlog
from workers.jobs.complete import RefreshResult, read_at, read_watermark, run_query
from workers.jobs.delta import log as deltalog
from workers.jobs.delta import sizes
from workers.jobs.delta.metadata import MvWatermark
from workers.jobs.delta.write import COMMIT_CONFS, Target
from workers.jobs.errors import ChangesNotRetained
from workers.jobs.fast import apply
from workers.jobs.fast.aggregate.state import CatchUpDeclined, StateStore, caught_up_from, origin_ranges
from workers.jobs.fast.commit import RunCommit
from workers.jobs.fast.kinds import KINDS, Run
from workers.jobs.fast.operators.key_counts import counts_catch_up
from workers.jobs.fast.top_n import rows_catch_up
from workers.jobs.request import RunRequest
from workers.jobs.spark import groups
from workers.jobs.spark import session as session_module

__all__ = ["FastRefreshNotPossible", "fast_refresh_blocker", "helper_state_catch_up", "refresh_incremental"]


class FastRefreshNotPossible(ChangesNotRetained):
    """This refresh cannot be incremental; ``reason`` says why ("complete: …"), for the run record."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


@dataclass(frozen=True)
class _State:
    """What an incremental run starts from: the MV's watermark and version, and the pinned base."""

    watermark: MvWatermark
    mv_version: int
    since: int  # base version the MV reflects
    until: int  # base version pinned for this run
    # Every base (a join has several; ``since``/``until`` are ``plan.base_table``'s): (since, until).
    ranges: Mapping[str, tuple[int, int]]


def fast_plan(request: RunRequest) -> FastRefreshPlan:
    plan = request.plan.fast_refresh
    if plan is None:
        raise FastRefreshNotPossible(f"complete: fast refresh is not possible: {request.plan.fast_reason}")
    return plan


def fast_refresh_blocker(spark: SparkSession, settings: Settings, request: RunRequest) -> str | None:
    """Why the MV cannot be refreshed incrementally now ("complete: …"), or None when it can.

    Cheap: Delta log reads and an analysis of the query by Spark, no Spark job. The decision
    (``workers.worker.decision``) asks it where the run may be incremental; ``refresh_incremental``
    checks again, under the fence.
    """
    try:
        plan = fast_plan(request)
        state = _check(spark, settings, request, plan)
        _check_schema_once(spark, settings, request, plan, state, session_module.run_checksums(settings))
    except FastRefreshNotPossible as why:
        return why.reason
    return None


def refresh_incremental(spark: SparkSession, settings: Settings, request: RunRequest) -> RefreshResult:
    """Apply the base's change rows since the MV's watermark; same contract as ``refresh_complete``.

    Raises FastRefreshNotPossible (a ChangesNotRetained) when the caller must refresh completely,
    RunCancelled after ``cancel_run(request.job_group)``.
    """
    task_id, epoch, run_id = request.task_id, request.epoch, request.run_id
    plan = fast_plan(request)
    with groups.job_group(spark, request.job_group, f"incremental refresh of {task_id} (run {run_id})"):
        found = _check(spark, settings, request, plan)
        if found.watermark.epoch > epoch:
            return _fenced_out(found.watermark, epoch)
        checksum = session_module.run_checksums(settings)
        tables = {request.mv_name: found.mv_version, **request.pinned}
        session = _run_session(spark, interpreted=session_module.small_tables(settings, tables, checksum))
        commits = RunCommit(session, settings, request)
        if found.watermark.epoch < epoch:
            commits.fence(found.until)
        state = _check(session, settings, request, plan)  # re-read: a stale owner may have slipped in
        if state.watermark.epoch > epoch:
            return _fenced_out(state.watermark, epoch)
        if all(s == u for s, u in state.ranges.values()):
            # Already at the pinned versions: our own replay, or a stale owner's commit that landed
            # between the decision and the fence (it still reached the warehouse). Nothing to apply.
            return _fenced_out(state.watermark, epoch)
        _check_schema_once(session, settings, request, plan, state, checksum)
        groups.check_cancelled(request.job_group)
        scope, target = apply.table_scope(
            session,
            settings,
            request.mv_name,
            state.mv_version,
            request.run_id,
            checksum,
            plan.read_names,
        )
        try:
            run = Run(settings, request, plan, state.ranges, state.watermark)
            advanced = _without_change_rows(settings, plan, state.ranges)
            if advanced:
                changes, detail = 0, _advance(scope, run, commits, target)
            else:
                changes, detail = _apply(scope, run, commits, target)
        finally:
            scope.close()
        result = _result(session, settings, request, state, changes, detail)
    jobs = groups.spark_jobs(spark, request.job_group)
    # Only the watermark moved: no rebuild, nor a steady run, to measure.
    return replace(result, spark_jobs=jobs, rebuilt=None if advanced else scope.rebuilt)


# ------------------------------------------------------------------------------------- preconditions


def _check(spark: SparkSession, settings: Settings, request: RunRequest, plan: FastRefreshPlan) -> _State:
    current = read_watermark(spark, settings, request.mv_name)
    mv_version = deltalog.current_version(spark, settings, request.mv_name)
    if current is None or mv_version is None:
        raise FastRefreshNotPossible("complete: first build")
    bases = plan.base_tables
    if set(current.watermark) != set(bases):
        shown = ", ".join(sorted(current.watermark)) or "nothing"
        raise FastRefreshNotPossible(
            f"complete: the MV was last refreshed from {shown}, not {', '.join(sorted(bases))}"
        )
    ranges = {base: _range(spark, settings, request, current, base) for base in bases}
    since, until = ranges[plan.base_table]
    return _State(current, mv_version, since, until, ranges)


def _range(
    spark: SparkSession, settings: Settings, request: RunRequest, current: MvWatermark, base: str
) -> tuple[int, int]:
    """The versions (since, until] of ``base`` the run applies, if its MV log holds their changes."""
    until = request.pinned[base]
    since = current.watermark[base]
    if until < since:
        raise FastRefreshNotPossible(
            f"complete: {base} is at v{until}, behind the MV's v{since} (re-created?)"
        )
    missing = mvlog.changes_missing(spark, settings, base, since)
    if missing is not None:
        raise FastRefreshNotPossible(f"complete: {missing}")
    return since, until


# Schema checks that passed, by what they depend on (see ``_check_schema_once``).
_schemas_checked: set[tuple[object, ...]] = set()
_schemas_lock = threading.Lock()


def _check_schema_once(
    spark: SparkSession,
    settings: Settings,
    request: RunRequest,
    plan: FastRefreshPlan,
    state: _State,
    checksum: session_module.Checksum,
) -> None:
    """``_check_schema``, skipped when it already passed for the same query over the same MV and base
    schemas (read from Delta's per-version checksum files, no Spark): it analyses the query, which
    loads the base's snapshot at the pinned version, and a run would otherwise pay that twice (the
    decision asks, the run checks again under the fence) and every run again."""
    stamps = [checksum(request.mv_name, state.mv_version)]
    stamps += [checksum(b, v) for b, v in sorted(request.pinned.items())]
    schemas = [None if s is None else (s.get("metadata") or {}).get("schemaString") for s in stamps]
    key = (request.mv_name, request.query, plan, tuple(settings.allowed_functions), *schemas)
    known = all(isinstance(schema, str) for schema in schemas)
    with _schemas_lock:
        if known and key in _schemas_checked:
            return
    _check_schema(spark, settings, request, plan, state)
    if known:
        with _schemas_lock:
            _schemas_checked.add(key)


def _check_schema(
    spark: SparkSession, settings: Settings, request: RunRequest, plan: FastRefreshPlan, state: _State
) -> None:
    """The MV table must have exactly the query's columns (an ALTERed query needs a complete refresh)."""
    mv_name = request.mv_name
    mv_schema = read_at(spark, settings, mv_name, state.mv_version).schema
    session = session_module.run_session(spark)  # analysis only; a private session keeps the view private
    bases = {base: read_at(session, settings, base, until) for base, (_, until) in state.ranges.items()}
    try:
        wanted = run_query(session, settings, request.query, bases, mv_name=mv_name).schema
    finally:
        for base in bases:
            session.catalog.dropTempView(base)
    have = [(f.name, f.dataType.simpleString()) for f in mv_schema.fields]
    want = [(f.name, f.dataType.simpleString()) for f in wanted.fields]
    if have != want:
        raise FastRefreshNotPossible(
            "complete: the MV table's columns "
            f"({', '.join(f'{n} {t}' for n, t in have)}) differ from the query's "
            f"({', '.join(f'{n} {t}' for n, t in want)})"
        )
    if KINDS[plan.kind].matches_rows and (odd := apply.unmatchable_columns(mv_schema)):
        raise FastRefreshNotPossible(
            f"complete: rows with MAP/VARIANT columns ({', '.join(odd)}) cannot be matched"
        )


# ----------------------------------------------------------------------------------------- the run


def _run_session(spark: SparkSession, *, interpreted: bool) -> SparkSession:
    """A run session (the parent's SQL conf: time zone, ANSI…: results must match a complete refresh)
    with its own commit confs; ``interpreted``: without code generation (``session.INTERPRETED``)."""
    # A run handles small data (change rows, affected groups; big sides are joined by broadcast):
    # without AQE each query is one job instead of one per stage (measured: half the jobs, and
    # 15-30% faster). Results depend on neither.
    child = session_module.run_session(spark, adaptive=False, codegen=not interpreted)
    for key in COMMIT_CONFS:
        child.conf.unset(key)
    return child


# Plan kinds whose rule may go on from the helper state's watermark after complete runs
# (``aggregate.state``, ``StateStore.origin``): their rule declines where that is not exact.
_CATCH_UP_KINDS = frozenset({"aggregate", "join_aggregate"})


def _may_catch_up(plan: FastRefreshPlan) -> bool:
    """Whether ``plan``'s rule may catch a helper state up: an aggregate's, a join aggregate's, or an
    operator tree's with an aggregate (without HAVING) at its top (``operators.top.tree_change``)."""
    if plan.kind == "tree" and plan.tree is not None:
        aggregate = tree_from_json(plan.tree).aggregate
        return aggregate is not None and aggregate.kind == "aggregate"
    return plan.kind in _CATCH_UP_KINDS


def helper_state_catch_up(
    spark: SparkSession, settings: Settings, request: RunRequest, current: MvWatermark
) -> dict[str, tuple[int, int]] | None:
    """The ranges a FAST run of ``request`` now, the MV's newest commit ``current``, would read going on
    from its helper state's (or a top-N's rows table's, or an operator tree's key counts') own run
    (``_catching_up``, ``top_n.rows_catch_up``, ``key_counts.counts_catch_up``); None where it would
    rebuild that state after complete runs. What FORCE's plan charges it: no rebuild, and the change since
    that run (``worker.planning``). Delta log reads only (the state's and the MV's commits, the MV logs'
    retention); the run finds out again for itself, and may still decline."""
    plan = request.plan.fast_refresh
    if plan is None or set(current.watermark) != set(plan.base_tables):
        return None
    ranges = {base: (current.watermark[base], request.pinned[base]) for base in plan.base_tables}
    if plan.kind == "top_n" and plan.top_n is not None:  # its rows table, and their state with it
        return rows_catch_up(spark, settings, request.mv_name, plan.top_n, current, ranges)
    found = _state_origin(spark, settings, plan, request.mv_name, current, ranges)
    if found is not None:
        return found[1]
    if plan.kind != "tree" or plan.tree is None:
        return None
    name = request.mv_name
    if warehouse.table_exists(settings, warehouse.state_table_name(name)):
        return None  # the aggregate's state, which does not catch up, is rebuilt
    # Key counts alone (the aggregate at the top keeps no state): caught up in a range of their own.
    counts = StateStore(spark, settings, name, current, warehouse.key_counts_table_name(name))
    return counts_catch_up(counts, tree_from_json(plan.tree), ranges)


def _state_origin(
    session: SparkSession,
    settings: Settings,
    plan: FastRefreshPlan,
    mv_name: str,
    mv: MvWatermark,
    ranges: Mapping[str, tuple[int, int]],
) -> tuple[MvWatermark, dict[str, tuple[int, int]]] | None:
    """The MV commit its helper state belongs to and the ranges from its watermark, where only
    complete runs wrote the MV since (``mv`` their newest) and the MV logs still hold every change
    since (``StateStore.origin``, ``origin_ranges``); None otherwise."""
    if mv.technique != "COMPLETE" or not _may_catch_up(plan):
        return None
    origin = StateStore(session, settings, mv_name, mv).origin()
    started = None if origin is None else origin_ranges(session, settings, origin, ranges)
    return None if origin is None or started is None else (origin, started)


def _apply(scope: apply.Scope, run: Run, commits: RunCommit, target: Target) -> tuple[int, str]:
    """Commit the change its plan kind's rule computes, from the helper state's watermark where it
    catches up (``_catching_up``); returns (number of change rows, what was done)."""
    caught_up = _catching_up(scope, run)
    if caught_up is not None:
        try:
            changes, detail = _applied(scope, caught_up, commits, target)
        except CatchUpDeclined:
            pass  # nothing committed: the run goes on from the MV's own watermark
        else:
            return changes, f"helper state {caught_up_from(caught_up.ranges)}: {detail}"
    return _applied(scope, run, commits, target)


def _catching_up(scope: apply.Scope, run: Run) -> Run | None:
    """``run`` from its helper state's watermark instead of the MV's, where only complete runs wrote
    the MV since the state's own run and the MV logs still hold every change since
    (``StateStore.origin``): the run then rebuilds no state. None otherwise."""
    found = _state_origin(scope.session, run.settings, run.plan, run.request.mv_name, run.mv, run.ranges)
    if found is None:
        return None
    origin, ranges = found
    return replace(run, ranges=ranges, mv=origin, catching_up=True)


def _applied(scope: apply.Scope, run: Run, commits: RunCommit, target: Target) -> tuple[int, str]:
    scope.step("read the change rows")
    try:
        change, shared = KINDS[run.plan.kind].change(scope, run)
    except apply.Inconsistent as why:
        raise _not_matching(why) from why
    state = run.state_store(scope)
    watermark = {table: until for table, (_, until) in run.ranges.items()}
    change = commits.commit(
        change, target=target, state=state, watermark=watermark, step=scope.step, rebuilding=scope.rebuilding
    )
    return change.change_rows, _detail(change, shared)


def _without_change_rows(
    settings: Settings, plan: FastRefreshPlan, ranges: Mapping[str, tuple[int, int]]
) -> bool:
    """Do the run's ranges hold no change row (``sizes.no_change_rows``: from the bases' Delta logs,
    no Spark)? Not asked of a top-N plan: its rows table carries a watermark of its own."""
    if plan.kind == "top_n":
        return False
    return all(sizes.no_change_rows(settings, base, since, until) for base, (since, until) in ranges.items())


def _advance(scope: apply.Scope, run: Run, commits: RunCommit, target: Target) -> str:
    """No change row to apply: the MV's watermark moves by an empty commit (and its trusted helper
    state's tag with it), by delta-rs where it writes the MV: no Spark job. Returns what was done."""
    watermark = {table: until for table, (_, until) in run.ranges.items()}
    commits.advance(target=target, state=run.state_store(scope), watermark=watermark, step=scope.step)
    return "no change row in the range, only the watermark moved"


def _detail(change: apply.Change, shared: bool) -> str:
    return f"{change.plan}: {change.summary}" + (", change rows shared with another MV" if shared else "")


def _not_matching(why: apply.Inconsistent) -> FastRefreshNotPossible:
    return FastRefreshNotPossible(f"complete: MV content does not match its watermark ({why})")


def _fenced_out(current: MvWatermark, epoch: int) -> RefreshResult:
    """Not committed, as Delta's idempotent-write fence would not apply it or there is nothing to
    apply: a newer epoch already wrote, this epoch already wrote this watermark, or an older epoch
    wrote the pinned versions after the decision. A fence against stale owners and replays,
    not a decision about the work (that is ``workers.worker.decision``)."""
    if current.epoch == epoch:
        why = "this watermark was already applied"
    elif current.epoch < epoch:
        why = f"the MV already reflects these versions (epoch {current.epoch} wrote them)"
    else:
        why = f"stale epoch {epoch}: epoch {current.epoch} already wrote"
    return RefreshResult(
        applied=False,
        rows_written=0,
        watermark_before=dict(current.watermark),
        watermark_after=dict(current.watermark),
        delta_version=current.delta_version,
        message=f"skipped: {why}",
    )


def _result(
    session: SparkSession, settings: Settings, request: RunRequest, state: _State, changes: int, detail: str
) -> RefreshResult:
    """Did our commit land (same detection as a complete refresh), and what it changed."""
    found = complete.landed(session, settings, request, state.mv_version, state.watermark)
    if not found.applied or found.delta_version is None:
        return found
    after = found.delta_version - 1
    commit = next(deltalog.iter_commits(session, settings, request.mv_name, after=after))
    metrics = commit.operation_metrics
    if commit.operation == "MERGE":
        keys = ("numTargetRowsInserted", "numTargetRowsUpdated", "numTargetRowsDeleted")
        written = sum(int(metrics.get(k, "0")) for k in keys)
    else:
        written = int(metrics.get("numOutputRows", "0"))
    ranges = state.ranges.items()  # one base: "vA -> vB"; a join: "orders vA -> vB, customers …"
    versions = ", ".join(f"{b + ' ' if len(ranges) > 1 else ''}v{s} -> v{u}" for b, (s, u) in ranges)
    message = (
        f"incremental: {changes} change rows applied ({versions}: {detail}), "
        f"{written} MV rows written at version {found.delta_version}"
    )
    inserted, deleted = sizes.rows_inserted_deleted(commit.operation, metrics) or (None, None)
    return replace(found, rows_written=written, message=message, rows_inserted=inserted, rows_deleted=deleted)
