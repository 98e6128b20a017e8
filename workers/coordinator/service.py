"""The coordinator loop: DDL in, catalog + commands out, heartbeats folded into the catalog.

Election is Kafka's: every coordinator joins one consumer group on the single-partition DDL
topic; the member holding that partition is the active coordinator. On activation it rebuilds
the catalog from the compacted topic and only then opens its transactional producer, whose
fixed transactional.id fences any older active coordinator that may still be running.
Each DDL record's effects and its offset commit in one Kafka transaction, so a DDL is applied
exactly once even across a failover.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from workers.catalog.store import restore_catalog
from workers.config import Settings
from workers.coordinator.handlers import (
    Context,
    Effects,
    Record,
    bootstrap_commands,
    handle_ddl,
    handle_heartbeat,
    recovered_tasks,
    restart_silent_tasks,
)
from workers.kafka.admin import configure_group
from workers.kafka.typed import BusError, Message, TypedConsumer, TypedProducer
from workers.role import LoopRole
from workers.sched.clock import Clock, SystemClock
from workers.topics import topic_spec
from workers.warehouse import table_exists

log = logging.getLogger(__name__)


class Coordinator(LoopRole):
    def __init__(
        self,
        settings: Settings,
        *,
        clock: Clock | None = None,
        table_exists_fn: Callable[[str], bool] | None = None,
    ) -> None:
        self.settings = settings
        self.clock = clock or SystemClock()
        self._table_exists = table_exists_fn or (lambda name: table_exists(settings, name))
        self.tasks: dict[str, Record] = {}
        self.active = False
        self.coordinator_epoch = 0
        self._pending = Effects()
        self._last_flush = 0.0
        self._ddl = TypedConsumer(settings, group_id=settings.group("coordinator"))
        self._heartbeats = TypedConsumer(settings, group_id=None)
        self._producer: TypedProducer | None = None
        self._last_seen: dict[str, float] = {}  # worker id → monotonic time of its last heartbeat
        # Per task: restarts after its owner went silent, and the wall ms of the latest one (a run
        # completed since clears both: see recovered_tasks).
        self._restarts: dict[str, int] = {}
        self._restarted_at: dict[str, int] = {}

    # -- election ---------------------------------------------------------------------------------
    def start(self) -> None:
        # KIP-848: how fast a standby takes over is the group's (broker-side) session timeout.
        configure_group(self.settings, self.settings.group("coordinator"))
        self._ddl.subscribe(["ddl"], on_assign=self._on_assign, on_revoke=self._on_revoke)

    def _on_assign(self, partitions: list[tuple[str, int]]) -> None:
        if ("ddl", 0) not in partitions or self.active:
            return
        self.tasks = restore_catalog(self.settings)
        self.coordinator_epoch = self.clock.wall_ms()
        self._producer = TypedProducer(self.settings, transactional_id=self.settings.group("coordinator"))
        self._producer.init_transactions()
        self._heartbeats.assign("coordinator", [0], from_beginning=False)
        self.active = True
        # Owners we have not heard from yet get a full timeout from now (seed 002 bootstrap).
        now = self.clock.monotonic()
        self._last_seen = {t["owner"]: now for t in self.tasks.values() if t["owner"]}
        self._publish(
            Effects(manager=bootstrap_commands(topic_spec("manager").partitions, self.context())),
            consume=None,
        )
        log.info("coordinator active (epoch %s) with %d tasks", self.coordinator_epoch, len(self.tasks))

    def _on_revoke(self, partitions: list[tuple[str, int]]) -> None:
        if ("ddl", 0) not in partitions or not self.active:
            return
        self._stand_by()

    def _stand_by(self, *, fenced: bool = False) -> None:
        self.active = False
        self._pending = Effects()
        self._heartbeats.unassign("coordinator", [0])
        producer, self._producer = self._producer, None
        if producer is not None and not fenced:
            producer.close()
        # A fenced producer is dropped unflushed: its transaction is void anyway, and librdkafka's
        # flush on a fatally failed producer raises SystemError.
        log.info("coordinator standing by")

    # -- loop -------------------------------------------------------------------------------------
    def context(self) -> Context:
        return Context(
            now_ms=self.clock.wall_ms(),
            coordinator_epoch=self.coordinator_epoch,
            table_exists=self._table_exists,
            owner_rule=self.settings.owner_rule,
            admin_principals=self.settings.admin_principals,
        )

    def step(self, timeout_s: float = 0.2) -> None:
        try:
            self._step(timeout_s)
        except BusError as exc:
            if not self.active:
                raise
            if exc.fenced or exc.fatal:
                # Another coordinator took over (its transactional.id fenced ours): nothing of this
                # transaction was applied. Stand by; the group revokes the DDL partition from us.
                log.warning("coordinator fenced, standing by: %s", exc)
                self._stand_by(fenced=True)
                return
            # The transaction was aborted: redo from the last committed DDL offset. Heartbeat effects
            # that were in it are derived again from the next heartbeats (self.tasks is unchanged).
            log.warning("coordinator transaction failed, retrying from the committed DDL offset: %s", exc)
            self._ddl.seek_to_committed()

    def _step(self, timeout_s: float) -> None:
        message = self._ddl.poll(timeout_s)
        if message is not None and self.active:
            self._apply_ddl(message)
        if not self.active:
            return
        for _ in range(100):
            heartbeat = self._heartbeats.poll(0)
            if heartbeat is None:
                break
            if heartbeat.value is not None:
                self._last_seen[heartbeat.value["worker_id"]] = self.clock.monotonic()
                self._note_recoveries(heartbeat.value)
                effects = handle_heartbeat(heartbeat.value, self._view(), self.context())
                self._pending.merge(effects)
        self._check_liveness()
        # Catalog-only updates (checkpoints, last runs) are batched; commands — an epoch raised for a
        # new owner, a restart — go out at once: a moved task waits for them (failover latency).
        commands = self._pending.manager or self._pending.maintainer
        due = self.clock.monotonic() - self._last_flush >= self.settings.heartbeat_interval_s
        if self._pending and (commands or due):
            pending, self._pending = self._pending, Effects()
            self._publish(pending, consume=None)
            self._last_flush = self.clock.monotonic()

    def _note_recoveries(self, heartbeat: Record) -> None:
        for task_id in recovered_tasks(heartbeat, self._restarted_at):
            self._restarts.pop(task_id, None)
            self._restarted_at.pop(task_id, None)

    def _check_liveness(self) -> None:
        now = self.clock.monotonic()
        silent = {w for w, seen in self._last_seen.items() if now - seen > self.settings.heartbeat_timeout_s}
        if not silent:
            return
        effects = restart_silent_tasks(self._view(), silent, self._restarts, self.context())
        for task_id, task in effects.catalog.items():
            self._restarts[task_id] = self._restarts.get(task_id, 0) + 1
            self._restarted_at[task_id] = self.clock.wall_ms()
            assert task is not None
            log.warning("%s: %s (epoch %d)", task_id, task["error"]["message"], task["epoch"])
        for worker in silent:
            del self._last_seen[worker]
        if effects:
            self._pending.merge(effects)

    def _view(self) -> dict[str, Record]:
        """The catalog including not yet flushed heartbeat updates."""
        view = dict(self.tasks)
        for key, value in self._pending.catalog.items():
            if value is None:
                view.pop(key, None)
            else:
                view[key] = value
        return view

    def _apply_ddl(self, message: Message) -> None:
        if message.value is None:
            return
        # Pending heartbeat updates go first, so the DDL sees (and may overwrite) the latest state.
        if self._pending:
            pending, self._pending = self._pending, Effects()
            self._publish(pending, consume=None)
        effects = handle_ddl(message.value, self.tasks, self.context())
        for result in effects.results:
            if not result["accepted"]:
                log.warning(
                    "DDL %s refused: %s",
                    message.value.get("sql") or message.value["action"],
                    result["error"]["message"],
                )
        self._publish(effects, consume=self._ddl)

    def _publish(self, effects: Effects, *, consume: TypedConsumer | None) -> None:
        producer = self._producer
        assert producer is not None, "only the active coordinator publishes"
        producer.begin()
        try:
            for task_id, task in effects.catalog.items():
                if task is None:
                    producer.send_tombstone("catalog", task_id)
                else:
                    producer.send("catalog", task_id, task)
            for command in effects.manager:
                # A BOOTSTRAP goes to one named partition, so that every partition's owner gets one.
                broadcast = command["kind"] == "BOOTSTRAP"
                partition = int(command["task_id"].rsplit("/", 1)[1]) if broadcast else None
                producer.send("manager", command["task_id"], command, partition=partition)
            for command in effects.maintainer:
                producer.send("maintainer", command["task_id"], command)
            for result in effects.results:
                producer.send("ddl.results", result["event_id"], result)
            if consume is not None:
                producer.send_offsets(consume)
            producer.commit()
        except BaseException:
            producer.abort()
            raise
        for task_id, task in effects.catalog.items():
            if task is None:
                self.tasks.pop(task_id, None)
            else:
                self.tasks[task_id] = task

    def close(self) -> None:
        self._ddl.close()
        self._heartbeats.close()
        if self._producer is not None:
            self._producer.close()
