"""Issue 3 end to end: a fleet of real role processes (``python -m workers.cli coordinator|worker``)
on the real broker, each worker with its own Spark JVM, writing real Delta tables.

Ownership moves when a worker dies (kill -9), hangs and wakes up (SIGSTOP / SIGCONT) or leaves
(SIGTERM); a standby coordinator takes over; lifecycle preconditions reach the user as coded
errors; stale epochs are ignored.

One fleet (a namespace, a coordinator, two warm workers) serves the whole module: a worker's
Spark JVM takes ~20 s to start on a small machine, so the tests share them and each test leaves
two live workers behind (a killed one is replaced). Every test uses its own MVs and drops them.
Tests run in file order; the destructive ones come last.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.cluster import wait_until
from tests.support.cuts import inconsistent_cuts
from tests.support.fleet import (
    BIG_ROWS,
    BIG_SCHEMA,
    BY_REGION,
    ORDERS_SCHEMA,
    SLOW_QUERY,
    TERMINAL,
    Harness,
    assert_applied_once,
    big_rows,
    caught_up,
    mv_commits,
    mv_rows,
    name_on,
    order_rows,
    query_rows,
    slow_mv_running_on_owner,
    step,
)
from tests.support.processes import Fleet
from workers.cli import main as cli_main
from workers.client import StatusSnapshot
from workers.config import Settings
from workers.demo_tables import append, create_table
from workers.embedded.broker import one_broker_settings
from workers.jobs.complete import read_watermark
from workers.kafka.admin import group_owners
from workers.kafka.typed import TypedProducer, read_to_end
from workers.status import members_table, status_table
from workers.views import status_json
from workers.warehouse import latest_version, table_exists

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def fleet_settings(kafka_bootstrap: str, tmp_path_factory: pytest.TempPathFactory) -> Settings:
    return one_broker_settings(kafka_bootstrap, "fleet", tmp_path_factory.mktemp("fleet"))


@pytest.fixture(scope="module")
def harness(
    fleet_settings: Settings, spark: Any, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Harness]:
    settings = fleet_settings
    fleet = Fleet(settings, Path(tmp_path_factory.mktemp("fleet-logs")))
    h = Harness(settings, fleet, spark)
    try:
        fleet.coordinator("c1")  # the roles start while this process writes the base tables
        h.new_worker()
        h.new_worker()
        create_table(spark, settings, "big", big_rows(0, BIG_ROWS), BIG_SCHEMA)
        create_table(spark, settings, "orders", order_rows(0, 12), ORDERS_SCHEMA)
        step("fleet: base tables created")
        _warm_up(h)
        step("fleet: both workers warm")
        yield h
    finally:
        fleet.close()
        h.close()


@pytest.fixture
def h(harness: Harness) -> Iterator[Harness]:
    """The module harness; prints what the roles logged during the test (shown when it fails)."""
    sizes = {role.name: len(role.log()) for role in harness.fleet.roles}
    step("test starts")
    yield harness
    step("test ends")
    for role in harness.fleet.roles:
        text = role.log()[sizes.get(role.name, 0) :]
        print(f"===== {role.name} (pid {role.pid}, {'alive' if role.alive else 'exited'}) =====")
        print(text[-15000:])


def _warm_up(h: Harness) -> None:
    """Both workers in the group, with their Spark sessions (started at launch) up."""
    h.pair()
    step("fleet: workers share the partitions")
    for worker in h.live_workers():
        h.wait_warm(worker)


def cli(capsys: pytest.CaptureFixture[str], statement: str) -> tuple[int, str, str]:
    code = cli_main(["sql", statement, "--timeout", "60"])
    out, err = capsys.readouterr()
    return code, out.strip(), err.strip()


# -- lifecycle -------------------------------------------------------------------------------------
def test_lifecycle_preconditions_through_the_users_path(
    h: Harness, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    for key, value in {
        "MVS_BOOTSTRAP_SERVERS": h.settings.bootstrap_servers,
        "MVS_NAMESPACE": h.settings.namespace,
        "MVS_WAREHOUSE": h.settings.warehouse,
    }.items():
        monkeypatch.setenv(key, value)

    # Normal → Paused, a repeated pause is a no-op; a paused MV cannot be refreshed.
    h.ok(f"CREATE MATERIALIZED VIEW life REFRESH COMPLETE EVERY 1 SECONDS AS {BY_REGION}")
    wait_until(lambda: caught_up(h, "mv:life", "orders"), what="life refreshed")
    assert cli(capsys, "ALTER MATERIALIZED VIEW life PAUSE")[:2] == (0, "OK mv:life")
    paused = h.task("mv:life")
    assert paused is not None and paused["state"] == "PAUSED"
    assert cli(capsys, "ALTER MATERIALIZED VIEW life PAUSE")[:2] == (0, "OK mv:life")
    again = h.task("mv:life")
    assert again is not None and (again["state"], again["epoch"]) == ("PAUSED", paused["epoch"])
    assert cli(capsys, "REFRESH MATERIALIZED VIEW life") == (
        1,
        "",
        "ERROR 1001: cannot refresh a task in state PAUSED: resume the task before refreshing it",
    )

    step("A paused MV ")
    # A paused MV does not refresh after an append, while a running one (the probe) does, several
    # times: the paused one had as many chances to run.
    mark = h.mark()
    append(h.spark, h.settings, "orders", order_rows(100, 3))
    new_version = latest_version(h.settings, "orders")
    h.ok(f"CREATE MATERIALIZED VIEW probe REFRESH COMPLETE EVERY 1 SECONDS AS {BY_REGION}")
    wait_until(lambda: caught_up(h, "mv:probe", "orders"), what="probe refreshed")
    wait_until(
        lambda: len({r["run_id"] for r in h.runs_of("mv:probe", mark) if r["state"] in TERMINAL}) >= 3,
        what="the probe's next scheduled runs",
    )
    assert [r for r in h.runs_of("mv:life", mark)] == []
    assert h.task("mv:life")["checkpoint"]["orders"] < new_version  # type: ignore[index]

    step("Paused → Nor")
    # Paused → Normal; resuming a Normal MV is refused; the resumed MV catches up.
    assert cli(capsys, "ALTER MATERIALIZED VIEW life RESUME")[:2] == (0, "OK mv:life")
    assert cli(capsys, "ALTER MATERIALIZED VIEW life RESUME") == (
        1,
        "",
        "ERROR 1001: cannot resume a task in state NORMAL: "
        "only a paused, warning or failed task can be resumed",
    )
    wait_until(lambda: caught_up(h, "mv:life", "orders"), what="resumed MV refreshed")
    assert mv_rows(h, "life") == query_rows(h, BY_REGION, "orders")

    step("Warning (a r")
    # Warning (a run failed, a retry is scheduled) → Paused → Normal, and Warning → Normal.
    boom = "SELECT id, amount DIV (id - id) AS x FROM orders"  # division by zero when it runs
    h.ok(f"CREATE MATERIALIZED VIEW shaky REFRESH COMPLETE ON DEMAND AS {boom}")
    warning = wait_until(
        lambda: (t := h.task("mv:shaky")) and t["state"] == "WARNING" and t, what="shaky in WARNING"
    )
    assert warning["error"]["code"] == 2001
    assert h.sql("ALTER MATERIALIZED VIEW shaky PAUSE")["accepted"]
    assert h.task("mv:shaky")["state"] == "PAUSED"  # type: ignore[index]
    assert h.sql("ALTER MATERIALIZED VIEW shaky RESUME")["accepted"]
    resumed = wait_until(
        lambda: (t := h.task("mv:shaky")) and t["state"] == "WARNING" and t["epoch"] > warning["epoch"] and t,
        what="shaky failing again after resume",
    )
    assert h.sql("ALTER MATERIALIZED VIEW shaky RESUME")["accepted"]  # from WARNING
    after = h.task("mv:shaky")
    assert after is not None and after["epoch"] == resumed["epoch"] + 1

    step("Refused / Failed")
    # A refused CREATE leaves nothing behind.
    refused = h.sql(
        "CREATE MATERIALIZED VIEW broken REFRESH COMPLETE EVERY 1 SECONDS AS SELECT * FROM nowhere"
    )
    assert refused["error"]["code"] == 1001 and "nowhere" in refused["error"]["message"]
    assert h.task("mv:broken") is None
    # A query Spark cannot analyse fails its task for good (a retry cannot fix it) ...
    h.ok(
        "CREATE MATERIALIZED VIEW broken REFRESH COMPLETE EVERY 1 SECONDS AS "
        "SELECT no_such_column FROM orders"
    )
    failed = wait_until(
        lambda: (t := h.task("mv:broken")) and t["state"] == "FAILED" and t, what="broken FAILED"
    )
    only = "a failed task can only be resumed, refreshed or dropped"
    for statement, verb in [
        ("ALTER MATERIALIZED VIEW broken PAUSE", "pause"),
        ("ALTER MATERIALIZED VIEW broken REFRESH EVERY 5 SECONDS", "alter"),
    ]:
        assert cli(capsys, statement) == (1, "", f"ERROR 1001: cannot {verb} a task in state FAILED: {only}")
    # ... and RESUME (or REFRESH) brings it back under a new epoch; still broken, it fails again.
    assert cli(capsys, "ALTER MATERIALIZED VIEW broken RESUME")[:2] == (0, "OK mv:broken")
    wait_until(
        lambda: (t := h.task("mv:broken")) and t["state"] == "FAILED" and t["epoch"] > failed["epoch"],
        what="broken resumed and failed again",
    )
    assert cli(capsys, "DROP MATERIALIZED VIEW broken")[:2] == (0, "OK mv:broken")
    # The task is DROPPING until its owner has removed its data; then it is gone.
    wait_until(lambda: h.task("mv:broken") is None, timeout_s=60, what="broken's drop finished")
    for name in ("life", "probe", "shaky"):
        h.ok(f"DROP MATERIALIZED VIEW {name}")


# -- pipelines of MVs (issue 29) -------------------------------------------------------------------
PIPE_A = "SELECT id, region, amount FROM pipe WHERE amount > 12"
PIPE_B = "SELECT region, sum(amount) AS total, count(*) AS n FROM pipe_a GROUP BY region"
# A fan-in: two MVs of one base read together, each run at one consistent cut of pipe.
PIPE_C = "SELECT a.id, a.amount, b.total FROM pipe_a a JOIN pipe_b b ON a.region = b.region"
PIPE_B_OVER_BASE = (
    "SELECT region, sum(amount) AS total, count(*) AS n FROM "
    "(SELECT id, region, amount FROM pipe WHERE amount > 12) GROUP BY region"
)


PIPELINE = ("mv:pipe_a", "mv:pipe_b", "mv:pipe_c")


def _pipeline_current(h: Harness) -> bool:
    """Each MV of the pipeline reflects the newest version of each table it reads."""
    reads = {"mv:pipe_a": ("pipe",), "mv:pipe_b": ("pipe_a",), "mv:pipe_c": ("pipe_a", "pipe_b")}
    return all(caught_up(h, task, table) for task, tables in reads.items() for table in tables)


def _rows_at(h: Harness, query: str, at: dict[str, int]) -> list[tuple[Any, ...]]:
    """``query`` over its tables as of the versions ``at`` (temp views of a session of its own)."""
    session = h.spark.newSession()
    for table, version in at.items():
        path = f"{h.settings.warehouse}/{table}"
        session.read.format("delta").option("versionAsOf", version).load(path).createOrReplaceTempView(table)
    return sorted(tuple(r) for r in session.sql(query).collect())


def test_a_pipeline_created_in_one_script_refreshes_fast_along_its_chain(h: Harness) -> None:
    create_table(h.spark, h.settings, "pipe", order_rows(0, 12), ORDERS_SCHEMA)
    mark = h.mark()
    # One script, nothing waited for between statements: pipe_b reads pipe_a before pipe_a is built,
    # and the MV log on pipe_a is created before its table exists. pipe_a has no schedule of its own:
    # pipe_b's ON CHANGE drives it (TARGET LAG DOWNSTREAM).
    for statement in (
        "CREATE MATERIALIZED VIEW LOG ON pipe",
        f"CREATE MATERIALIZED VIEW pipe_a REFRESH FAST TARGET LAG DOWNSTREAM AS {PIPE_A}",
        "CREATE MATERIALIZED VIEW LOG ON pipe_a",
        f"CREATE MATERIALIZED VIEW pipe_b REFRESH FAST ON CHANGE AS {PIPE_B}",
        "CREATE MATERIALIZED VIEW LOG ON pipe_b",
        f"CREATE MATERIALIZED VIEW pipe_c REFRESH FAST ON CHANGE AS {PIPE_C}",
    ):
        h.ok(statement)
    a = h.task("mv:pipe_a")
    assert a is not None and a["mv"]["driven_by"] == {"kind": "ON_CHANGE", "interval_ms": None}, a
    built = h.wait_run("mv:pipe_a", states={"COMPLETED"})
    # Until then pipe_b only waited (said why), and never failed.
    h.wait_run("mvlog:pipe_a", states={"COMPLETED"})  # the log captures: pipe_a's change data feed is on
    wait_until(lambda: _pipeline_current(h), what="the pipeline built")
    runs_b = h.runs_of("mv:pipe_b", mark)
    assert not [r for r in runs_b if r["state"] == "ERROR"], runs_b
    before_a = [r for r in runs_b if r["ended_at"] is not None and r["ended_at"] < built["started_at"]]
    assert all(r["message"] == "waiting for pipe_a's first refresh" for r in before_a), before_a
    assert mv_rows(h, "pipe_b") == query_rows(h, PIPE_B, "pipe_a")
    step("pipeline built")

    # A base change flows along the chain, FAST at each edge (pipe_a's MERGE yields change rows).
    changed = h.mark()
    path = f"{h.settings.warehouse}/pipe"
    append(h.spark, h.settings, "pipe", order_rows(100, 4))
    h.spark.sql(f"UPDATE delta.`{path}` SET amount = amount + 5 WHERE id % 4 = 0")
    h.spark.sql(f"DELETE FROM delta.`{path}` WHERE id % 5 = 1")
    wait_until(lambda: _pipeline_current(h), what="the pipeline caught up")
    b = h.task("mv:pipe_b")
    assert b is not None
    last_b = [r for r in h.runs_of("mv:pipe_b", changed) if r["state"] == "COMPLETED"][-1]
    assert last_b["message"].startswith("incremental:"), last_b
    assert f"; reflects pipe@v{latest_version(h.settings, 'pipe')}" in last_b["message"], last_b
    assert [r for r in h.runs_of("mv:pipe_a", changed) if r["state"] == "COMPLETED"][-1][
        "message"
    ].startswith("incremental:")
    # pipe_b at its watermark equals its query over pipe_a, and (through pipe_a's commit metadata at
    # that version) the composed query over the base: one consistent cut.
    cut = read_watermark(None, h.settings, "pipe_a", at=b["checkpoint"]["pipe_a"])
    assert cut is not None and set(cut.watermark) == {"pipe"}
    assert mv_rows(h, "pipe_b") == _rows_at(h, PIPE_B, dict(b["checkpoint"]))
    assert mv_rows(h, "pipe_b") == _rows_at(h, PIPE_B_OVER_BASE, dict(cut.watermark))
    # The fan-in read pipe_a and pipe_b at one version of pipe in every run, while pipe took three
    # commits back to back; it equals its query over them at its watermark.
    checked, wrong = inconsistent_cuts(h.settings, "pipe_c", ("pipe_a", "pipe_b"), "pipe")
    assert checked >= 2 and not wrong, wrong
    c = h.task("mv:pipe_c")
    assert c is not None and mv_rows(h, "pipe_c") == _rows_at(h, PIPE_C, dict(c["checkpoint"]))
    step("pipeline refreshed FAST")

    # pipe_a is read: its DROP is refused, naming the reader; CASCADE drops the chain and its logs.
    refused = h.sql("DROP MATERIALIZED VIEW pipe_a")
    assert refused["error"]["code"] == 1001
    assert refused["error"]["message"] == (
        "pipe_a is read by pipe_b, pipe_c; drop them first or use DROP MATERIALIZED VIEW pipe_a CASCADE"
    )
    assert h.task("mv:pipe_a")["state"] == "NORMAL"  # type: ignore[index]
    h.ok("DROP MATERIALIZED VIEW pipe_a CASCADE")
    wait_until(
        lambda: all(h.task(t) is None for t in (*PIPELINE, "mvlog:pipe_a", "mvlog:pipe_b")),
        timeout_s=60,
        what="the chain dropped",
    )
    dropped = ("pipe_a", "pipe_b", "pipe_c", "pipe_a__mlog", "pipe_b__mlog")
    assert not any(table_exists(h.settings, t) for t in dropped)
    h.ok("DROP MATERIALIZED VIEW LOG ON pipe")


# -- two owners racing -----------------------------------------------------------------------------
def test_old_owner_waking_after_its_task_moved_cannot_overwrite_the_new_result(h: Harness) -> None:
    h.pair()
    running, old, new = slow_mv_running_on_owner(h, "race")
    old.freeze()  # mid-refresh, JVM and all: it holds its result and thinks it owns the task
    moved = h.wait_run("mv:race", states={"COMPLETED"}, worker_id=new.name, timeout_s=90)
    step("race: the new owner completed")
    assert moved["epoch"] > running["epoch"]
    version = latest_version(h.settings, "big")
    assert moved["watermark_after"] == {"big": version}
    old.thaw()
    # The old owner finds its partition gone: its run ends (cancelled, or its commit refused).
    ended = h.wait_run("mv:race", states=TERMINAL, run_id=running["run_id"], timeout_s=90)
    step(f"race: the old owner's run ended {ended['state']}: {ended['message']}")
    h.pair()  # the old owner is back in the group

    # The old owner's result never landed; the new owner's did, and nothing older came after it
    # (the old owner may own the task again by now, under a yet newer epoch).
    commits = mv_commits(h, "race")
    assert_applied_once(commits)
    by_run = {run_id: (epoch, watermark) for _, epoch, watermark, run_id in commits}
    assert running["run_id"] not in by_run, f"the frozen owner's result was applied: {commits}"
    assert by_run[moved["run_id"]] == (moved["epoch"], {"big": version})
    assert mv_rows(h, "race") == query_rows(h, SLOW_QUERY, "big")
    task = h.task("mv:race")
    assert task is not None and task["state"] == "NORMAL" and task["epoch"] >= moved["epoch"]
    h.ok("DROP MATERIALIZED VIEW race")


# -- a worker dies ---------------------------------------------------------------------------------
def test_kill_9_mid_refresh_moves_the_task_and_applies_each_result_once(h: Harness) -> None:
    h.pair()
    running, victim, survivor = slow_mv_running_on_owner(h, "slow")
    victim.kill()

    moved = h.wait_run("mv:slow", states={"RUNNING", "COMPLETED"}, worker_id=survivor.name, timeout_s=60)
    step("slow: running on the survivor")
    assert moved["epoch"] > running["epoch"], "the new owner runs under a raised epoch"
    done = h.wait_run("mv:slow", states={"COMPLETED"}, worker_id=survivor.name)
    step("slow: completed on the survivor")
    version = latest_version(h.settings, "big")
    assert done["watermark_after"] == {"big": version}
    assert mv_rows(h, "slow") == query_rows(h, SLOW_QUERY, "big")
    commits = mv_commits(h, "slow")
    assert_applied_once(commits)
    assert commits[-1][1:3] == (done["epoch"], {"big": version})
    errors = [r for r in h.runs_of("mv:slow") if r["state"] == "ERROR"]
    assert not errors, errors
    task = wait_until(
        lambda: (t := h.task("mv:slow")) and t["owner"] == survivor.name and t, what="catalog: the new owner"
    )
    assert task["state"] == "NORMAL" and task["epoch"] == done["epoch"]
    h.ok("DROP MATERIALIZED VIEW slow")
    # The SIGTERM test needs two warm workers: start the replacement now; its Spark starts at launch
    # while the next tests run (the SIGTERM test waits for it).
    replacement = h.new_worker()
    h.pair()
    h.cold = replacement.name  # the tests until the SIGTERM one keep their MVs off it


# -- stale epochs ----------------------------------------------------------------------------------
def coordinator_epoch(h: Harness) -> int:
    return max(int(m.value["coordinator_epoch"]) for m in read_to_end(h.settings, "manager") if m.value)


def test_stale_epoch_command_and_report_are_ignored(h: Harness) -> None:
    name = name_on(h, "fenced", off=h.cold)
    task_id = f"mv:{name}"
    h.ok(f"CREATE MATERIALIZED VIEW {name} REFRESH COMPLETE ON DEMAND AS SELECT id, amount FROM orders")
    h.wait_run(task_id, states={"COMPLETED"})
    h.ok(f"ALTER MATERIALIZED VIEW {name} PAUSE")
    h.ok(f"ALTER MATERIALIZED VIEW {name} RESUME")
    task = wait_until(
        lambda: (t := h.task(task_id)) and t["owner"] and t["state"] == "NORMAL" and t,
        what=f"{name} resumed and owned",
    )
    epoch, owner = task["epoch"], task["owner"]
    assert epoch >= 3
    h.wait_run(task_id, states=TERMINAL, epoch=epoch)  # the run the resume started is over
    producer = TypedProducer(h.settings)
    header = {"coordinator_epoch": coordinator_epoch(h), "task_id": task_id, "safepoint": None}

    # A REFRESH_NOW of an older epoch does nothing; the same command at the current epoch runs once.
    mark = h.mark()
    for command_epoch in (epoch - 1, epoch):
        command = {**header, "command_id": uuid.uuid4().hex, "kind": "REFRESH_NOW", "epoch": command_epoch}
        producer.send("maintainer", task_id, command)
    producer.flush()
    done = h.wait_run(task_id, states={"COMPLETED", "SKIPPED"}, after=mark, trigger="MANUAL")
    assert {r["run_id"] for r in h.runs_of(task_id, mark)} == {done["run_id"]}
    assert done["epoch"] == epoch
    worker_log = h.fleet.role(owner).log()
    assert f"{task_id}: ignoring stale REFRESH_NOW (epoch {epoch - 1} < {epoch})" in worker_log

    step("A heartbeat ")
    # A heartbeat status of an older epoch changes nothing in the catalog, even from another worker
    # claiming a failure and a far-ahead checkpoint; the owner's later report still applies.
    before = h.task(task_id)
    assert before is not None
    stale_status = {
        "task_id": task_id,
        "epoch": epoch - 1,
        "state": "FAILED",
        "checkpoint": {"orders": 999},
        "last_run": None,
        "next_run_at": None,
        "error": {"code": 4001, "message": "stale", "severity": "FATAL", "retryable": False, "at": 0},
    }
    heartbeat = {
        "worker_id": "ghost",
        "sent_at": 0,
        "coordinator_epoch": header["coordinator_epoch"],
        "full": True,
        "statuses": [stale_status],
        "removed": [],
    }
    producer.send("coordinator", "ghost", heartbeat)
    producer.flush()
    producer.close()
    mark = h.mark()
    h.ok(f"REFRESH MATERIALIZED VIEW {name}")  # the owner's report of this run comes after the ghost's
    refreshed = h.wait_run(task_id, states={"COMPLETED", "SKIPPED"}, after=mark, trigger="MANUAL")
    after = wait_until(
        lambda: (t := h.task(task_id)) and t["last_run"]["run_id"] == refreshed["run_id"] and t,
        what="the owner's report of the new run in the catalog",
    )
    assert (after["state"], after["epoch"], after["owner"], after["error"]) == ("NORMAL", epoch, owner, None)
    assert after["checkpoint"] == before["checkpoint"] != {"orders": 999}
    h.ok(f"DROP MATERIALIZED VIEW {name}")


# -- coordinator failover --------------------------------------------------------------------------
def results_for(h: Harness, event_id: str) -> list[dict[str, Any]]:
    return [
        m.value for m in read_to_end(h.settings, "ddl.results") if m.value and m.value["event_id"] == event_id
    ]


def test_standby_coordinator_takes_over_and_applies_ddl_once(h: Harness) -> None:
    from workers.ddl.parser import parse_statement

    active = next(r for r in h.fleet.roles if r.kind == "coordinator" and r.alive)
    standby = h.fleet.coordinator("c2")
    group = h.settings.group("coordinator")
    wait_until(
        lambda: group_owners(h.settings, group) == {active.name: [0], standby.name: []},
        what="two coordinators in the group, the first one active",
    )

    # A zombie coordinator: frozen while the standby takes over, then woken up. Its producer is
    # fenced by the new one's transactional.id; it stands by and applies nothing.
    active.freeze()
    ha, ha2 = name_on(h, "ha", off=h.cold), name_on(h, "hb", off=h.cold)
    create = parse_statement(
        f"CREATE MATERIALIZED VIEW {ha} REFRESH COMPLETE ON DEMAND AS SELECT region, amount FROM orders",
        issued_by="test-fleet",
    )
    h.client.publish(create)  # nobody applies it until the standby is active
    wait_until(lambda: group_owners(h.settings, group).get(standby.name) == [0], what="standby holds the DDL")
    wait_until(lambda: results_for(h, create["event_id"]), what="the DDL applied by the new coordinator")
    active.thaw()
    wait_until(lambda: "coordinator standing by" in active.log(), what="the old coordinator standing by")
    # DDL is one ordered partition: once this later statement is answered, a second answer to
    # the first one would have come already.
    h.ok(f"REFRESH MATERIALIZED VIEW {ha}")
    assert len(results_for(h, create["event_id"])) == 1
    assert active.alive

    step("kill -9 of t")
    # kill -9 of the active coordinator; DDL published while nobody is active is applied once.
    standby.kill()
    create2 = parse_statement(
        f"CREATE MATERIALIZED VIEW {ha2} REFRESH COMPLETE ON DEMAND AS SELECT id FROM orders",
        issued_by="test-fleet",
    )
    h.client.publish(create2)
    wait_until(lambda: group_owners(h.settings, group).get(active.name) == [0], what="first coordinator back")
    h.ok(f"REFRESH MATERIALIZED VIEW {ha2}")
    (result,) = results_for(h, create2["event_id"])
    assert result["accepted"] and result["task_id"] == f"mv:{ha2}"
    for name in (ha, ha2):
        creations = [
            m
            for m in read_to_end(h.settings, "catalog")
            if m.key == f"mv:{name}" and m.value and m.value["created_at"] == m.value["updated_at"]
        ]
        assert len(creations) == 1, f"{name} created {len(creations)} times"
        h.wait_run(f"mv:{name}", states={"COMPLETED"})
        assert table_exists(h.settings, name)
        h.ok(f"DROP MATERIALIZED VIEW {name}")


# -- a worker leaves ------------------------------------------------------------------------------
def test_sigterm_hands_off_without_a_failed_run(h: Harness) -> None:
    h.pair()
    for worker in h.live_workers():
        h.wait_warm(worker)
    step("handoff: both workers warm")
    running, leaving, staying = slow_mv_running_on_owner(h, "handoff")
    signalled = time.time()
    leaving.sigterm()
    after = h.wait_run(
        "mv:handoff", states={"RUNNING", "COMPLETED", "SKIPPED"}, worker_id=staying.name, timeout_s=30
    )
    took = after["started_at"] / 1000 - signalled
    step(f"handoff: running on the other worker {took:.2f}s after SIGTERM")  # bench/failover.py times it
    assert after["epoch"] > running["epoch"]
    assert leaving.process.wait(60) == 0
    left = h.run("mv:handoff", states=TERMINAL, run_id=running["run_id"])
    assert left is not None and left["state"] in ("CANCELED", "COMPLETED"), left
    # COMPLETED, or SKIPPED when the leaving worker's run completed first: the new owner finds the
    # MV already current and recomputes nothing.
    done = h.wait_run("mv:handoff", states={"COMPLETED", "SKIPPED"}, worker_id=staying.name)
    step(f"handoff: {done['state']} on the new owner")
    errors = [r for r in h.runs_of("mv:handoff") if r["state"] == "ERROR"]
    assert not errors, errors
    assert mv_rows(h, "handoff") == query_rows(h, SLOW_QUERY, "big")
    assert_applied_once(mv_commits(h, "handoff"))
    task = wait_until(
        lambda: (t := h.task("mv:handoff")) and t["owner"] == staying.name and t,
        what="catalog: the new owner",
    )
    assert task["state"] == "NORMAL" and task["epoch"] == done["epoch"]


# -- the coordinator's health (issue 32) -----------------------------------------------------------
def test_status_shows_the_coordinators_health_and_ddl_not_applied_yet(h: Harness) -> None:
    coordinator = next(r for r in h.fleet.roles if r.kind == "coordinator" and r.alive)

    def reported() -> StatusSnapshot | None:
        snapshot = h.client.status_snapshot()
        active = snapshot.coordinators.get(coordinator.name) == [0]
        return snapshot if active and coordinator.name in snapshot.loop_errors else None

    snapshot = wait_until(reported, timeout_s=60, what=f"{coordinator.name}'s own heartbeat")
    assert snapshot.ddl_lag == 0, "every DDL applied"
    (row,) = [r for r in status_json(snapshot, "fleet")["roles"] if r["name"] == coordinator.name]
    assert (row["role"], row["state"], row["ddl_lag"]) == ("coordinator", "active", 0)
    own = [
        m.value
        for m in read_to_end(h.settings, "coordinator")
        if m.key == coordinator.name and m.value is not None
    ]
    assert own and own[-1]["coordinator_active"] is True and own[-1]["statuses"] == []

    name = f"lagging{uuid.uuid4().hex[:6]}"
    coordinator.freeze()  # a coordinator that applies nothing: the DDL published meanwhile waits
    try:
        h.client.execute(
            f"CREATE MATERIALIZED VIEW {name} REFRESH COMPLETE ON DEMAND AS {BY_REGION}", wait=False
        )
        behind = wait_until(
            lambda: (s := h.client.status_snapshot()).ddl_lag == 1 and s,
            timeout_s=30,
            what="a DDL not applied",
        )
        table = members_table(behind.coordinators, behind.workers, behind.tasks, behind.loop_errors, 1)
        assert "DDL LAG" in table.splitlines()[0]
    finally:
        coordinator.thaw()
    wait_until(lambda: h.client.status_snapshot().ddl_lag == 0, timeout_s=120, what="the DDL applied")
    h.wait_run(f"mv:{name}", states={"COMPLETED"})
    h.ok(f"DROP MATERIALIZED VIEW {name}")


# -- a drop outlives its worker (issue 32) ---------------------------------------------------------
def _dropped_reports(h: Harness, task_id: str) -> list[tuple[str, int]]:
    """(worker, epoch) of every heartbeat status reporting ``task_id``'s data removed."""
    return [
        (m.value["worker_id"], status["epoch"])
        for m in read_to_end(h.settings, "coordinator")
        if m.value
        for status in m.value["statuses"]
        if status["task_id"] == task_id and status["state"] == "DROPPED"
    ]


def test_a_drop_whose_worker_dies_before_removing_the_table_is_finished_by_another(h: Harness) -> None:
    if len(h.live_workers()) < 2:
        h.new_worker()  # the SIGTERM test leaves one
    first, second = h.pair()
    for worker in (first, second):
        h.wait_warm(worker)
    name = name_on(h, "doomed", on=first.name)
    task_id, create = (
        f"mv:{name}",
        f"CREATE MATERIALIZED VIEW {name} REFRESH COMPLETE ON DEMAND AS {BY_REGION}",
    )
    h.ok(create)
    built = h.wait_run(task_id, states={"COMPLETED"})
    victim = next(w for w in (first, second) if w.name == built["worker_id"])
    survivor = second if victim is first else first
    assert table_exists(h.settings, name)
    step(f"drop: {name} built on {victim.name}; freezing it, then DROP")

    victim.freeze()  # it never acts on the DROP: it dies between the DROP and the table's removal
    h.ok(f"DROP MATERIALIZED VIEW {name}")
    snapshot = h.client.status_snapshot()
    assert snapshot.tasks[task_id]["state"] == "DROPPING", "`mvs status` shows the drop in progress"
    assert "DROPPING" in status_table(snapshot.tasks, snapshot.latest_version)
    refused = h.sql(create)
    assert refused["error"]["code"] == 1002 and "is being dropped" in refused["error"]["message"], refused
    victim.kill()
    step(f"drop: {victim.name} killed with {name}'s table still there: {table_exists(h.settings, name)}")

    wait_until(
        lambda: h.task(task_id) is None, timeout_s=120, what=f"{name}'s drop finished by another worker"
    )
    step(f"drop: {name} gone from the catalog")
    assert not table_exists(h.settings, name)
    reports = _dropped_reports(h, task_id)
    assert reports and {worker for worker, _ in reports} == {survivor.name}, reports
    # The survivor removed it under the epoch the coordinator issued it, above the DROP's own.
    history = [m.value for m in read_to_end(h.settings, "catalog") if m.key == task_id]
    dropping = [t for t in history if t is not None and t["state"] == "DROPPING"]
    assert dropping[0]["owner"] == victim.name and history[-1] is None
    assert max(epoch for _, epoch in reports) == dropping[-1]["epoch"] > dropping[0]["epoch"]
    assert dropping[-1]["owner"] == survivor.name

    mark = h.mark()
    h.ok(create)  # the name is free again
    rebuilt = h.wait_run(task_id, states={"COMPLETED"}, after=mark)
    assert rebuilt["worker_id"] == survivor.name
    assert mv_rows(h, name) == query_rows(h, BY_REGION, "orders")
    h.ok(f"DROP MATERIALIZED VIEW {name}")
    wait_until(lambda: h.task(task_id) is None, timeout_s=60, what=f"{name} dropped again")
