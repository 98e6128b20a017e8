"""The manager: one per worker process; Kafka's consumer group decides which tasks it owns.

Owning partition p of the manager topic means owning every task whose key hashes to p. On
assignment the manager restores those tasks from partition p of the compacted catalog and
starts their maintainers, and starts reading partition p of the maintainer topic (so a
per-task command reaches only the owner). On revocation it stops those maintainers — running
Spark jobs are cancelled and waited for — before the partition is released.

The loop is ``step()``, run until a stop event; tests drive it step by step.
"""

from __future__ import annotations

import logging
import threading
from collections import deque
from typing import Any

from workers.catalog.store import restore_catalog
from workers.config import Settings
from workers.kafka.typed import Message, TypedConsumer, TypedProducer
from workers.role import LoopRole
from workers.sched.clock import Clock, SystemClock
from workers.sched.due import DueQueue
from workers.sched.executor import BoundedExecutor
from workers.sched.mailbox import BatchSystem
from workers.worker.maintainer import Command, Due, Maintainer, MaintainerEnv, Stop, Update
from workers.worker.runner import Runner, SparkRunner

log = logging.getLogger(__name__)
Record = dict[str, Any]
FULL_HEARTBEAT_EVERY_S = 10.0
RECONCILE_EVERY_S = 30.0
STOP_RUN_TIMEOUT_S = 30.0


class Manager(LoopRole):
    def __init__(
        self,
        settings: Settings,
        *,
        runner: Runner | None = None,
        clock: Clock | None = None,
        pollers: int = 0,
    ) -> None:
        self.settings = settings
        self.worker_id = settings.worker_id
        self.clock = clock or SystemClock()
        self.runner = runner or SparkRunner(settings)
        self.executor = BoundedExecutor(
            settings.max_concurrent_runs,
            queue_size=max(64, settings.max_concurrent_runs),
            clock=self.clock,
            name="runs",
        )
        self.due: DueQueue[str] = DueQueue()
        # pollers=0: maintainers are handled on the loop thread in step() (deterministic for tests).
        self.maintainers = BatchSystem(pollers=max(1, pollers), name="maintainers")
        self._pollers = pollers
        self.owned: dict[str, Maintainer] = {}
        self.partition_of: dict[str, int] = {}
        self._outbox: deque[tuple[str, str, Record]] = deque()
        self._dirty: set[str] = set()
        self._removed: set[str] = set()
        self._lock = threading.Lock()
        self._last_heartbeat = float("-inf")
        self._last_full = float("-inf")
        self._last_reconcile = self.clock.monotonic()
        self._full_requested = True
        self.coordinator_epoch = 0
        self._commands = TypedConsumer(settings, group_id=settings.group("workers"))
        self._task_commands = TypedConsumer(settings, group_id=settings.group("workers.maintainer"))
        self._producer = TypedProducer(settings)

    # -- ownership ---------------------------------------------------------------------------------
    def start(self) -> None:
        self._commands.subscribe(["manager"], on_assign=self._on_assign, on_revoke=self._on_revoke)
        if self._pollers:
            self.maintainers.start()

    def _on_assign(self, partitions: list[tuple[str, int]]) -> None:
        owned = sorted(p for topic, p in partitions if topic == "manager")
        if not owned:
            return
        for partition in owned:
            for task in restore_catalog(self.settings, [partition]).values():
                self.add_task(task, partition)
        self._task_commands.assign("maintainer", owned)
        self._full_requested = True
        log.info("%s assigned partitions %s: %d tasks", self.worker_id, owned, len(self.owned))

    def _on_revoke(self, partitions: list[tuple[str, int]]) -> None:
        lost = {p for topic, p in partitions if topic == "manager"}
        if not lost:
            return
        leaving = [task_id for task_id, p in self.partition_of.items() if p in lost]
        for task_id in leaving:
            self._stop(task_id)
        # Runs are cancelled and awaited so the next owner never races a live Spark job of ours.
        for task_id in leaving:
            self._await_run_end(task_id)
            self.owned.pop(task_id, None)
            self.partition_of.pop(task_id, None)
            self.maintainers.unregister(task_id)
        self._task_commands.unassign("maintainer", sorted(lost))
        self._publish_outbox()
        self._send_heartbeat(full=False, removed=leaving)
        log.info("%s revoked partitions %s", self.worker_id, sorted(lost))

    def _env(self) -> MaintainerEnv:
        return MaintainerEnv(
            worker_id=self.worker_id,
            clock=self.clock,
            executor=self.executor,
            due=self.due,
            runner=self.runner,
            send_to_self=self.maintainers.send,
            publish=self._enqueue,
            status_changed=self._mark_dirty,
            run_timeout_s=self.settings.run_timeout_s,
        )

    def add_task(self, task: Record, partition: int) -> None:
        existing = self.owned.get(task["task_id"])
        if existing is not None:
            self.maintainers.send(task["task_id"], Update(task))
            return
        maintainer = Maintainer(task, self._env())
        self.owned[task["task_id"]] = maintainer
        self.partition_of[task["task_id"]] = partition
        self.maintainers.register(task["task_id"], maintainer)
        self._mark_dirty(task["task_id"])

    def _await_run_end(self, task_id: str) -> None:
        """Wait for a stopped task's run to end and deliver its outcome (history records it)."""
        if not self.executor.wait_idle(task_id, STOP_RUN_TIMEOUT_S):
            log.warning("%s: run still going %ss after cancellation", task_id, STOP_RUN_TIMEOUT_S)
        if not self._pollers:
            self.maintainers.run_pending()

    def _remove(self, task_id: str, *, drop_data: bool) -> None:
        """Stop a task's maintainer for good (a dropped task); its run is cancelled and awaited."""
        maintainer = self.owned.get(task_id)
        if maintainer is None:
            return
        self._stop(task_id)
        self._await_run_end(task_id)
        if drop_data:
            self.runner.drop(maintainer.task)
        self.owned.pop(task_id, None)
        self.partition_of.pop(task_id, None)
        self.maintainers.unregister(task_id)
        with self._lock:
            self._removed.add(task_id)
            self._dirty.discard(task_id)

    def _stop(self, task_id: str) -> None:
        if task_id in self.owned:
            self.maintainers.send(task_id, Stop())
            if not self._pollers:
                self.maintainers.run_pending()

    # -- commands ----------------------------------------------------------------------------------
    def _on_manager_command(self, message: Message) -> None:
        command = message.value
        if command is None:
            return
        if command["coordinator_epoch"] < self.coordinator_epoch:
            log.info(
                "ignoring command from an older coordinator (%s < %s)",
                command["coordinator_epoch"],
                self.coordinator_epoch,
            )
            return
        self.coordinator_epoch = command["coordinator_epoch"]
        kind, task_id = command["kind"], command["task_id"]
        if kind == "ADD_MAINTAINER" and command["task"] is not None:
            self.add_task(command["task"], message.partition)
        elif kind == "REMOVE_MAINTAINER":
            maintainer = self.owned.get(task_id)
            if maintainer is not None and command["epoch"] > maintainer.task["epoch"]:
                self._remove(task_id, drop_data=True)
        elif kind == "BOOTSTRAP":
            self._full_requested = True

    def _on_task_command(self, message: Message) -> None:
        command = message.value
        if command is None or command["coordinator_epoch"] < self.coordinator_epoch:
            return
        if command["task_id"] in self.owned:
            self.maintainers.send(command["task_id"], Command(command))

    # -- outbox and heartbeats ---------------------------------------------------------------------
    def _enqueue(self, topic: str, key: str, record: Record) -> None:
        with self._lock:
            self._outbox.append((topic, key, record))

    def _mark_dirty(self, task_id: str) -> None:
        with self._lock:
            self._dirty.add(task_id)

    def _publish_outbox(self) -> None:
        while True:
            with self._lock:
                if not self._outbox:
                    break
                topic, key, record = self._outbox.popleft()
            self._producer.send(topic, key, record)

    def _send_heartbeat(self, *, full: bool, removed: list[str] | None = None) -> None:
        with self._lock:
            dirty, self._dirty = self._dirty, set()
            gone, self._removed = self._removed, set()
        ids = list(self.owned) if full else [t for t in dirty if t in self.owned]
        statuses = [self.owned[t].status() for t in ids]
        gone |= set(removed or [])
        if not statuses and not gone and not full:
            return
        self._producer.send(
            "coordinator",
            self.worker_id,
            {
                "worker_id": self.worker_id,
                "sent_at": self.clock.wall_ms(),
                "coordinator_epoch": self.coordinator_epoch,
                "full": full,
                "statuses": statuses,
                "removed": sorted(gone),
            },
        )
        self._producer.flush()

    # -- loop --------------------------------------------------------------------------------------
    def step(self, timeout_s: float = 0.05) -> None:
        """One turn of the loop: commands in, due tasks dispatched, records and heartbeats out."""
        next_due = self.due.next_due()
        now = self.clock.monotonic()
        wait = timeout_s if next_due is None else max(0.0, min(timeout_s, next_due - now))
        message = self._commands.poll(wait)
        if message is not None:
            self._on_manager_command(message)
            self._commands.commit(message)
        while (task_message := self._task_commands.poll(0)) is not None:
            self._on_task_command(task_message)
            self._task_commands.commit(task_message)
        self.tick()
        self._publish_outbox()
        now = self.clock.monotonic()
        if now - self._last_reconcile >= RECONCILE_EVERY_S:
            self._reconcile()
            self._last_reconcile = now
        full = self._full_requested or now - self._last_full >= FULL_HEARTBEAT_EVERY_S
        if full or now - self._last_heartbeat >= self.settings.heartbeat_interval_s:
            self._send_heartbeat(full=full)
            self._last_heartbeat = now
            if full:
                self._last_full, self._full_requested = now, False

    def tick(self) -> int:
        """Hand every due task to its maintainer and let maintainers handle their mail; no Kafka I/O."""
        due = self.due.pop_due(self.clock.monotonic())
        for task_id in due:
            self.maintainers.send(task_id, Due())
        if not self._pollers:
            self.maintainers.run_pending()
        return len(due)

    def _reconcile(self) -> None:
        """Catch anything a missed command left behind: the catalog of our partitions is the truth."""
        owned = sorted(set(self.partition_of.values()))
        if not owned:
            return
        for partition in owned:
            catalog = restore_catalog(self.settings, [partition])
            for task_id, task in catalog.items():
                current = self.owned.get(task_id)
                if current is None or task["epoch"] > current.task["epoch"]:
                    self.add_task(task, partition)
            for task_id in [t for t, p in self.partition_of.items() if p == partition and t not in catalog]:
                self._remove(task_id, drop_data=False)

    def close(self) -> None:
        """Leave the group cleanly: revocation stops every maintainer before the partitions go."""
        self._commands.close()
        self._task_commands.close()
        self._publish_outbox()
        self._producer.flush()
        self.executor.shutdown(cancel_running=True)
        if self._pollers:
            self.maintainers.stop()
