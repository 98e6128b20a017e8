"""The task host's decisions without a bus: claims and epochs, revocation and drops while a run goes
on, unanswered claims, heartbeat content. ManualClock and the fake runner of the maintainer tests."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.support.maintainer_harness import CTX, WAIT, Gate, Harness, mv
from workers.coordinator.effects import manager_command
from workers.kafka.messages import partition_for
from workers.records import Record
from workers.worker.drops import DROP_RETRY_S
from workers.worker.host import MAX_CLOCK_SKEW_MS, PARTITIONS, TaskHost


@pytest.fixture
def h() -> Iterator[Harness]:
    harness = Harness()
    yield harness
    harness.executor.shutdown(timeout_s=WAIT)


def task(name: str, *, epoch: int = 1, owner: str | None = "w1") -> Record:
    return {**mv(name, "ON_DEMAND", None, epoch=epoch), "owner": owner}


def part(record: Record) -> int:
    return partition_for(record["task_id"], PARTITIONS)


def command(kind: str, record: Record, coordinator_epoch: int) -> Record:
    return {**manager_command(kind, record, CTX), "coordinator_epoch": coordinator_epoch}


def running(h: Harness, name: str) -> tuple[Record, Gate]:
    """An owned task whose run has started and ignores its cancellation until released."""
    record = task(name)
    h.host.add_task(record, part(record))
    gate = h.runner.gate(record["task_id"], stubborn=True)
    h.tick(settle=False)
    assert gate.started.wait(WAIT)
    return record, gate


def statuses(heartbeat: Record | None) -> dict[str, int]:
    assert heartbeat is not None
    return {s["task_id"]: s["epoch"] for s in heartbeat["statuses"]}


def test_a_claim_answered_by_add_maintainer_starts_a_maintainer(h: Harness) -> None:
    host: TaskHost = h.host
    restored = task("a", owner="w0")  # the catalog names the previous owner
    host.add_task(restored, part(restored))
    assert "mv:a" in host.waiting and not host.owned and host.claim_now
    assert statuses(host.heartbeat(full=False, loop_error=None)) == {"mv:a": 1}, "claimed at once"
    h.tick()
    assert h.runner.calls == [], "no run before the coordinator issued an epoch naming us"
    host.on_manager_command(command("ADD_MAINTAINER", task("a", epoch=2), 5), part(restored))
    assert set(host.owned) == {"mv:a"} and not host.waiting and host.coordinator_epoch == 5
    h.tick()
    assert [(c.task_id, c.epoch) for c in h.runner.calls] == [("mv:a", 2)]
    assert h.states("mv:a") == ["COMPLETED"]


def test_a_replayed_older_record_and_an_older_coordinator_are_ignored(h: Harness) -> None:
    host = h.host
    newer = task("a", epoch=3, owner="w0")
    host.add_task(newer, part(newer))
    host.add_task(task("a", epoch=2, owner="w0"), part(newer))  # replayed from the catalog
    assert host.waiting["mv:a"][0]["epoch"] == 3
    host.on_manager_command(command("BOOTSTRAP", {"task_id": "__bootstrap__/0", "epoch": 0}, 7), 0)
    host.on_manager_command(command("ADD_MAINTAINER", task("a", epoch=4), 6), part(newer))
    assert not host.owned and host.coordinator_epoch == 7, "a deposed coordinator cannot issue epochs"
    forged = command("ADD_MAINTAINER", task("a", epoch=5), h.clock.wall_ms() + MAX_CLOCK_SKEW_MS + 1)
    host.on_manager_command(forged, part(newer))
    assert not host.owned and host.coordinator_epoch == 7, "an epoch from the future is refused"


def test_revoke_drains_a_running_maintainer_and_reaps_it_when_its_run_ends(h: Harness) -> None:
    host = h.host
    record, gate = running(h, "slow")
    host.heartbeat(full=True, loop_error=None)
    assert host.release({part(record)}) == ["mv:slow"]
    assert "mv:slow" not in host.owned and "mv:slow" in host.draining and "mv:slow" in host.mailboxes
    assert h.runner.cancelled, "its run was cancelled"
    beat = host.heartbeat(full=False, loop_error=None)
    assert beat is not None and beat["removed"] == ["mv:slow"] and beat["statuses"] == []
    host.reap_drained()
    assert "mv:slow" in host.draining, "kept while its run goes on"
    gate.release.set()
    h.settle()
    host.reap_drained()
    assert not host.draining and "mv:slow" not in host.mailboxes
    assert h.states("mv:slow")[-1] in ("CANCELED", "COMPLETED"), "its outcome was still recorded"
    assert h.runner.dropped == [], "a revoked task's data stays (it moved, it was not dropped)"


def test_a_drop_during_a_run_drops_data_after_it_ends_and_a_recreated_task_waits(h: Harness) -> None:
    host = h.host
    record, gate = running(h, "slow")
    dropping = {**record, "epoch": 2, "state": "DROPPING"}
    host.on_manager_command(command("REMOVE_MAINTAINER", dropping, 1), part(record))
    assert "mv:slow" in host.draining and h.runner.dropped == []
    recreated = task("slow", epoch=3)
    host.add_task(recreated, part(recreated))  # CREATE again while the old run drains
    assert "mv:slow" not in host.owned and "mv:slow" not in host.waiting, "deferred"
    host.reap_drained()
    assert h.runner.dropped == [], "the table is not dropped under a run that may still write it"
    gate.release.set()
    h.settle()
    host.reap_drained()
    assert h.runner.dropped == ["mv:slow"], "dropped once the run ended"
    assert host.owned["mv:slow"].task["epoch"] == 3, "then the re-created task starts"


def test_unanswered_claims_start_after_the_heartbeat_timeout(h: Harness) -> None:
    host = h.host
    kept, moved, gone = task("kept", owner="w0"), task("moved", owner="w0"), task("gone", owner="w0")
    for record in (kept, moved, gone):
        host.add_task(record, part(record))
    h.clock.advance(24.9)
    assert host.unanswered_claims() == []
    h.clock.advance(0.1)
    partitions = host.unanswered_claims()
    assert partitions == sorted({part(kept), part(moved), part(gone)})
    host.claim_now = False
    catalog = {"mv:kept": kept, "mv:moved": task("moved", epoch=2, owner="w2")}
    host.start_unanswered_claims(catalog, partitions)
    assert set(host.owned) == {"mv:kept"} and host.owned["mv:kept"].task["epoch"] == 1
    assert host.waiting["mv:moved"][0]["epoch"] == 2 and host.claim_now, "a coordinator is at work"
    assert "mv:gone" not in host.waiting and "mv:gone" not in host.owned
    assert host.unanswered_claims() == [], "the new claim gets a full timeout"


def test_full_and_delta_heartbeats(h: Harness) -> None:
    host = h.host
    for record in (task("a"), task("b"), task("c", owner="w0")):
        host.add_task(record, part(record))
    full = host.heartbeat(full=True, loop_error=None)
    assert full is not None and full["full"] and full["worker_id"] == "w1"
    assert statuses(full) == {"mv:a": 1, "mv:b": 1, "mv:c": 1}
    assert host.heartbeat(full=False, loop_error=None) is None, "nothing changed: nothing to say"
    h.tick()  # a and b run (new tasks run at once): their statuses changed
    host.remove("mv:b", dropping={**task("b"), "state": "DROPPING", "epoch": 2})
    delta = host.heartbeat(full=False, loop_error=None)
    assert delta is not None and not delta["full"]
    assert statuses(delta) == {"mv:a": 1, "mv:b": 2} and delta["removed"] == ["mv:b"]
    assert [s["state"] for s in delta["statuses"] if s["task_id"] == "mv:b"] == ["DROPPED"]
    assert h.runner.dropped == ["mv:b"]
    error = host.heartbeat(full=False, loop_error="boom")
    assert error is not None and error["statuses"] == [] and error["loop_error"] == "boom"
    assert host.heartbeat(full=False, loop_error="boom") is None, "the same error is said once"
    host.full_requested = False
    host.unsent(delta)
    again = host.heartbeat(full=False, loop_error="boom")
    assert again is not None and statuses(again) == {"mv:a": 1, "mv:b": 2} and again["removed"] == ["mv:b"]
    assert host.full_requested, "after a lost heartbeat the coordinator gets the whole truth"


def test_a_drop_the_warehouse_refuses_is_retried_then_reported_dropped_until_the_catalog_forgets_it(
    h: Harness,
) -> None:
    host = h.host
    record = task("a")
    host.add_task(record, part(record))
    host.heartbeat(full=True, loop_error=None)
    h.runner.drop_failures = 1  # the object store is away once
    dropping = {**record, "epoch": 2, "state": "DROPPING"}
    host.on_manager_command(command("REMOVE_MAINTAINER", dropping, 1), part(record))
    assert "mv:a" not in host.owned and h.runner.dropped == [] and "mv:a" not in host.dropped
    host.reap_drained()
    assert h.runner.dropped == [], "not before DROP_RETRY_S"
    h.clock.advance(DROP_RETRY_S)
    host.reap_drained()
    assert h.runner.dropped == ["mv:a"]
    beat = host.heartbeat(full=False, loop_error=None)
    assert beat is not None and [(s["task_id"], s["epoch"], s["state"]) for s in beat["statuses"]] == [
        ("mv:a", 2, "DROPPED")
    ]
    full = host.heartbeat(full=True, loop_error=None)
    assert full is not None and statuses(full) == {"mv:a": 2}, "said again until the catalog forgets it"
    host.reconcile({})
    full = host.heartbeat(full=True, loop_error=None)
    assert full is not None and statuses(full) == {}


def test_a_dropping_task_restored_after_its_owner_died_is_claimed_then_removed(h: Harness) -> None:
    host = h.host
    restored = {**task("a", epoch=3, owner="w0"), "state": "DROPPING"}
    host.restore({"mv:a": restored})
    assert "mv:a" in host.waiting and host.claim_now, "claimed like any task of another owner"
    assert h.runner.dropped == [], "no removal before an epoch naming us"
    host.on_manager_command(
        command("ADD_MAINTAINER", {**restored, "epoch": 4, "owner": "w1"}, 5), part(restored)
    )
    assert h.runner.dropped == ["mv:a"] and not host.owned and host.dropped["mv:a"]["epoch"] == 4
