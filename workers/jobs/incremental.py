"""Incremental (FAST) refresh of an MV from its base table's MV log, and the FAST/COMPLETE choice.

A run pins the base at its current version ``v``, reads the change rows of versions
(watermark, v] from the MV log and applies them to the MV table so that it holds exactly what a
complete refresh at ``v`` would write (rules in ``workers.jobs.incremental_apply``). Data and the
new watermark land in one Delta commit with the same ``userMetadata`` / ``txnAppId`` /
``txnVersion`` as ``refresh_complete``: a replay or a stale owner's commit is skipped by Delta.

MERGE takes the idempotent-write id and ``userMetadata`` only from session confs, so every run
works in its own session (``session.run_session``: own SQL conf and temp views, same SparkContext,
so the run's job group and cancellation still apply). The MV query runs there as written, over temp
views named like its base table (``refresh.run_query``).

Fencing: an incremental result is only right on top of the MV content it was computed from. Within
one epoch a task runs one refresh at a time; across epochs, a stale owner could still commit between
our read of the MV and our MERGE. So the first incremental run of an epoch commits an empty "fence"
first, with ``txnVersion = epoch * 2**32`` (above every older epoch's): from then on Delta skips
every older-epoch commit, and the MV content we read can only change by a newer epoch (whose commit
makes ours skipped, or fail as a concurrent transaction).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

from delta.tables import DeltaTable
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from workers import warehouse
from workers.config import Settings
from workers.ddl.errors import InvalidQueryError
from workers.ddl.fast import FastRefreshPlan
from workers.ddl.query import analyze_query
from workers.jobs import deltalog, groups, mvlog
from workers.jobs import incremental_apply as apply
from workers.jobs import refresh as complete
from workers.jobs import session as session_module
from workers.jobs.errors import ChangesNotRetained, TableNotFound
from workers.jobs.guard import QueryRefused
from workers.jobs.metadata import EPOCH_SHIFT, MvWatermark, encode_user_metadata, txn_version
from workers.jobs.refresh import RefreshResult, read_at, read_watermark, run_query

__all__ = ["FastRefreshNotPossible", "choose_refresh", "refresh_incremental", "refresh_with_mode"]

_TXN_APP_ID = "spark.databricks.delta.write.txnAppId"
_TXN_VERSION = "spark.databricks.delta.write.txnVersion"
_USER_METADATA = "spark.databricks.delta.commitInfo.userMetadata"
_COMMIT_CONFS = frozenset({_TXN_APP_ID, _TXN_VERSION, _USER_METADATA})
_MATERIALIZE_SOURCE = "spark.databricks.delta.merge.materializeSource"


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


def choose_refresh(
    spark: SparkSession,
    settings: Settings,
    *,
    mode: str,
    mv_name: str,
    query: str,
    plan: FastRefreshPlan | None,
) -> tuple[str, str]:
    """("FAST" | "COMPLETE", reason) for refresh mode COMPLETE / FAST / FORCE (AUTO = FORCE).

    Cheap: Delta log reads and one query analysis, no Spark job. FAST mode also falls back to
    COMPLETE when an incremental refresh is impossible (design: an MV behind the retained change
    data is refreshed completely, with a clear reason); ``refresh_incremental`` re-checks.
    """
    mode = mode.upper()
    if mode == "COMPLETE":
        return "COMPLETE", "complete: refresh mode COMPLETE"
    if mode not in ("FAST", "FORCE", "AUTO"):
        raise ValueError(f"unknown refresh mode {mode!r}")
    if plan is None:
        try:
            why = analyze_query(query, settings.allowed_functions).fast_reason
        except InvalidQueryError as error:  # a query from a producer that skipped the coordinator
            raise QueryRefused(error.message) from error
        return "COMPLETE", f"complete: fast refresh is not possible: {why}"
    try:
        state = _check(spark, settings, mv_name, plan)
        _check_schema(spark, settings, mv_name, query, plan, state)
    except FastRefreshNotPossible as why:
        return "COMPLETE", why.reason
    return "FAST", f"fast: changes of {plan.base_table} after v{state.since} up to v{state.until}"


def refresh_incremental(
    spark: SparkSession,
    settings: Settings,
    *,
    task_id: str,
    mv_name: str,
    query: str,
    plan: FastRefreshPlan,
    epoch: int,
    run_id: str,
    job_group: str,
) -> RefreshResult:
    """Apply the base's change rows since the MV's watermark; same contract as ``refresh_complete``.

    Raises FastRefreshNotPossible (a ChangesNotRetained) when the caller must refresh completely,
    RunCancelled after ``cancel_run(job_group)``, TableNotFound when the base is gone.
    """
    with groups.job_group(spark, job_group, f"incremental refresh of {task_id} (run {run_id})"):
        found = _check(spark, settings, mv_name, plan)
        if found.watermark.epoch > epoch:
            return _stale(found.watermark, epoch)
        session = _run_session(spark)
        if found.watermark.epoch < epoch:
            _fence(session, settings, task_id, mv_name, epoch, run_id, found.until)
        state = _check(session, settings, mv_name, plan)  # re-read: a stale owner may have slipped in
        if state.watermark.epoch > epoch:
            return _stale(state.watermark, epoch)
        if state.watermark.epoch == epoch and state.since == state.until:
            return _stale(state.watermark, epoch)  # Delta would skip this very commit: no work
        _check_schema(session, settings, mv_name, query, plan, state)
        groups.check_cancelled(job_group)
        scope = apply.Scope(session, settings, mv_name)
        try:
            changes, detail = _apply(scope, settings, task_id, mv_name, query, plan, epoch, run_id, state)
        finally:
            scope.close()
        return _result(session, settings, mv_name, state, epoch, run_id, changes, detail)


def refresh_with_mode(
    spark: SparkSession,
    settings: Settings,
    *,
    mode: str,
    task_id: str,
    mv_name: str,
    query: str,
    base_tables: Sequence[str],
    plan: FastRefreshPlan | None,
    epoch: int,
    run_id: str,
    job_group: str,
) -> tuple[str, RefreshResult]:
    """Refresh per ``mode``: ("FAST" | "COMPLETE", result), the result's message starting with the
    reason for a complete refresh ("complete: no MV log on sales; wrote …")."""
    kind, reason = choose_refresh(spark, settings, mode=mode, mv_name=mv_name, query=query, plan=plan)
    common: dict[str, Any] = {
        "task_id": task_id,
        "mv_name": mv_name,
        "query": query,
        "epoch": epoch,
        "run_id": run_id,
        "job_group": job_group,
    }
    if kind == "FAST" and plan is not None:
        try:
            result = refresh_incremental(spark, settings, plan=plan, **common)
            return "FAST", result
        except FastRefreshNotPossible as why:  # the MV log moved on between the check and the run
            reason = why.reason
    result = complete.refresh_complete(spark, settings, base_tables=base_tables, **common)
    return "COMPLETE", replace(result, message=f"{reason}; {result.message}")


# ------------------------------------------------------------------------------------- preconditions


def _check(spark: SparkSession, settings: Settings, mv_name: str, plan: FastRefreshPlan) -> _State:
    base = plan.base_table
    current = read_watermark(spark, settings, mv_name)
    mv_version = deltalog.current_version(spark, settings, mv_name)
    if current is None or mv_version is None:
        raise FastRefreshNotPossible("complete: first build")
    if set(current.watermark) != {base}:
        shown = ", ".join(sorted(current.watermark)) or "nothing"
        raise FastRefreshNotPossible(f"complete: the MV was last refreshed from {shown}, not {base}")
    log = mvlog.read_state(spark, settings, base)
    if log is None:
        raise FastRefreshNotPossible(f"complete: no MV log on {base}")
    until = deltalog.current_version(spark, settings, base)
    if until is None:
        raise TableNotFound(f"base table {base!r} not found at {warehouse.table_path(settings, base)}")
    since = current.watermark[base]
    if until < since:
        raise FastRefreshNotPossible(
            f"complete: {base} is at v{until}, behind the MV's v{since} (re-created?)"
        )
    if log.start_version > since + 1:
        raise FastRefreshNotPossible(
            f"complete: the MV log on {base} starts at v{log.start_version}, after the MV's v{since}"
        )
    if log.retained_from > since + 1:
        raise FastRefreshNotPossible(f"complete: change data before v{log.retained_from} was purged")
    return _State(current, mv_version, since, until)


def _check_schema(
    spark: SparkSession, settings: Settings, mv_name: str, query: str, plan: FastRefreshPlan, state: _State
) -> None:
    """The MV table must have exactly the query's columns (an ALTERed query needs a complete refresh)."""
    mv_schema = read_at(spark, settings, mv_name, state.mv_version).schema
    session = session_module.run_session(spark)  # analysis only; a private session keeps the view private
    base = read_at(session, settings, plan.base_table, state.until)
    try:
        wanted = run_query(session, settings, query, {plan.base_table: base}, mv_name=mv_name).schema
    finally:
        session.catalog.dropTempView(plan.base_table)
    have = [(f.name, f.dataType.simpleString()) for f in mv_schema.fields]
    want = [(f.name, f.dataType.simpleString()) for f in wanted.fields]
    if have != want:
        raise FastRefreshNotPossible(
            "complete: the MV table's columns "
            f"({', '.join(f'{n} {t}' for n, t in have)}) differ from the query's "
            f"({', '.join(f'{n} {t}' for n, t in want)})"
        )
    if plan.kind == "projection" and (odd := apply.unmatchable_columns(mv_schema)):
        raise FastRefreshNotPossible(
            f"complete: rows with MAP/VARIANT columns ({', '.join(odd)}) cannot be matched"
        )


# ----------------------------------------------------------------------------------------- the run


def _run_session(spark: SparkSession) -> SparkSession:
    """A run session (the parent's SQL conf: time zone, ANSI…: results must match a complete refresh)
    with its own commit confs."""
    child = session_module.run_session(spark)
    for key in _COMMIT_CONFS:
        child.conf.unset(key)
    # A run handles small data (change rows, affected groups; big sides are joined by broadcast):
    # without AQE each query is one job instead of one per stage (measured: half the jobs, and
    # 15-30% faster). Results do not depend on it.
    child.conf.set("spark.sql.adaptive.enabled", "false")
    return child


def _fence(
    session: SparkSession, settings: Settings, task_id: str, mv_name: str, epoch: int, run_id: str, until: int
) -> None:
    """Empty commit recording txnVersion ``epoch * 2**32``, so Delta skips older epochs from now on.

    It carries no ``mvs`` metadata (read_watermark ignores it). It is below every refresh commit of
    this epoch (the base has an MV log, so ``until >= 1``): it never makes our own refresh skipped.
    """
    assert until >= 1, "an MV log implies the base is past version 0"
    path = warehouse.table_path(settings, mv_name)
    schema = session.read.format("delta").load(path).schema
    metadata = json.dumps({"mvs_fence": {"task_id": task_id, "epoch": epoch, "run_id": run_id}})
    (
        session.createDataFrame([], schema)
        .write.format("delta")
        .mode("append")
        .option("txnAppId", task_id)
        .option("txnVersion", str(epoch * EPOCH_SHIFT))
        .option("userMetadata", metadata)
        .save(path)
    )


def _apply(
    scope: apply.Scope,
    settings: Settings,
    task_id: str,
    mv_name: str,
    query: str,
    plan: FastRefreshPlan,
    epoch: int,
    run_id: str,
    state: _State,
) -> tuple[int, str]:
    """Commit the changes; returns (number of change rows, what was done)."""
    session, base = scope.session, plan.base_table
    watermark = {base: state.until}
    metadata = encode_user_metadata(task_id, epoch, run_id, watermark)
    version = str(txn_version(epoch, watermark))
    path = warehouse.table_path(settings, mv_name)
    # The MV's latest snapshot, the one MERGE will use (no second snapshot to rebuild). After the
    # fence only a newer epoch can commit in between, and then Delta skips our commit anyway.
    mv = session.read.format("delta").load(path)
    changes = mvlog.read_changes(session, settings, base, state.since, state.until)
    spec: apply.MergeSpec | None = None
    try:
        if plan.kind == "aggregate":
            base_at_v = read_at(session, settings, base, state.until)
            spec = apply.aggregate_merge(scope, query, plan, changes, mv, base_at_v)
            rows = spec.change_rows
        else:
            removal = F.col("_change_type").isin(*apply.DELETE_TYPES).cast("int")
            stats = changes.agg(F.count(F.lit(1)), F.sum(removal)).collect()[0]
            rows = int(stats[0])
            if stats[1]:
                spec = apply.projection_merge(scope, query, base, changes, mv)
    except apply.Inconsistent as why:
        raise FastRefreshNotPossible(f"complete: MV content does not match its watermark ({why})") from why
    if rows == 0 or spec is None:
        # Inserts only into a projection (the common case): the query over them, appended. No
        # change at all: an empty commit that still moves the watermark.
        added = scope.run_query(query, base, changes) if rows else session.createDataFrame([], mv.schema)
        writer = added.write.format("delta").mode("append").option("txnAppId", task_id)
        writer.option("txnVersion", version).option("userMetadata", metadata).save(path)
        return rows, "appended" if rows else "no change"
    # Materialize the (small) source once and cut its lineage: MERGE plans its source several
    # times, and each planning of a time-travel read in it (base at v, MV log at its pinned
    # version) rebuilt that Delta snapshot with more Spark jobs (measured: ~25 -> 18 jobs a run).
    # Materialized, it is deterministic, so Delta need not materialize it again either.
    source = spec.source.localCheckpoint(eager=True)
    session.conf.set(_MATERIALIZE_SOURCE, "none")
    session.conf.set(_TXN_APP_ID, task_id)
    session.conf.set(_TXN_VERSION, version)
    session.conf.set(_USER_METADATA, metadata)
    try:
        target = DeltaTable.forPath(session, path).alias("t")
        builder = target.merge(source.alias("s"), spec.condition)
        builder = builder.whenMatchedDelete(condition=spec.delete_when)
        if spec.update_set:
            builder = builder.whenMatchedUpdate(set=spec.update_set)
        builder.whenNotMatchedInsert(condition=spec.insert_when, values=spec.insert_values).execute()
    finally:
        for key in _COMMIT_CONFS:
            session.conf.unset(key)
    return rows, spec.summary


def _stale(current: MvWatermark, epoch: int) -> RefreshResult:
    """Not committed: a newer epoch already wrote, or this epoch already wrote this watermark."""
    if current.epoch == epoch:
        why = "this watermark was already applied"
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
    session: SparkSession,
    settings: Settings,
    mv_name: str,
    state: _State,
    epoch: int,
    run_id: str,
    changes: int,
    detail: str,
) -> RefreshResult:
    """Did our commit land (same detection as a complete refresh), and what it changed."""
    watermark = {base: state.until for base in state.watermark.watermark}
    found = complete._result(
        session, settings, mv_name, state.mv_version, state.watermark, watermark, epoch, run_id
    )
    if not found.applied or found.delta_version is None:
        return found
    commit = next(deltalog.iter_commits(session, settings, mv_name, after=found.delta_version - 1))
    metrics = commit.operation_metrics
    if commit.operation == "MERGE":
        keys = ("numTargetRowsInserted", "numTargetRowsUpdated", "numTargetRowsDeleted")
        written = sum(int(metrics.get(k, "0")) for k in keys)
    else:
        written = int(metrics.get("numOutputRows", "0"))
    message = (
        f"incremental: {changes} change rows applied (v{state.since} -> v{state.until}: {detail}), "
        f"{written} MV rows written at version {found.delta_version}"
    )
    return replace(found, rows_written=written, message=message)
