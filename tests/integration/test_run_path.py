"""One refresh from DDL to Delta commit: the coordinator analyses the query once and stores the plan
in the task record; the worker's runs (FAST, FORCE, COMPLETE) never parse the query with sqlglot
(the Spark-side guard reads it with Spark's own parser)."""

from __future__ import annotations

from typing import Any

import pytest
import sqlglot.parser

from tests.support.sales import BY_REGION, SCHEMA, mv_rows, query_rows, rows
from workers import warehouse
from workers.codec import get_codec
from workers.config import Settings
from workers.coordinator.handlers import Context, handle_ddl
from workers.ddl import parse_statement
from workers.demo_tables import append, create_table
from workers.jobs.changes.mvlog import create_mv_log
from workers.jobs.request import with_plan
from workers.worker.runner import SparkRunner

pytestmark = pytest.mark.integration

RANKED = "SELECT id, rank() OVER (PARTITION BY region ORDER BY amount) AS r FROM sales"


def _accepted(settings: Settings, statement: str) -> dict[str, Any]:
    """The task record the coordinator writes for ``statement``, as a worker decodes it."""
    ctx = Context(now_ms=1, coordinator_epoch=1, table_exists=lambda t: warehouse.table_exists(settings, t))
    effects = handle_ddl(parse_statement(statement), {}, ctx)
    assert effects.results[0]["accepted"], effects.results
    (task,) = effects.catalog.values()
    assert task is not None
    codec = get_codec()
    return codec.decode(codec.encode("TaskRecord", task))[1]


def test_runs_use_the_plan_from_the_record_and_never_parse(
    spark: Any, local_settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    s = local_settings
    create_table(spark, s, "sales", rows(0, 12), SCHEMA)
    create_mv_log(spark, s, "sales")
    tasks = {
        "fast": _accepted(s, f"CREATE MATERIALIZED VIEW fast REFRESH FAST ON DEMAND AS {BY_REGION}"),
        "ranked": _accepted(s, f"CREATE MATERIALIZED VIEW ranked REFRESH FORCE ON DEMAND AS {RANKED}"),
        "whole": _accepted(s, f"CREATE MATERIALIZED VIEW whole REFRESH COMPLETE ON DEMAND AS {BY_REGION}"),
    }
    assert tasks["fast"]["mv"]["plan"]["fast_refresh"]["kind"] == "aggregate"
    assert "window functions" in tasks["ranked"]["mv"]["plan"]["fast_reason"]
    runner = SparkRunner(s, lambda _: spark)  # the session the tests share
    seen: list[str] = []

    def refuse(self: Any, raw_tokens: Any, sql: str | None = None) -> Any:
        seen.append(sql or "")
        raise AssertionError(f"sqlglot parsed {sql!r} during a run")

    monkeypatch.setattr(sqlglot.parser.Parser, "parse", refuse)

    def run(name: str, run_id: str) -> str:
        """The message of a completed run of MV ``name``."""
        task = with_plan(tasks[name])  # what the maintainer does once per task: a no-op here
        assert task is tasks[name]
        result = runner.refresh(task, run_id=run_id, job_group=f"{name}-{run_id}")
        assert result.state == "COMPLETED" and result.message is not None, result
        return result.message

    assert run("fast", "r1").startswith("complete: first build; wrote")
    not_fast = "complete: fast refresh is not possible: window functions are not supported; wrote"
    assert run("ranked", "r1").startswith(not_fast)
    assert run("whole", "r1").startswith("complete: refresh mode COMPLETE; wrote")

    append(spark, s, "sales", rows(100, 5))
    assert run("fast", "r2").startswith("incremental: 5 change rows applied")
    assert run("ranked", "r2").startswith(not_fast)
    assert run("whole", "r2").startswith("complete: refresh mode COMPLETE; wrote")
    skipped = runner.refresh(tasks["fast"], run_id="r3", job_group="fast-r3")
    assert (skipped.state, skipped.message) == ("SKIPPED", "skipped: no change")
    assert seen == []
    monkeypatch.undo()  # the check below is what a user would do, not a run
    for name, query in (("fast", BY_REGION), ("ranked", RANKED), ("whole", BY_REGION)):
        assert mv_rows(spark, s, name) == query_rows(spark, s, query), name
