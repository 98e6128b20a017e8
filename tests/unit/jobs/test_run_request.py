"""The query analysis travels with the task (``MvSpec.plan``), a run's parameters are one
``RunRequest``, and one function decides skip / incremental / complete."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from dataclasses import replace
from typing import Any

import pytest
import sqlglot.parser

from tests.support.change_sizes import size
from tests.support.maintainer_harness import WAIT, Harness, mv
from tests.support.paths import AVRO_FIXTURES as FIXTURES
from workers.codec import get_codec
from workers.coordinator.handlers import Context, handle_ddl
from workers.ddl import QueryPlan, analyze_query, parse_statement, plan_from_record, plan_record
from workers.jobs.request import RunRequest, with_plan
from workers.worker.costs import CostModel, TechniqueCost
from workers.worker.decision import DecisionKind, decide, unchanged
from workers.worker.planning import FAST_UNCHECKED

QUERIES = [
    "SELECT s.region, SUM(amount) AS total, COUNT(*) AS n, MIN(amount) AS lo FROM sales s "
    "WHERE s.amount > 0 AND region <> 'it''s' GROUP BY s.region",
    "SELECT id, amount * 2 AS double FROM sales WHERE amount IS NOT NULL",
    "SELECT region FROM sales LIMIT 10",
    "SELECT a.id FROM sales a JOIN orders b ON a.id = b.id",
]


@pytest.fixture
def parses(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """The SQL of every sqlglot parse from now on."""
    seen: list[str] = []
    original = sqlglot.parser.Parser.parse

    def counting(self: Any, raw_tokens: Any, sql: str | None = None) -> Any:
        seen.append(sql or "")
        return original(self, raw_tokens, sql)

    monkeypatch.setattr(sqlglot.parser.Parser, "parse", counting)
    yield seen


# -- the plan in the record --------------------------------------------------------------------------
@pytest.mark.parametrize("query", QUERIES)
def test_the_plan_survives_the_wire(query: str) -> None:
    plan = analyze_query(query).plan
    spec = {
        "query": query,
        "refresh_mode": "FORCE",
        "trigger": {"kind": "ON_DEMAND", "interval_ms": None},
        "base_tables": ["sales"],
        "plan": plan_record(plan),
    }
    codec = get_codec()
    _, decoded = codec.decode(codec.encode("MvSpec", spec))
    assert plan_from_record(decoded["plan"]) == plan


def test_a_task_record_from_before_plans_decodes_without_one_and_gets_one_once(parses: list[str]) -> None:
    _, old = get_codec().decode((FIXTURES / "TaskRecord.bin").read_bytes())
    assert old["mv"]["plan"] is None
    assert old == json.loads((FIXTURES / "TaskRecord.json").read_text())
    planned = with_plan(old)
    assert planned["mv"]["plan"]["fast_refresh"]["kind"] == "aggregate"
    assert parses.count(old["mv"]["query"]) == 1
    assert with_plan(planned) is planned and parses.count(old["mv"]["query"]) == 1


def test_a_plan_kind_this_worker_does_not_know_is_refreshed_completely() -> None:
    record = plan_record(analyze_query(QUERIES[1]).plan)
    record["fast_refresh"]["kind"] = "join"
    plan = plan_from_record(record)
    assert plan.fast_refresh is None and "kind join" in plan.fast_reason


def test_a_query_that_no_longer_passes_is_refreshed_completely_where_spark_refuses_it() -> None:
    task = mv("bad")
    task["mv"]["query"] = "SELECT reflect('java.lang.Runtime', 'getRuntime') AS r FROM t"
    plan = with_plan(task)["mv"]["plan"]
    assert plan["fast_refresh"] is None
    assert plan["fast_reason"].startswith("the query cannot be analysed: function reflect() is not allowed")


# -- the coordinator stores it -----------------------------------------------------------------------
CTX = Context(now_ms=1, coordinator_epoch=1, table_exists=lambda table: table == "sales")


def _apply(statement: str, tasks: dict[str, Any], **mv_fields: Any) -> dict[str, Any]:
    event = parse_statement(statement)
    if mv_fields:
        event["mv"] = {**event["mv"], **mv_fields}
    effects = handle_ddl(event, tasks, CTX)
    assert effects.results[0]["accepted"], effects.results
    tasks.update({k: v for k, v in effects.catalog.items() if v is not None})
    return tasks["mv:v"]


def test_the_coordinator_stores_its_analysis_and_ignores_a_producers() -> None:
    query = QUERIES[1]
    forged = plan_record(QueryPlan(None, "forged"))
    tasks: dict[str, Any] = {}
    task = _apply(f"CREATE MATERIALIZED VIEW v REFRESH FAST AS {query}", tasks, plan=forged)
    assert plan_from_record(task["mv"]["plan"]) == analyze_query(query).plan
    # ALTER of mode or trigger keeps the plan; a record from before plans gets one.
    tasks["mv:v"] = {**task, "mv": {**task["mv"], "plan": None}}
    altered = _apply("ALTER MATERIALIZED VIEW v REFRESH FORCE EVERY 5 MINUTES", tasks)
    assert altered["mv"]["plan"] == task["mv"]["plan"] and altered["epoch"] == task["epoch"] + 1


def test_alter_to_fast_is_checked_against_the_stored_analysis(parses: list[str]) -> None:
    tasks: dict[str, Any] = {}
    _apply(f"CREATE MATERIALIZED VIEW v REFRESH FORCE AS {QUERIES[2]}", tasks)
    before = parses.count(QUERIES[2])  # mvs sql checks the query, the coordinator analyses it
    effects = handle_ddl(parse_statement("ALTER MATERIALIZED VIEW v REFRESH FAST"), tasks, CTX)
    (result,) = effects.results
    assert not result["accepted"] and "LIMIT without ORDER BY" in result["error"]["message"]
    assert parses.count(QUERIES[2]) == before


# -- the request -------------------------------------------------------------------------------------
def _request(
    mode: str = "FORCE", query: str = QUERIES[1], pinned: dict[str, int] | None = None
) -> RunRequest:
    task = with_plan({**mv("v"), "mv": {**mv("v")["mv"], "query": query, "refresh_mode": mode}})
    return RunRequest.for_task(task, run_id="r1", job_group="mvs-r1", pinned=pinned or {"sales": 5})


def test_a_request_is_immutable_and_carries_the_plan() -> None:
    request = _request()
    assert request.plan == analyze_query(QUERIES[1]).plan and request.watermark == {"sales": 5}
    with pytest.raises(AttributeError):
        request.epoch = 2  # type: ignore[misc]
    with pytest.raises(TypeError):
        request.pinned["sales"] = 6  # type: ignore[index]


# -- the decision ------------------------------------------------------------------------------------
def _never() -> str | None:
    raise AssertionError("the Delta-side check was not needed")


def _clear() -> str | None:
    return None


@pytest.mark.parametrize(
    ("mode", "query", "reflected", "blocker", "expected"),
    [
        ("FORCE", QUERIES[1], {"sales": 5}, _never, (DecisionKind.SKIP, "skipped: no change")),
        ("COMPLETE", QUERIES[1], {"sales": 5}, _never, (DecisionKind.SKIP, "skipped: no change")),
        (
            "COMPLETE",
            QUERIES[1],
            {"sales": 4},
            _never,
            (DecisionKind.COMPLETE, "complete: refresh mode COMPLETE"),
        ),
        (
            "FORCE",
            QUERIES[2],
            None,
            _never,
            (
                DecisionKind.COMPLETE,
                "complete: fast refresh is not possible: LIMIT without ORDER BY keeps any n rows, which "
                "no refresh can reproduce; add an ORDER BY over the output columns, drop the LIMIT "
                "(limit when reading the MV), or use REFRESH COMPLETE",
            ),
        ),
        (
            "FAST",
            QUERIES[1],
            None,
            lambda: "complete: first build",
            (DecisionKind.COMPLETE, "complete: first build"),
        ),
        (
            "FAST",
            QUERIES[1],
            {"sales": 3},
            _clear,
            (DecisionKind.INCREMENTAL, "fast: changes of sales after v3 up to v5"),
        ),
    ],
)
def test_one_decision_says_what_a_run_does_and_why(
    mode: str,
    query: str,
    reflected: dict[str, int] | None,
    blocker: Callable[[], str | None],
    expected: tuple[DecisionKind, str],
) -> None:
    decision = decide(_request(mode, query), reflected, blocker)
    assert (decision.kind, decision.reason) == expected


def test_force_checks_fast_preconditions_only_where_it_would_run_fast() -> None:
    """FAST's Delta-side check (log reads, Spark's analysis of the query) is not needed by a FORCE
    run that recomputes by cost or for a bulk change; a COMPLETE probe and a FAST run ask it, and a
    blocked FAST is recomputed saying why."""
    request, sales = _request("FORCE", QUERIES[1]), {"sales": 3}
    stateless = TechniqueCost(0.0, 0.0, 1)  # FAST keeps no helper state: nothing to rebuild
    measured = CostModel(TechniqueCost(2000.0, 0.0, 3), TechniqueCost(300.0, 0.0, 2), stateless)
    by_cost = decide(request, sales, _never, lambda: size(10, 1_000_000), measured)
    assert by_cost.kind is DecisionKind.COMPLETE and by_cost.reason.startswith("complete: cost:")
    bulk = decide(request, sales, _never, lambda: size(900_000, 1_000_000), measured)
    assert bulk.kind is DecisionKind.COMPLETE and bulk.reason.startswith("complete: bulk change")
    for unchecked in (by_cost, bulk):  # the planning says FAST was not checked, and keeps its estimate
        assert unchecked.planning is not None
        fast_candidate = unchecked.planning.record()["candidates"][0]
        assert fast_candidate["technique"] == "FAST" and fast_candidate["note"] == FAST_UNCHECKED
        assert fast_candidate["estimated_ms"] is not None
    asked: list[str] = []

    def blocked() -> str | None:
        asked.append("checked")
        return "complete: no MV log on sales"

    at_prior = CostModel(fast=TechniqueCost(800.0, 0.0, 2))  # COMPLETE never measured: a probe
    probe = decide(request, sales, blocked, lambda: size(10, 1_000_000), at_prior)
    assert probe.reason == "complete: no MV log on sales" and asked == ["checked"]
    assert probe.planning is not None and not probe.planning.probe  # not learnt as a COMPLETE probe
    cheap = replace(measured, fast=TechniqueCost(100.0, 0.0, 3))
    fast = decide(request, sales, blocked, lambda: size(10, 1_000_000), cheap)
    assert fast.reason == "complete: no MV log on sales" and asked == ["checked", "checked"]
    assert decide(request, sales, _clear, lambda: size(10, 1_000_000), cheap).kind is DecisionKind.INCREMENTAL


def test_unchanged_needs_a_known_watermark_equal_to_the_bases() -> None:
    assert unchanged({"t": 1}, None) is None and unchanged({"t": 1}, {}) is None
    assert unchanged({"t": 2}, {"t": 1}) is None
    skip = unchanged({"t": 1}, {"t": 1})
    assert skip is not None and skip.kind is DecisionKind.SKIP


# -- once per task, not per run ----------------------------------------------------------------------
def test_the_maintainer_analyses_a_record_without_plan_once_not_per_run(parses: list[str]) -> None:
    harness = Harness()
    try:
        task = mv("p", "EVERY", 1_000)
        harness.add(task)
        for version in range(2, 6):
            harness.runner.versions["t"] = version
            harness.clock.advance(1.0)
            harness.tick()
        assert harness.refreshes("mv:p") >= 4
        assert parses.count(task["mv"]["query"]) == 1
    finally:
        harness.executor.shutdown(timeout_s=WAIT)
