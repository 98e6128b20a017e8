"""One refresh run's parameters, fixed when the run starts and passed down to the Spark jobs.

The runner creates one ``RunRequest`` per refresh run, right after pinning the base tables' Delta
versions; the decision (``workers.worker.decision``) and the jobs (``workers.jobs.complete`` /
``incremental``) read it and nothing else about the task. The query's analysis comes from the task
record (``MvSpec.plan``): a run never parses the query. Pure: no Spark, no Kafka.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from workers.ddl import InvalidQueryError, QueryPlan, analyze_query, plan_from_record, plan_record
from workers.records import Record


@dataclass(frozen=True)
class RunRequest:
    task_id: str
    mv_name: str
    query: str  # run as written by Spark, over temp views of the pinned bases
    plan: QueryPlan
    mode: str  # RefreshMode: COMPLETE | FAST | FORCE
    base_tables: tuple[str, ...]
    epoch: int
    run_id: str
    job_group: str  # Spark job group of the run: cancelling it stops the run
    # Base table -> the Delta version this run reads: the watermark its commit records.
    pinned: Mapping[str, int] = field(default_factory=dict)
    # Base table (not MV) -> the Delta version the result reflects, through the MVs it reads too:
    # recorded beside the watermark so a reader can tell which MVs are consistent. Empty: ``pinned``.
    reflects: Mapping[str, int] = field(default_factory=dict)
    # What this MV's refreshes cost per technique as the worker learnt them before this run
    # (technique → fixed ms, ms per row, runs, idle[, rows]): written beside the watermark, for the MV's
    # next owner.
    costs: Mapping[str, tuple[float, ...]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        object.__setattr__(self, "pinned", MappingProxyType(dict(self.pinned)))
        object.__setattr__(self, "reflects", MappingProxyType(dict(self.reflects or self.pinned)))
        object.__setattr__(self, "costs", MappingProxyType(dict(self.costs)))

    @classmethod
    def for_task(
        cls,
        task: Record,
        *,
        run_id: str,
        job_group: str,
        pinned: Mapping[str, int],
        reflects: Mapping[str, int] | None = None,
        costs: Mapping[str, tuple[float, ...]] | None = None,
    ) -> RunRequest:
        """The request of a refresh of MV ``task`` (a TaskRecord whose ``mv.plan`` is set: see
        ``with_plan``) reading the base tables at ``pinned`` (reflecting the base tables at
        ``reflects`` through the MVs among them; None: no MV among them)."""
        spec = task["mv"]
        if spec.get("plan") is None:
            raise ValueError(f"{task['task_id']} has no query plan: the maintainer adds it (with_plan)")
        return cls(
            task_id=task["task_id"],
            mv_name=task["name"],
            query=spec["query"],
            plan=plan_from_record(spec["plan"]),
            mode=spec["refresh_mode"],
            base_tables=tuple(spec["base_tables"]),
            epoch=task["epoch"],
            run_id=run_id,
            job_group=job_group,
            pinned=pinned,
            reflects=reflects or {},
            costs=costs or {},
        )

    @property
    def watermark(self) -> dict[str, int]:
        """What the MV reflects once this run commits (the record field ``watermark_after``)."""
        return dict(self.pinned)


def with_plan(task: Record) -> Record:
    """``task`` with its query analysis in ``mv.plan``. The coordinator writes it when it accepts
    the DDL; a record from before that (or from a coordinator not yet upgraded, during a rolling
    upgrade) has none, so the worker analyses it here, once per task incarnation (the maintainer
    calls this when it gets the task), never per run. Doing it in the worker rather than when the
    coordinator restores its catalog covers both cases with one rule."""
    spec = task.get("mv")
    if task.get("kind") != "MV" or spec is None or spec.get("plan") is not None:
        return task
    try:
        plan = analyze_query(spec["query"]).plan
    except (InvalidQueryError, ValueError, TypeError) as error:
        # Refreshed completely then, where the Spark-side guard refuses it with its code (1001).
        plan = QueryPlan(None, f"the query cannot be analysed: {error}")
    return {**task, "mv": {**spec, "plan": plan_record(plan)}}
