"""RunRequests for tests that call the Spark jobs directly, as the runner builds them: the plan from
the DDL layer's analysis (as the coordinator stores it) and the bases pinned at their latest version."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from workers import warehouse
from workers.config import Settings
from workers.ddl import QueryPlan, analyze_query
from workers.jobs.request import RunRequest


def run_request(
    settings: Settings,
    mv: str,
    query: str,
    *,
    mode: str = "COMPLETE",
    epoch: int = 1,
    run: str = "r1",
    job_group: str | None = None,
    bases: Sequence[str] | None = None,
    plan: QueryPlan | None = None,
    pinned: Mapping[str, int] | None = None,
) -> RunRequest:
    """``bases`` given: the query is not analysed (a query the coordinator would refuse, sent by a
    producer that skipped it); ``plan`` then defaults to none."""
    if bases is None:
        info = analyze_query(query)
        bases, plan = info.base_tables, plan or info.plan
    if pinned is None:
        pinned = {base: _latest(settings, base) for base in bases}
    return RunRequest(
        task_id=f"mv:{mv}",
        mv_name=mv,
        query=query,
        plan=plan or QueryPlan(None, "not analysed"),
        mode=mode,
        base_tables=tuple(bases),
        epoch=epoch,
        run_id=run,
        job_group=job_group or f"{mv}-{run}-{epoch}",
        pinned=pinned,
    )


def _latest(settings: Settings, base: str) -> int:
    version = warehouse.latest_version(settings, base)
    assert version is not None, f"base table {base} does not exist"
    return version
