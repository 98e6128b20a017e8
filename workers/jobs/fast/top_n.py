"""FAST plan kind ``top_n``: ``Q ORDER BY o LIMIT n`` over ``Q``'s own FAST plan (``workers.ddl.fast_top``).

Q's rows are kept in the helper table ``<mv>__mvtopn`` (``warehouse.top_n_table_name``) by Q's rule,
as if that table were an MV of its own (with its own helper state beside it, where Q's rule keeps
one), and the MV is rewritten as their first n by ``o`` where it differs (the rewrite merge of
``apply.projection_change``: the MV's net copies per distinct row, so only rows that enter or leave
the top n are written). The MV table holds exactly the query's columns.

Trust, as for the helper state (``aggregate.state``): every commit to the rows table carries the
run (the tag of the MV commit that follows it) and Q's layout; a run uses the table only when its
newest tagged commit names the run of the MV's newest commit and Q as it is now. Anything else — no
table yet, a COMPLETE refresh since (it writes only the MV), a crash between the two commits, an
ALTERed query — and the run rebuilds it: Q over the bases at the pinned versions, overwritten. The
rows table is committed first, the MV second: only the MV commit makes it trusted.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace

from pyspark.sql import DataFrame

from workers import warehouse
from workers.ddl.plan import TopN
from workers.jobs.complete import read_at, run_query
from workers.jobs.delta import log as deltalog
from workers.jobs.delta import write
from workers.jobs.delta.metadata import MvWatermark, decode_user_metadata, json_object
from workers.jobs.fast import apply
from workers.jobs.fast.aggregate.state import StateStore, layout_id
from workers.jobs.fast.apply import Change, Scope
from workers.jobs.fast.commit import RunCommit
from workers.jobs.request import RunRequest
from workers.jobs.spark import session as session_module

# The view the top n are selected from (the rows table as the run committed it).
ROWS_VIEW = "__mvs_top_n_rows"


@dataclass(frozen=True)
class InnerRun:
    """What Q's own rule is given: Q's request (its rows table as the MV), plan, versions and tag."""

    request: RunRequest
    top: TopN
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
    layout = layout_id(top.inner_query)
    commits = RunCommit(scope.session, scope.settings, inner_request, layout)
    watermark = {table: until for table, (_, until) in ranges.items()}
    trusted = _trusted(scope, name, mv, layout)
    if trusted is None:
        inner, shared = _rebuild(scope, inner_request, ranges, commits, watermark), False
    else:
        run = InnerRun(inner_request, top, ranges, trusted)
        inner, shared = _maintain(scope, run, commits, watermark, inner_rule)
    scope.step(f"select the top {top.limit}")
    rows = scope.session.read.format("delta").load(warehouse.table_path(scope.settings, name))
    selected = f"SELECT * FROM {ROWS_VIEW} ORDER BY {top.order_by} LIMIT {top.limit}"
    first_n = scope.run_query(selected, ROWS_VIEW, rows)
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
            summary=f"{inner.summary}; top {top.limit}: {change.summary}",
        ),
        shared,
    )


def _trusted(scope: Scope, name: str, mv: MvWatermark, layout: str) -> MvWatermark | None:
    """The rows table's newest tag when it names the run of the MV's newest commit and ``layout``;
    None when it cannot be trusted (or does not exist)."""
    if not warehouse.table_exists(scope.settings, name):
        return None
    for commit in deltalog.iter_commits(scope.session, scope.settings, name):
        found = decode_user_metadata(commit.user_metadata, commit.version)
        if found is None:
            continue  # a fence
        tag = json_object(commit.user_metadata, "mvs") or {}
        same_run = (found.task_id, found.epoch, found.run_id, found.watermark) == (
            mv.task_id,
            mv.epoch,
            mv.run_id,
            mv.watermark,
        )
        return found if same_run and tag.get("layout") == layout else None
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
    inner_scope, target = apply.table_scope(session, settings, name, version, run.request.run_id, checksum)
    try:
        change, shared = inner_rule(inner_scope, run)
        state = StateStore(session, settings, name, run.mv)
        change = commits.commit(change, target=target, state=state, watermark=watermark, step=scope.step)
    finally:
        inner_scope.close()
    return change, shared


def _rebuild(
    scope: Scope,
    request: RunRequest,
    ranges: Mapping[str, tuple[int, int]],
    commits: RunCommit,
    watermark: Mapping[str, int],
) -> Change:
    """Q over the bases at the pinned versions, overwriting the rows table."""
    session, settings, name = scope.session, scope.settings, request.mv_name
    scope.step("rebuild the top-N state from the bases")
    bases: dict[str, DataFrame] = {
        b: read_at(session, settings, b, until) for b, (_, until) in ranges.items()
    }
    scope.views.update(bases)
    rows = run_query(session, settings, request.query, bases, mv_name=name)
    write.overwrite(
        settings, name, deltalog.current_version(session, settings, name), rows, commits.commit_id(watermark)
    )
    return Change("rebuild", 0, "state rebuilt from the bases")
