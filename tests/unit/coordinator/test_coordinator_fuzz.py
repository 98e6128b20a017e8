"""Property tests: whatever a producer writes, the coordinator's decisions answer and stay safe.

Sequences of arbitrary DdlEvents and Heartbeats (every action; names valid, empty, with path
characters, huge, unicode, upper-case; arbitrary MV and MV-log specs; queries from a pool that
includes garbage) go through the real ``handle_ddl`` / ``handle_heartbeat`` against a catalog built
from the records they accepted before. Events that fit the schema are round-tripped through the real
codec first, so the handler sees exactly what the coordinator decodes; some lose a field on top.

``HYPOTHESIS_PROFILE=long`` runs thousands of sequences (tests/conftest.py).
"""

from __future__ import annotations

import copy
import functools
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from workers.catalog.names import MLOG_SUFFIX, mv_log_table_problem, mv_name_problem, name_problem
from workers.catalog.specs import MAX_INTERVAL_MS, mv_cycle
from workers.codec import get_codec
from workers.coordinator.handlers import Context, Effects, handle_ddl, handle_heartbeat, recovered_tasks
from workers.records import Record

BASE_TABLES = frozenset({"sales", "orders"})
ACTIONS = tuple(get_codec().schema("io.mvs.DdlAction")["symbols"])  # every action the schema allows
PRINCIPALS = ("User:alice", "User:bob", "User:admin", "")
VALID_NAMES = ("a", "b", "v", "by_region", "sales", "orders", "_x1", "v" * 128)
ODD_NAMES = (
    "",
    "../x",
    "a/b",
    "a\\b",
    "/etc/passwd",
    "a.b",
    "a b",
    "a\x00b",
    "x" * 129,
    "x" * 10_000,
    "vü",
    "名前",
    "Sales",
    "BY_REGION",
    "1abc",
    "sales" + MLOG_SUFFIX,
    "..",
    ".",
)
QUERIES = (
    "SELECT id FROM sales",
    "SELECT region, sum(amount) AS total FROM sales GROUP BY region",
    "SELECT s.id FROM sales s JOIN orders o ON s.id = o.id",
    "SELECT * FROM a",
    "SELECT * FROM b",
    "SELECT * FROM v",
    "SELECT * FROM nowhere",
    "SELECT * FROM `../x`",
    "SELECT * FROM `a/b`",
    "SELECT * FROM Sales",
    "DROP TABLE sales",
    "INSERT INTO sales VALUES (1)",
    "SELECT 1; DROP TABLE sales",
    "garbage (((",
    "",
    "   ",
    "SELECT " + "(" * 300 + "1" + ")" * 300 + " FROM sales",
    "WITH v AS (SELECT id FROM sales) SELECT * FROM v",
)
SQL_TEXTS = (
    None,
    "ALTER MATERIALIZED VIEW v REFRESH EVERY 5 SECONDS",
    "ALTER MATERIALIZED VIEW v REFRESH FAST",
    "CREATE MATERIALIZED VIEW v AS SELECT 1",
    "garbage",
    "",
)


def mostly(common: st.SearchStrategy[Any], rare: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    """``common`` three times in four: enough valid input gets through to build a catalog."""
    return st.integers(0, 3).flatmap(lambda i: rare if i == 3 else common)  # 0 is the simplest draw


names = mostly(st.sampled_from(VALID_NAMES), st.one_of(st.sampled_from(ODD_NAMES), st.text(max_size=12)))
longs = st.integers(min_value=-(2**63), max_value=2**63 - 1)
intervals = mostly(
    st.sampled_from([1, 1000, 60_000, MAX_INTERVAL_MS]),
    st.one_of(st.none(), st.sampled_from([0, -1, MAX_INTERVAL_MS + 1, 2**63 - 1, -(2**63)]), longs),
)
triggers = st.fixed_dictionaries(
    {"kind": st.sampled_from(["EVERY", "ON_CHANGE", "ON_DEMAND", "TARGET_LAG"]), "interval_ms": intervals}
)
mv_specs = st.fixed_dictionaries(
    {
        "query": mostly(st.sampled_from(QUERIES), st.text(max_size=30)),
        "refresh_mode": st.sampled_from(["COMPLETE", "FAST", "FORCE"]),
        "trigger": triggers,
        "base_tables": st.lists(names, max_size=3),
    }
)
mv_log_specs = st.fixed_dictionaries(
    {"base_table": names, "purge_interval_ms": intervals.filter(lambda v: v is not None)}
)
any_ddl_events = st.fixed_dictionaries(
    {
        "schema_version": mostly(st.just(1), st.integers(-(2**31), 2**31 - 1)),
        "event_id": mostly(st.uuids().map(str), st.just("")),
        "issued_at": longs,
        "issued_by": st.sampled_from(PRINCIPALS),
        "action": st.sampled_from(ACTIONS),
        "name": names,
        "mv": mostly(mv_specs, st.none()),
        "mv_log": mostly(st.none(), mv_log_specs),
        "sql": st.sampled_from(SQL_TEXTS),
    }
)
# Events a careful producer could send: valid names and specs, queries over base tables and MVs. They
# build the catalog deep enough (MVs over MVs, logs, alters) for the refusals that matter to be tried:
# an MV over a base table's name, a cycle through an ALTER, an MV log on an MV.
PLAUSIBLE_QUERIES = tuple(f"SELECT * FROM {t}" for t in ("sales", "orders", "a", "b", "v", "by_region"))
plausible_ddl_events = st.fixed_dictionaries(
    {
        "schema_version": st.just(1),
        "event_id": st.uuids().map(str),
        "issued_at": st.just(0),
        "issued_by": st.sampled_from(PRINCIPALS),
        "action": st.sampled_from(ACTIONS),
        "name": st.sampled_from(VALID_NAMES),
        "mv": st.fixed_dictionaries(
            {
                "query": st.sampled_from(PLAUSIBLE_QUERIES),
                "refresh_mode": st.sampled_from(["COMPLETE", "FORCE"]),
                "trigger": st.sampled_from(
                    [{"kind": "ON_DEMAND", "interval_ms": None}, {"kind": "EVERY", "interval_ms": 1000}]
                ),
                "base_tables": st.just([]),
            }
        ),
        "mv_log": st.none(),
        "sql": st.none(),
    }
)
ddl_events = st.one_of(plausible_ddl_events, any_ddl_events)
run_summaries = st.fixed_dictionaries(
    {
        "run_id": st.text(max_size=8),
        "trigger": st.sampled_from(["SCHEDULE", "MANUAL", ""]),
        "state": st.sampled_from(["PENDING", "RUNNING", "COMPLETED", "ERROR", "CANCELED", "SKIPPED"]),
        "started_at": longs,
        "ended_at": st.one_of(st.none(), longs),
        "rows_written": st.one_of(st.none(), longs),
        "message": st.one_of(st.none(), st.text(max_size=20)),
    }
)
task_errors = st.fixed_dictionaries(
    {
        "code": st.integers(-(2**31), 2**31 - 1),
        "message": st.text(max_size=20),
        "severity": st.sampled_from(["INFO", "WARN", "ERROR", "FATAL"]),
        "retryable": st.booleans(),
        "at": longs,
    }
)
STATES = ("NORMAL", "WARNING", "FAILED", "PAUSED", "FINISHED")

codec = get_codec()


def decoded(record_type: str, record: Record) -> Record:
    """``record`` as the coordinator gets it off the bus: encoded and decoded by the real codec."""
    name, value = codec.decode(codec.encode(record_type, record))
    assert name == f"io.mvs.{record_type}"
    return value


class World:
    """The catalog built from accepted records, and the warehouse: base tables plus MV tables."""

    def __init__(self) -> None:
        self.tasks: dict[str, Record] = {}
        self.tables: set[str] = set(BASE_TABLES)
        self.now = 1_000

    def ctx(self, owner_rule: bool) -> Context:
        def table_exists(name: str) -> bool:
            assert name_problem(name, "table") is None, f"table_exists called with unchecked {name[:40]!r}"
            return name in self.tables

        self.now += 1
        return Context(
            now_ms=self.now,
            coordinator_epoch=7,
            table_exists=table_exists,
            owner_rule=owner_rule,
            admin_principals=frozenset({"User:admin"}),
        )

    def apply(self, effects: Effects) -> None:
        for task_id, task in effects.catalog.items():
            if task is None:
                dropped = self.tasks.pop(task_id)
                if dropped["kind"] == "MV":
                    self.tables.discard(dropped["name"])
            else:
                assert_encodes("TaskRecord", task)
                if task["kind"] == "MV":
                    self.tables.add(task["name"])  # as after its first refresh
                self.tasks[task_id] = task
        for command in effects.manager:
            assert_encodes("ManagerCommand", command)
        for command in effects.maintainer:
            assert_encodes("MaintainerCommand", command)

    def check_invariants(self) -> None:
        mv_reads = {t["name"]: t["mv"]["base_tables"] for t in self.tasks.values() if t["kind"] == "MV"}
        for task_id, task in self.tasks.items():
            if task["kind"] == "MV":
                assert task_id == f"mv:{task['name']}"
                assert mv_name_problem(task["name"]) is None
                assert task["name"] not in BASE_TABLES, "an MV took a base table's name"
                assert mv_cycle(task["name"], task["mv"]["base_tables"], mv_reads) is None
                trigger = task["mv"]["trigger"]
                if trigger["kind"] in ("EVERY", "TARGET_LAG"):
                    assert 0 < trigger["interval_ms"] <= MAX_INTERVAL_MS
                else:
                    assert trigger["interval_ms"] is None
            else:
                assert task_id == f"mvlog:{task['name']}"
                assert mv_log_table_problem(task["name"]) is None
                assert task["mv_log"]["base_table"] == task["name"]
                assert 0 < task["mv_log"]["purge_interval_ms"] <= MAX_INTERVAL_MS


def assert_encodes(record_type: str, record: Record) -> None:
    codec.encode(record_type, record)


def heartbeat(data: st.DataObject, world: World) -> Record:
    known = sorted(world.tasks) or ["mv:ghost"]

    def status() -> Record:
        task_id = data.draw(st.one_of(st.sampled_from(known), names.map(lambda n: f"mv:{n}")))
        epoch = world.tasks[task_id]["epoch"] if task_id in world.tasks and data.draw(st.booleans()) else 0
        return {
            "task_id": task_id,
            "epoch": data.draw(st.one_of(st.just(epoch), longs)),
            "state": data.draw(st.sampled_from(STATES)),
            "checkpoint": data.draw(st.dictionaries(names, longs, max_size=3)),
            "last_run": data.draw(st.one_of(st.none(), run_summaries)),
            "next_run_at": data.draw(st.one_of(st.none(), longs)),
            "error": data.draw(st.one_of(st.none(), task_errors)),
        }

    return {
        "worker_id": data.draw(st.sampled_from(["w1", "w2", ""])),
        "sent_at": data.draw(longs),
        "coordinator_epoch": 7,
        "full": data.draw(st.booleans()),
        "statuses": [status() for _ in range(data.draw(st.integers(0, 3)))],
        "removed": data.draw(st.lists(st.text(max_size=5), max_size=2)),
    }


def check_ddl_answer(event: Record, effects: Effects, *, schema_valid: bool) -> None:
    assert len(effects.results) == 1, "exactly one DdlResult per event"
    result = effects.results[0]
    assert_encodes("DdlResult", result)
    event_id = event.get("event_id")
    assert result["event_id"] == (event_id if isinstance(event_id, str) else "")
    if not result["accepted"]:
        assert not effects.catalog and not effects.manager and not effects.maintainer, (
            "a refusal leaves nothing"
        )
        if schema_valid:
            assert not result["error"]["message"].startswith("internal error"), result["error"]["message"]
    elif event["action"] in ("CREATE_MV", "CREATE_MV_LOG"):
        assert list(effects.catalog) == [result["task_id"]]


@given(st.data(), st.booleans())
def test_any_sequence_of_ddl_and_heartbeats_is_answered_and_keeps_the_catalog_safe(
    data: st.DataObject, owner_rule: bool
) -> None:
    world = seeded_world(data.draw(st.integers(0, len(SEED)), label="seed tasks"))
    for _ in range(data.draw(st.integers(1, 20), label="steps")):
        if world.tasks and data.draw(st.integers(0, 3)) == 0:
            beat = decoded("Heartbeat", heartbeat(data, world))
            effects = handle_heartbeat(beat, world.tasks, world.ctx(owner_rule))
            assert not effects.results
            recovered_tasks(beat, {task_id: 0 for task_id in world.tasks})
        else:
            event = data.draw(ddl_events)
            if world.tasks and data.draw(st.booleans()):  # aim at a task that exists
                event["name"] = data.draw(st.sampled_from(sorted(t["name"] for t in world.tasks.values())))
            event = decoded("DdlEvent", event)
            schema_valid = True
            if data.draw(st.integers(0, 9)) == 9:  # a producer that is not even schema-valid
                del event[data.draw(st.sampled_from(sorted(event)))]
                schema_valid = False
            effects = handle_ddl(event, world.tasks, world.ctx(owner_rule))
            check_ddl_answer(event, effects, schema_valid=schema_valid)
        world.apply(effects)
        world.check_invariants()


@given(st.data())
def test_arbitrary_heartbeats_never_raise_and_write_only_encodable_records(data: st.DataObject) -> None:
    world = seeded_world(len(SEED))
    for _ in range(data.draw(st.integers(1, 6))):
        beat = heartbeat(data, world)
        if data.draw(st.integers(0, 4)) == 4:  # fields missing (not schema-valid)
            del beat[data.draw(st.sampled_from(sorted(beat)))]
        else:
            beat = decoded("Heartbeat", beat)
        world.apply(handle_heartbeat(beat, world.tasks, world.ctx(False)))
        world.check_invariants()


def _spec(query: str) -> Record:
    return {
        "query": query,
        "refresh_mode": "COMPLETE",
        "trigger": {"kind": "EVERY", "interval_ms": 60_000},
        "base_tables": [],
    }


# A catalog to start from (by User:alice): MVs over a base table and over another MV, an MV log.
SEED: tuple[Record, ...] = (
    {"action": "CREATE_MV", "name": "a", "mv": _spec("SELECT id FROM sales")},
    {"action": "CREATE_MV", "name": "b", "mv": _spec("SELECT * FROM a")},
    {
        "action": "CREATE_MV_LOG",
        "name": "sales",
        "mv_log": {"base_table": "sales", "purge_interval_ms": 1000},
    },
    {"action": "CREATE_MV", "name": "by_region", "mv": _spec(QUERIES[1])},
)


def seeded_world(count: int) -> World:
    """A world holding the first ``count`` SEED tasks (built once per count, then copied)."""
    world = World()
    tasks, tables = _seeded(count)
    world.tasks, world.tables = copy.deepcopy(tasks), set(tables)
    return world


@functools.cache
def _seeded(count: int) -> tuple[dict[str, Record], frozenset[str]]:
    world = World()
    for number, statement in enumerate(SEED[:count]):
        event = {
            "schema_version": 1,
            "event_id": f"seed-{number}",
            "issued_at": 0,
            "issued_by": "User:alice",
            "mv": None,
            "mv_log": None,
            "sql": None,
            **statement,
        }
        effects = handle_ddl(event, world.tasks, world.ctx(False))
        assert effects.results[0]["accepted"], effects.results
        world.apply(effects)
    return world.tasks, frozenset(world.tables)
