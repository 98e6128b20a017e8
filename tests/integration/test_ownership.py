"""Two workers in one consumer group: every task is owned by exactly one of them."""

from __future__ import annotations

import threading
from dataclasses import replace
from typing import Any

import pytest

from tests.support.cluster import Cluster, wait_until
from workers.cli import main as cli_main
from workers.config import Settings
from workers.demo_tables import create_table
from workers.kafka.typed import partition_for
from workers.topics import topic_spec
from workers.worker.manager import Manager


def test_two_workers_each_task_owned_by_exactly_one(
    spark: Any, settings: Settings, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    create_table(spark, settings, "sales", [{"id": 1, "amount": 5}], "id BIGINT, amount BIGINT")
    cluster = Cluster(settings, workers=2)
    try:
        names = [f"mv_{i}" for i in range(8)]
        for name in names:
            sql = f"CREATE MATERIALIZED VIEW {name} REFRESH COMPLETE ON DEMAND AS SELECT id FROM sales"
            assert cluster.sql(sql)["accepted"]
        task_ids = {f"mv:{n}" for n in names}

        def owners() -> dict[str, str] | None:
            tasks = cluster.client.tasks()
            found = {t: tasks[t]["owner"] for t in task_ids if t in tasks and tasks[t]["last_run"]}
            return found if len(found) == len(task_ids) else None

        reported = wait_until(owners, what="every task refreshed and reported")
        owned = [set(m.host.owned) for m in cluster.managers]
        assert owned[0].isdisjoint(owned[1])
        assert owned[0] | owned[1] == task_ids
        assert all(owned), "with 12 partitions and 2 members both must own something"
        for index, manager in enumerate(cluster.managers):
            for task_id in owned[index]:
                assert reported[task_id] == f"worker-{index}"
                partition = partition_for(task_id, topic_spec("manager").partitions)
                assert manager.host.partition_of[task_id] == partition

        # A bug in one turn of worker-1's loop: survived, and reported in its heartbeats.
        broken, tick = cluster.managers[1].host, cluster.managers[1].host.tick
        turns = iter([True])

        def tick_with_a_bug_once() -> int:
            if next(turns, False):
                raise RuntimeError("injected loop bug")
            return tick()

        monkeypatch.setattr(broken, "tick", tick_with_a_bug_once)
        wait_until(
            lambda: "RuntimeError: injected loop bug" in (cluster.client.loop_errors().get("worker-1") or ""),
            timeout_s=30,
            what="worker-1's survived loop error in its heartbeat",
        )

        # `mvs status` shows the live roles: the active coordinator, and each worker's partitions,
        # task count and last loop error, as the group, the catalog and the heartbeats say.
        monkeypatch.setenv("MVS_BOOTSTRAP_SERVERS", settings.bootstrap_servers)
        monkeypatch.setenv("MVS_NAMESPACE", settings.namespace)
        monkeypatch.setenv("MVS_WAREHOUSE", settings.warehouse)
        assert cli_main(["status"]) == 0
        roles = [line.split() for line in capsys.readouterr().out.splitlines()]
        me = cluster.coordinator.settings.worker_id
        coordinator = next(r for r in roles if r[:2] == ["coordinator", me])
        # ACTIVE, no partitions or tasks, its DDL lag a count, no loop error.
        assert coordinator[2:5] == ["active", "-", "-"] and coordinator[5].isdigit(), coordinator
        assert coordinator[6:] == ["-"], coordinator
        for index, manager in enumerate(cluster.managers):
            held = ",".join(str(p) for p in sorted(manager.partitions))
            row = next(r for r in roles if r[:2] == ["worker", f"worker-{index}"])
            expanded = [str(p) for part in row[3].split(",") for p in _expand(part)]
            assert ",".join(expanded) == held and row[4] == str(len(owned[index]))
            loop_error = " ".join(row[5:])
            assert ("RuntimeError: injected loop bug" in loop_error) == (index == 1), loop_error
        assert all(t.is_alive() for t in cluster._threads), "the loop survived its bug"
    finally:
        cluster.close()


def _expand(span: str) -> range:
    first, _, last = span.partition("-")
    return range(int(first), int(last or first) + 1)


class SteppedManager:
    """A real Manager whose loop the test can hang and resume: ``hang()`` stops calling ``step()``
    (as a stuck loop would) while its Kafka client's background threads go on."""

    def __init__(self, settings: Settings) -> None:
        self.manager = Manager(settings)
        self.running = threading.Event()
        self.running.set()
        self.stop = threading.Event()
        self.errors: list[BaseException] = []
        self.thread = threading.Thread(target=self._loop, name="stepped-manager", daemon=True)
        self.thread.start()

    def _loop(self) -> None:
        try:
            self.manager.start()
            while not self.stop.is_set():
                self.running.wait()
                self.manager.step()
        except BaseException as exc:  # reported by the test
            self.errors.append(exc)
        finally:
            self.manager.close()

    def hang(self) -> None:
        self.running.clear()

    def resume(self) -> None:
        self.running.set()

    def close(self) -> None:
        self.stop.set()
        self.running.set()
        self.thread.join(60)


@pytest.mark.parametrize("settings", ["local", "s3"], indirect=True)  # s3: tests/support/objectstore.py
def test_a_worker_whose_loop_hangs_leaves_the_group_and_its_task_runs_elsewhere(
    spark: Any, settings: Settings
) -> None:
    settings = replace(settings, max_poll_interval_ms=8000)
    create_table(spark, settings, "sales", [{"id": 1, "amount": 5}], "id BIGINT, amount BIGINT")
    cluster = Cluster(settings, workers=1)
    hung = SteppedManager(replace(settings, worker_id="worker-hung"))
    try:
        task_ids = [f"mv:mv_{i}" for i in range(6)]
        for task_id in task_ids:
            name = task_id.split(":", 1)[1]
            sql = f"CREATE MATERIALIZED VIEW {name} REFRESH COMPLETE ON DEMAND AS SELECT id FROM sales"
            assert cluster.sql(sql)["accepted"]

        def owned_by_hung() -> dict[str, Any] | None:
            tasks = cluster.client.tasks()
            done = all(t in tasks and tasks[t]["last_run"] for t in task_ids)
            mine = [tasks[t] for t in task_ids if t in tasks and tasks[t]["owner"] == "worker-hung"]
            return mine[0] if done and mine else None

        target = wait_until(owned_by_hung, what="every task refreshed, one owned by worker-hung")
        hung.hang()

        def moved() -> dict[str, Any] | None:
            task = cluster.client.tasks()[target["task_id"]]
            return task if task["owner"] == "worker-0" and task["epoch"] > target["epoch"] else None

        # The hung loop stops polling: after max.poll.interval.ms its client leaves the group and
        # worker-0 takes the task over (long before librdkafka's default of 300 s).
        task = wait_until(moved, timeout_s=60, what="the hung worker's task owned by worker-0")
        assert task["state"] in ("NORMAL", "WARNING")
        runs = wait_until(
            lambda: [
                r
                for r in cluster.client.history(target["task_id"])
                if r["worker_id"] == "worker-0" and r["epoch"] >= task["epoch"] and r["state"] != "PENDING"
            ],
            what="a run of the moved task on worker-0",
        )
        assert runs[0]["state"] in ("RUNNING", "COMPLETED", "SKIPPED"), runs

        # Woken up, the worker finds its partitions lost, stops those maintainers, and rejoins.
        hung.resume()
        wait_until(lambda: hung.manager.partitions, what="the woken worker back in the group")
        assert not hung.errors, hung.errors
    finally:
        hung.close()
        cluster.close()
    assert not hung.errors, hung.errors
