"""FAST plan kind ``top_n``: ``Q ORDER BY o LIMIT n`` over ``Q``'s own FAST plan (``workers.ddl.fast_top``).

Q's rows are kept in the helper table ``<mv>__mvtopn`` (``warehouse.top_n_table_name``) by Q's rule,
as if that table were an MV of its own (with its own helper state beside it, where Q's rule keeps
one), and the MV is rewritten as their first n by ``o`` where it differs (the rewrite merge of
``apply.projection_change``: the MV's net copies per distinct row, so only rows that enter or leave
the top n are written). The MV table holds exactly the query's columns.

Trust, as for the helper state (``aggregate.state``): every commit to the rows table carries the
run (the tag of the MV commit that follows it) and Q's layout; a run uses the table only when its
newest tagged commit names the run of the MV's newest commit and Q as it is now. Anything else — no
table yet, a COMPLETE refresh since that wrote only the MV (a FORCE MV's after its first build), a
crash between the two commits, an ALTERed query — and the run rebuilds it: Q over the bases at the
pinned versions, overwritten (``workers.jobs.top_rows``; a COMPLETE refresh of a FAST top-N MV, and
a FORCE one's first build, writes it so too, so the FAST run after it trusts it). The rows table is
committed first, the MV second: only the MV commit makes it trusted.

After complete runs that wrote only the MV (a FORCE MV recomputing by cost), the rows table and its
helper state are still Q's rows exactly at the watermark of their own run: where every MV commit since
that run is a complete run's and the MV logs hold the change rows since, Q's rule goes on from there
(``aggregate.state.written_before_complete_runs``), as for any MV, instead of recomputing Q; the MV
is rewritten from the rows' first n as always (against its own rows, whatever wrote them).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace

from pyspark.sql import SparkSession

from workers import warehouse
from workers.config import Settings
from workers.ddl.plan import TopN
from workers.jobs import top_rows
from workers.jobs.complete import read_at
from workers.jobs.delta import log as deltalog
from workers.jobs.delta.metadata import MvWatermark, decode_user_metadata, json_object
from workers.jobs.fast import apply
from workers.jobs.fast.aggregate.state import (
    StateStore,
    caught_up_from,
    origin_ranges,
    same_run,
    written_before_complete_runs,
)
from workers.jobs.fast.apply import Change, Scope
from workers.jobs.fast.commit import RunCommit
from workers.jobs.request import RunRequest
from workers.jobs.spark import session as session_module
from workers.jobs.top_rows import ROWS_VIEW, rebuild_rows, rows_layout


@dataclass(frozen=True)
class InnerRun:
    """What Q's own rule is given: Q's request (its rows table as the MV), versions and tag."""

    request: RunRequest
    ranges: Mapping[str, tuple[int, int]]
    mv: MvWatermark  # the rows table's newest tag (trusted)


# Q's rule (``workers.jobs.fast.kinds``), run over the rows table as its MV.
InnerRule = Callable[[Scope, InnerRun], tuple[Change, bool]]


def top_n_change(
    scope: Scope,
    request: RunRequest,
    top: TopN,
    ranges: Mapping[str, tuple[int, int]],
    mv: MvWatermark,
    inner_rule: InnerRule,
) -> tuple[Change, bool]:
    """Commit Q's rows (maintained by ``inner_rule``, or rebuilt when not trusted) and return the
    MV's change to their top n, named "top-N over maintained state (<Q's rule>)"."""
    name = warehouse.top_n_table_name(request.mv_name)
    inner_request = replace(request, mv_name=name, query=top.inner_query)
    watermark = {table: until for table, (_, until) in ranges.items()}
    layout = rows_layout(top)
    # The rows table's newest tag, trusted where it names the run of the MV's newest commit.
    found = _newest_tag(scope.session, scope.settings, name, layout)
    trusted = found if found is not None and same_run(found, mv) else None
    inner_ranges, caught_up = ranges, ""
    if trusted is None and found is not None:
        started = _caught_up(scope.session, scope.settings, request.mv_name, found, mv, ranges)
        if started is not None:
            trusted, inner_ranges = found, started
            caught_up = f"rows {caught_up_from(started)}: "
    if trusted is None:
        with scope.rebuilding(instead=True):
            inner, shared = _rebuild(scope, request, top, ranges, watermark), False
    else:
        commits = RunCommit(scope.session, scope.settings, inner_request, layout)
        run = InnerRun(inner_request, inner_ranges, trusted)
        inner, shared = _maintain(scope, run, commits, watermark, inner_rule)
    scope.step(f"select the top {top.limit}")
    scope.views.add(ROWS_VIEW)
    first_n = top_rows.first_n(scope.session, scope.settings, request.mv_name, top)
    mv_frame = scope.mv_frame()
    old = scope.mv_rows_by_delta_rs(mv_frame.schema, None)
    old = old if old is not None else scope.mv_snapshot()
    # The new top n gained, the old lost: their net copies per distinct row rewrite the MV.
    change = apply.projection_change(scope, "", "", first_n, mv_frame, outputs=(first_n, old))
    return (
        replace(
            change,
            plan=f"top-N over maintained state ({inner.plan})",
            change_rows=inner.change_rows,
            summary=f"{caught_up}{inner.summary}; top {top.limit}: {change.summary}",
        ),
        shared,
    )


def rows_catch_up(
    session: SparkSession,
    settings: Settings,
    mv_name: str,
    top: TopN,
    mv: MvWatermark,
    ranges: Mapping[str, tuple[int, int]],
) -> dict[str, tuple[int, int]] | None:
    """The ranges a run over ``ranges`` now, the MV's newest commit ``mv``, would read going on from
    the rows table's own run (``_caught_up``); None where it would recompute the rows table instead.
    Delta log reads only."""
    found = _newest_tag(session, settings, warehouse.top_n_table_name(mv_name), rows_layout(top))
    if found is None or same_run(found, mv):
        return None
    return _caught_up(session, settings, mv_name, found, mv, ranges)


def _caught_up(
    session: SparkSession,
    settings: Settings,
    mv_name: str,
    found: MvWatermark,
    mv: MvWatermark,
    ranges: Mapping[str, tuple[int, int]],
) -> dict[str, tuple[int, int]] | None:
    """The run's ranges from the watermark of the rows table's newest tag ``found``, where the run
    that wrote it committed the MV before complete runs only and the MV logs hold every change since
    (the module's docstring); None otherwise."""
    if mv.technique != "COMPLETE":
        return None
    origin = written_before_complete_runs(session, settings, mv_name, lambda commit: same_run(commit, found))
    return None if origin is None else origin_ranges(session, settings, origin, ranges)


def _newest_tag(session: SparkSession, settings: Settings, name: str, layout: str) -> MvWatermark | None:
    """The newest tag of the rows table when it was written for ``layout``; None otherwise."""
    if not warehouse.table_exists(settings, name):
        return None
    for commit in deltalog.iter_commits(session, settings, name):
        found = decode_user_metadata(commit.user_metadata, commit.version)
        if found is None:
            continue  # a fence
        tag = json_object(commit.user_metadata, "mvs") or {}
        return found if tag.get("layout") == layout else None
    return None


def _maintain(
    scope: Scope,
    run: InnerRun,
    commits: RunCommit,
    watermark: Mapping[str, int],
    inner_rule: InnerRule,
) -> tuple[Change, bool]:
    """Q's rule over the rows table, committed to it (its helper state first, where it keeps one)."""
    session, settings, name = scope.session, scope.settings, run.request.mv_name
    version = deltalog.current_version(session, settings, name)
    assert version is not None, "a trusted rows table exists"
    checksum = session_module.run_checksums(settings)
    inner_scope, target = apply.table_scope(
        session, settings, name, version, run.request.run_id, checksum, scope.read_names
    )
    try:
        change, shared = inner_rule(inner_scope, run)
        state = StateStore(session, settings, name, run.mv)
        change = commits.commit(
            change,
            target=target,
            state=state,
            watermark=watermark,
            step=scope.step,
            rebuilding=inner_scope.rebuilding,
        )
    finally:
        inner_scope.close()
        scope.rebuilt = scope.rebuilt.plus(inner_scope.rebuilt.ms)
    return change, shared


def _rebuild(
    scope: Scope,
    request: RunRequest,
    top: TopN,
    ranges: Mapping[str, tuple[int, int]],
    watermark: Mapping[str, int],
) -> Change:
    """Q over the bases at the pinned versions, overwriting the rows table."""
    session, settings = scope.session, scope.settings
    scope.step("rebuild the top-N state from the bases")
    bases = {b: read_at(session, settings, b, until) for b, (_, until) in ranges.items()}
    for base, frame in bases.items():
        frame.createOrReplaceTempView(base)
    scope.views.update(bases)
    rebuild_rows(session, settings, request, top, bases, watermark)
    return Change("rebuild", 0, "state rebuilt from the bases")
