"""Freshness goals: the FRESHNESS clause, the coordinator's pure decision driven by a clock, and its
events and gauges from ``Coordinator.step()`` over the in-memory bus (the real broker, Spark and
Delta: tests/integration/test_freshness_events.py)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from tests.support.coordinator_cases import CREATE, apply, refusal
from tests.support.memory_bus import MemoryBus
from workers.catalog.errors import MvsError
from workers.catalog.specs import checked_mv_spec
from workers.config import Settings
from workers.coordinator.freshness import FreshnessWatch
from workers.coordinator.service import Coordinator
from workers.ddl import DdlSyntaxError, apply_alter
from workers.ddl.parser import parse_statement
from workers.freshness import Goal, WarehouseCommits, behind_since, freshness_goal, missed_versions
from workers.sched.clock import ManualClock
from workers.sched.metrics import SchedMetrics
from workers.worker.host import claim

QUERY = "SELECT region, sum(amount) AS total FROM sales GROUP BY region"
T0 = 1_700_000_000_000


# -- the clause ------------------------------------------------------------------------------------
def test_create_takes_an_optional_freshness_goal() -> None:
    event = parse_statement(
        f"CREATE MATERIALIZED VIEW v REFRESH FAST ON CHANGE FRESHNESS 5 MINUTES AS {QUERY}"
    )
    assert event["mv"]["freshness_ms"] == 300_000 and event["mv"]["trigger"]["kind"] == "ON_CHANGE"
    plain = parse_statement(f"CREATE MATERIALIZED VIEW v AS {QUERY}")
    assert "freshness_ms" not in plain["mv"], "absent: the record's default (null)"


@pytest.mark.parametrize("clause", ["FRESHNESS 0 SECONDS", "FRESHNESS", "FRESHNESS 5 FORTNIGHTS"])
def test_a_bad_freshness_is_a_syntax_error(clause: str) -> None:
    with pytest.raises(DdlSyntaxError):
        parse_statement(f"CREATE MATERIALIZED VIEW v {clause} AS {QUERY}")


def altered(current: dict[str, Any], sql: str) -> dict[str, Any]:
    return apply_alter(current, parse_statement(sql))


def test_alter_changes_the_goal_only_when_it_says_so() -> None:
    current = checked_mv_spec(
        parse_statement(f"CREATE MATERIALIZED VIEW v FRESHNESS 1 HOUR AS {QUERY}")["mv"]
    )
    assert current["freshness_ms"] == 3_600_000
    assert altered(current, "ALTER MATERIALIZED VIEW v EVERY 5 MINUTES")["freshness_ms"] == 3_600_000
    changed = altered(current, "ALTER MATERIALIZED VIEW v FRESHNESS 30 SECONDS")
    assert changed["freshness_ms"] == 30_000 and changed["trigger"] == current["trigger"]
    assert (
        altered(current, "ALTER MATERIALIZED VIEW v REFRESH COMPLETE FRESHNESS NONE").get("freshness_ms")
        is None
    )


def test_a_raw_event_s_goal_is_checked_like_an_interval() -> None:
    spec = parse_statement(f"CREATE MATERIALIZED VIEW v AS {QUERY}")["mv"]
    with pytest.raises(MvsError, match="FRESHNESS interval must be greater than zero"):
        checked_mv_spec({**spec, "freshness_ms": -1})
    assert checked_mv_spec(spec)["freshness_ms"] is None


def test_the_coordinator_keeps_the_goal_and_refuses_the_fleet_s_table_names() -> None:
    tasks: dict[str, Any] = {}
    apply(CREATE.replace(" AS ", " FRESHNESS 2 MINUTES AS ", 1), tasks)
    assert tasks["mv:by_region"]["mv"]["freshness_ms"] == 120_000
    apply("ALTER MATERIALIZED VIEW by_region EVERY 1 MINUTE", tasks)
    assert tasks["mv:by_region"]["mv"]["freshness_ms"] == 120_000
    apply("ALTER MATERIALIZED VIEW by_region FRESHNESS NONE", tasks)
    assert tasks["mv:by_region"]["mv"]["freshness_ms"] is None
    for reserved in ("mvs_refresh_history", "mvs_tasks"):
        error = refusal(apply(CREATE.replace("by_region", reserved, 1), tasks))
        assert error["code"] == 1001 and "reserved" in error["message"]


# -- the decision ----------------------------------------------------------------------------------
class Commits:
    """Base tables' Delta logs: versions committed at given wall times."""

    def __init__(self) -> None:
        self.times: dict[str, list[int]] = {"sales": [T0 - 60_000]}  # v0

    def commit(self, table: str, at_ms: int) -> int:
        self.times.setdefault(table, []).append(at_ms)
        return len(self.times[table]) - 1

    def latest_version(self, table: str) -> int | None:
        return len(self.times[table]) - 1 if table in self.times else None

    def commit_ms(self, table: str, version: int) -> int | None:
        return self.times[table][version]


def mv_task(
    checkpoint: dict[str, int], *, freshness_ms: int | None = 10_000, trigger: Any = None
) -> dict[str, Any]:
    mv = {
        "query": QUERY,
        "refresh_mode": "COMPLETE",
        "trigger": trigger or {"kind": "ON_DEMAND", "interval_ms": None},
        "base_tables": ["sales"],
        "freshness_ms": freshness_ms,
    }
    return {
        "task_id": "mv:v",
        "name": "v",
        "kind": "MV",
        "mv": mv,
        "checkpoint": checkpoint,
        "created_at": T0,
    }


def test_the_goal_is_freshness_else_the_target_lag() -> None:
    lag = {"kind": "TARGET_LAG", "interval_ms": 60_000}
    assert freshness_goal(mv_task({}, trigger=lag)) == Goal(10_000, "FRESHNESS")
    assert freshness_goal(mv_task({}, freshness_ms=None, trigger=lag)) == Goal(60_000, "TARGET_LAG")
    assert freshness_goal(mv_task({}, freshness_ms=None)) is None
    assert freshness_goal({"kind": "MV_LOG", "mv": None}) is None


def since(task: dict[str, Any], commits: Commits) -> int | None:
    return behind_since(task, missed_versions(task, commits), commits)


def test_lag_is_the_age_of_the_oldest_commit_the_mv_misses() -> None:
    commits = Commits()
    assert since(mv_task({"sales": 0}), commits) is None
    commits.commit("sales", T0 + 5_000)
    commits.commit("sales", T0 + 9_000)
    assert since(mv_task({"sales": 0}), commits) == T0 + 5_000
    assert since(mv_task({"sales": 1}), commits) == T0 + 9_000
    assert since(mv_task({}), commits) == T0, "never refreshed: behind since its creation"


def test_stale_once_past_the_goal_then_recovered_once_caught_up() -> None:
    commits, watch = Commits(), FreshnessWatch()
    tasks = {"mv:v": mv_task({"sales": 0})}
    assert watch.check(tasks, commits, T0, 1) == []
    commits.commit("sales", T0 + 1_000)
    assert watch.check(tasks, commits, T0 + 11_000, 1) == [], "exactly the goal is still fresh"
    (stale,) = watch.check(tasks, commits, T0 + 11_001, 1)
    assert (stale["state"], stale["lag_ms"], stale["behind_since"], stale["goal_source"]) == (
        "STALE",
        10_001,
        T0 + 1_000,
        "FRESHNESS",
    )
    assert watch.check(tasks, commits, T0 + 20_000, 1) == [], "announced once"
    assert [(g.task_id, g.stale, g.lag_s) for g in watch.gauges()] == [("mv:v", True, 19.0)]
    tasks = {"mv:v": mv_task({"sales": 1})}
    (recovered,) = watch.check(tasks, commits, T0 + 21_000, 1)
    assert (recovered["state"], recovered["lag_ms"], recovered["checkpoint"]) == (
        "RECOVERED",
        0,
        {"sales": 1},
    )
    assert watch.check({}, commits, T0 + 22_000, 1) == [] and list(watch.gauges()) == []


def test_a_stale_mv_whose_base_is_gone_is_not_declared_recovered() -> None:
    commits, watch = Commits(), FreshnessWatch()
    commits.commit("sales", T0)
    tasks = {"mv:v": mv_task({"sales": 0})}
    assert [e["state"] for e in watch.check(tasks, commits, T0 + 60_000, 1)] == ["STALE"]
    del commits.times["sales"]
    assert watch.check(tasks, commits, T0 + 61_000, 1) == []
    assert [(g.stale, g.lag_s) for g in watch.gauges()] == [(True, 60.0)], "the last decision stays"


def test_a_coordinator_that_takes_over_announces_only_what_is_stale() -> None:
    commits = Commits()
    commits.commit("sales", T0)
    tasks = {"mv:v": mv_task({"sales": 0}), "mv:w": {**mv_task({"sales": 1}), "task_id": "mv:w"}}
    events = FreshnessWatch().check(tasks, commits, T0 + 60_000, 2)
    assert [(e["task_id"], e["state"]) for e in events] == [("mv:v", "STALE")]


def test_commit_times_are_read_from_the_log_once() -> None:
    reads: list[tuple[str, int]] = []

    def read_commit(table: str, version: int) -> list[dict[str, Any]]:
        reads.append((table, version))
        return [{"commitInfo": {"timestamp": 42}}, {"add": {}}]

    commits = WarehouseCommits(lambda table: 3, read_commit)
    assert commits.commit_ms("sales", 2) == commits.commit_ms("sales", 2) == 42 and reads == [("sales", 2)]


# -- the coordinator -------------------------------------------------------------------------------
SETTINGS = Settings(bootstrap_servers="127.0.0.1:1", namespace="unit")


class World:
    def __init__(self) -> None:
        self.bus = MemoryBus()
        self.clock = ManualClock(start=0.0, wall_start_ms=T0)
        self.commits = Commits()
        self.metrics = SchedMetrics()
        self.coordinator = Coordinator(
            SETTINGS,
            bus=self.bus,
            clock=self.clock,
            table_exists_fn=lambda name: name == "sales",
            base_commits=self.commits,
            metrics=self.metrics,
        )
        self.coordinator.start()
        self.bus.assign(SETTINGS.group("coordinator"), "ddl", [0])
        self.coordinator.step(0)

    def sql(self, statement: str) -> None:
        event = parse_statement(statement, issued_by="User:alice")
        self.bus.publish("ddl", event["event_id"], event)
        self.coordinator.step(0)

    def report(self, status: dict[str, Any]) -> None:
        heartbeat = {
            "worker_id": "w1",
            "sent_at": self.clock.wall_ms(),
            "coordinator_epoch": self.coordinator.coordinator_epoch,
            "full": False,
            "statuses": [status],
            "removed": [],
            "loop_error": None,
        }
        self.bus.publish("coordinator", "w1", heartbeat)

    def events(self) -> list[tuple[str, str]]:
        return [(e["task_id"], e["state"]) for e in self.bus.records("freshness")]

    def sample(self, name: str) -> float | None:
        return self.metrics.registry.get_sample_value(name, {"task_id": "mv:v"})


@pytest.fixture
def w() -> Iterator[World]:
    world = World()
    yield world
    world.coordinator.close()


def test_the_coordinator_publishes_stale_then_recovered_and_sets_the_gauge(w: World) -> None:
    w.sql(f"CREATE MATERIALIZED VIEW v REFRESH COMPLETE ON DEMAND FRESHNESS 10 SECONDS AS {QUERY}")
    w.report(claim(w.coordinator.tasks["mv:v"]))
    w.coordinator.step(0)
    owned = w.coordinator.tasks["mv:v"]
    w.report({**claim(owned), "checkpoint": {"sales": 0}})  # its first refresh
    w.clock.advance(1)
    w.coordinator.step(0)
    assert w.events() == [] and w.sample("mvs_mv_stale") == 0.0
    w.commits.commit("sales", w.clock.wall_ms())  # the base moves; no refresh follows
    for _ in range(10):
        w.clock.advance(1)
        w.coordinator.step(0)
    assert w.events() == [], "10 s behind is within the goal"
    w.clock.advance(1.5)
    w.coordinator.step(0)
    w.clock.advance(1)
    w.coordinator.step(0)  # the batched effects go out
    assert w.events() == [("mv:v", "STALE")] and w.sample("mvs_mv_stale") == 1.0
    assert w.sample("mvs_mv_freshness_lag_seconds") == pytest.approx(11.5, abs=1.1)
    w.report({**claim(owned), "checkpoint": {"sales": 1}})  # caught up
    for _ in range(3):
        w.clock.advance(1)
        w.coordinator.step(0)
    assert w.events() == [("mv:v", "STALE"), ("mv:v", "RECOVERED")] and w.sample("mvs_mv_stale") == 0.0
    assert events_counted(w) == {"STALE": 1.0, "RECOVERED": 1.0}


def events_counted(w: World) -> dict[str, float | None]:
    return {
        state: w.metrics.registry.get_sample_value("mvs_freshness_events_total", {"state": state})
        for state in ("STALE", "RECOVERED")
    }
