"""The coordinator loop: DDL in, catalog + commands out, heartbeats folded into the catalog.

Its clients come from a ``Bus`` (Kafka by default; tests drive ``step()`` over an in-memory one).

Election is Kafka's: every coordinator joins one consumer group on the single-partition DDL
topic; the member holding that partition is the active coordinator. On activation it rebuilds
the catalog from the compacted topic and only then opens its transactional producer, whose
fixed transactional.id fences any older active coordinator that may still be running.
Each DDL record's effects and its offset commit in one Kafka transaction, so a DDL is applied
exactly once even across a failover.

Riding out the broker: a transaction that fails (the broker away, a producer librdkafka reports
fatal) is not aborted in place: the producer is dropped and the coordinator activates again — a new
producer whose ``init_transactions`` aborts whatever the old one left open, the catalog read again,
the DDL position rewound to the committed offset. During a long outage the group session expires and
the DDL partition is lost; the consumer rejoins when the broker is back, and whoever gets the
partition goes on from the committed offset. A DDL record whose handling raises anything but a bus
error (a poison record) goes to the dlq with the reason, gets an error DdlResult if its event id can
be read, and is committed past in the same transaction: the next DDL is applied.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping
from typing import ClassVar

from workers.bus import Bus, BusConsumer, BusProducer, KafkaBus
from workers.catalog.errors import ErrorCode, task_error
from workers.config import Settings
from workers.coordinator.freshness import CHECK_EVERY_S, FreshnessWatch
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
from workers.coordinator.health import HealthReporter, is_coordinator_heartbeat
from workers.freshness import BaseCommits, WarehouseCommits
from workers.kafka.typed import BusError, Message
from workers.role import LoopRole
from workers.sched.clock import Clock, SystemClock
from workers.sched.metrics import SchedMetrics, process_metrics
from workers.topics import topic_spec
from workers.warehouse import latest_version, read_commit, table_columns, table_exists

log = logging.getLogger(__name__)
DdlHandler = Callable[[Record, Mapping[str, Record], Context], Effects]
# Transaction calls give up after this long (each, retried by TXN_RETRY): while the broker is away the
# loop must come back to stand by and rejoin rather than hang in commit_transaction.
TXN_TIMEOUT_S = 5.0


class Coordinator(LoopRole):
    role_name: ClassVar[str] = "coordinator"

    def __init__(
        self,
        settings: Settings,
        *,
        bus: Bus | None = None,
        clock: Clock | None = None,
        table_exists_fn: Callable[[str], bool] | None = None,
        table_columns_fn: Callable[[str], tuple[str, ...] | None] | None = None,
        ddl_handler: DdlHandler | None = None,
        base_commits: BaseCommits | None = None,
        metrics: SchedMetrics | None = None,
    ) -> None:
        self.settings = settings
        self.bus: Bus = bus if bus is not None else KafkaBus(settings)
        self.clock = clock or SystemClock()
        self.metrics = metrics if metrics is not None else process_metrics()
        self._table_exists = table_exists_fn or (lambda name: table_exists(settings, name))
        self._table_columns = table_columns_fn or (lambda name: table_columns(settings, name))
        self._handle_ddl = ddl_handler or handle_ddl
        self.tasks: dict[str, Record] = {}
        self.active = False
        # The group gave us the DDL partition: we are (or must become again) the active coordinator.
        self._owns_ddl = False
        self.coordinator_epoch = 0
        self._pending = Effects()
        self._last_flush = 0.0
        self._ddl = self.bus.consumer(settings.group("coordinator"))
        self._heartbeats = self.bus.consumer(None)
        self._producer: BusProducer | None = None
        self._last_seen: dict[str, float] = {}  # worker id → monotonic time of its last heartbeat
        # Per task: restarts after its owner went silent, and the wall ms of the latest one (a run
        # completed since clears both: see recovered_tasks).
        self._restarts: dict[str, int] = {}
        self._restarted_at: dict[str, int] = {}
        # Freshness goals (FRESHNESS / TARGET LAG): decided while active, from the bases' Delta logs.
        self._freshness = FreshnessWatch()
        self._base_commits = base_commits or WarehouseCommits(
            lambda table: latest_version(settings, table, quick=True),  # on the loop: one attempt
            lambda table, v: read_commit(settings, table, v),
        )
        self._last_freshness_check = float("-inf")
        self.metrics.track_freshness(self._freshness.gauges)
        self._health = HealthReporter(settings.worker_id, self.bus, self.clock)

    def loop_metrics(self) -> SchedMetrics:
        return self.metrics

    # -- election ---------------------------------------------------------------------------------
    def start(self) -> None:
        # KIP-848: how fast a standby takes over is the group's (broker-side) session timeout.
        self.bus.configure_group(self.settings.group("coordinator"))
        self._ddl.subscribe(["ddl"], on_assign=self._on_assign, on_revoke=self._on_revoke)

    def _on_assign(self, partitions: list[tuple[str, int]]) -> None:
        if ("ddl", 0) not in partitions or self.active:
            return
        self._owns_ddl = True
        try:
            self._activate(rewind=False)  # a fresh assignment starts at the committed offset
        except Exception as exc:  # inside poll: never raise; the next step tries again
            log.warning("coordinator activation failed, retrying: %s", exc)
            self._stand_by()

    def _activate(self, *, rewind: bool) -> None:
        if rewind:
            # Records read while not active were not applied: read them again.
            self._ddl.seek_to_committed()
        self.tasks = self.bus.read_catalog()
        self.coordinator_epoch = self.clock.wall_ms()
        self._producer = self.bus.producer(
            transactional_id=self.settings.group("coordinator"), txn_timeout_s=TXN_TIMEOUT_S
        )
        self._producer.init_transactions()  # also aborts a transaction a dropped producer left open
        self._heartbeats.unassign("coordinator", [0])
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
        if ("ddl", 0) not in partitions:
            return
        self._owns_ddl = False
        if self.active or self._producer is not None:
            self._stand_by()

    def _stand_by(self) -> None:
        self.active = False
        self._pending = Effects()
        self._freshness.reset()
        try:
            self._heartbeats.unassign("coordinator", [0])
        except Exception as exc:  # a local call; whatever it says, the next activation assigns afresh
            log.info("coordinator: unassigning heartbeats: %s", exc)
        producer, self._producer = self._producer, None
        if producer is not None:
            # Nothing to deliver: every transaction was committed, or is void (the next producer's
            # init_transactions aborts it). Not flushed: the broker may be away.
            producer.close(timeout_s=0)
        log.info("coordinator standing by")

    # -- loop -------------------------------------------------------------------------------------
    def context(self) -> Context:
        return Context(
            now_ms=self.clock.wall_ms(),
            coordinator_epoch=self.coordinator_epoch,
            table_exists=self._table_exists,
            table_columns=self._table_columns,
            owner_rule=self.settings.owner_rule,
            admin_principals=self.settings.admin_principals,
        )

    def step(self, timeout_s: float = 0.2) -> None:
        loop_error = self.last_error.summary() if self.last_error is not None else None
        self._health.report(
            active=self.active, coordinator_epoch=self.coordinator_epoch, loop_error=loop_error
        )
        try:
            self._step(timeout_s)
        except BusError as exc:
            if exc.fenced and (self.active or self._owns_ddl):
                # Another coordinator took over (its transactional.id fenced ours): nothing of this
                # transaction was applied. Stand by until the group gives us the partition again.
                log.warning("coordinator fenced, standing by: %s", exc)
                self._owns_ddl = False
                self._stand_by()
                return
            self._start_over(exc)
            raise
        except Exception as exc:
            self._start_over(exc)
            raise

    def _start_over(self, exc: Exception) -> None:
        """After a failed transaction (or a bug): drop the producer and, while we hold the DDL
        partition, activate again from the committed DDL offset on the next step (the loop backs off
        first). Heartbeat effects that were in the transaction are derived again from the next ones."""
        if self.active or self._producer is not None:
            log.warning("coordinator starts over from the committed DDL offset: %s", exc)
            self._stand_by()

    def _poll_ddl(self, timeout_s: float) -> Message | None:
        try:
            return self._ddl.poll(timeout_s)  # drives the group: may call _on_assign / _on_revoke
        except BusError as exc:
            if not exc.fatal or exc.fenced:
                raise
        # librdkafka gave up on the group consumer (not a fence): stand by and join again.
        log.warning("coordinator: the DDL consumer failed fatally; rebuilding it")
        self._owns_ddl = False
        self._stand_by()
        try:
            self._ddl.close()
        except Exception as close_error:
            log.info("coordinator: closing the failed consumer: %s", close_error)
        self._ddl = self.bus.consumer(self.settings.group("coordinator"))
        self._ddl.subscribe(["ddl"], on_assign=self._on_assign, on_revoke=self._on_revoke)
        return None

    def _step(self, timeout_s: float) -> None:
        message = self._poll_ddl(timeout_s)
        if self._owns_ddl and not self.active:
            self._activate(rewind=True)
            return  # the record polled above (if any) comes again from the committed offset
        if message is not None and self.active:
            self._apply_ddl(message)
        if not self.active:
            return
        for _ in range(100):
            heartbeat = self._heartbeats.poll(0)
            if heartbeat is None:
                break
            if heartbeat.value is not None:
                self._on_heartbeat(heartbeat)
        self._check_liveness()
        self._check_freshness()
        # Catalog-only updates (checkpoints, last runs) are batched; commands — an epoch raised for a
        # new owner, a restart — go out at once: a moved task waits for them (failover latency); so
        # does a task's new state (WARNING while its runs fail, a drop done): `mvs status` shows it.
        commands = self._pending.manager or self._pending.maintainer
        due = self.clock.monotonic() - self._last_flush >= self.settings.heartbeat_interval_s
        if self._pending and (commands or due or self._state_changes()):
            pending, self._pending = self._pending, Effects()
            self._publish(pending, consume=None)
            self._last_flush = self.clock.monotonic()

    def _state_changes(self) -> bool:
        """Whether a pending catalog update changes a task's state or removes a task."""
        for task_id, task in self._pending.catalog.items():
            before = self.tasks.get(task_id)
            if task is None or before is None or task["state"] != before["state"]:
                return True
        return False

    def _on_heartbeat(self, message: Message) -> None:
        heartbeat = message.value
        assert heartbeat is not None
        if is_coordinator_heartbeat(heartbeat):
            return  # a coordinator's own health (this one's, a standby's): for `mvs status` only
        try:
            self._last_seen[heartbeat["worker_id"]] = self.clock.monotonic()
            self._note_recoveries(heartbeat)
            effects = handle_heartbeat(heartbeat, self._view(), self.context())
        except Exception:
            log.exception("coordinator: skipping heartbeat %s@%d: %r", message.key, message.offset, heartbeat)
            return
        self._pending.merge(effects)

    def _note_recoveries(self, heartbeat: Record) -> None:
        self._forget_restarts(recovered_tasks(heartbeat, self._restarted_at))

    def _forget_restarts(self, task_ids: Iterable[str]) -> None:
        for task_id in task_ids:
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
            why = task["error"]["message"] if task["error"] else f"owner went silent; {task['state']}"
            log.warning("%s: %s (epoch %d)", task_id, why, task["epoch"])
        for worker in silent:
            del self._last_seen[worker]
        if effects:
            self._pending.merge(effects)

    def _check_freshness(self) -> None:
        if self.clock.monotonic() - self._last_freshness_check >= CHECK_EVERY_S:
            self._last_freshness_check = self.clock.monotonic()
            view, now_ms = self._view(), self.clock.wall_ms()
            self._pending.freshness += self._freshness.check(
                view, self._base_commits, now_ms, self.coordinator_epoch
            )

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
        try:
            effects = self._handle_ddl(message.value, self.tasks, self.context())
            for result in effects.results:
                if not result["accepted"]:
                    log.warning(
                        "DDL %s refused: %s",
                        message.value.get("sql") or message.value.get("action"),
                        result["error"]["message"],
                    )
            self._publish(effects, consume=self._ddl)
            # A user's RESUME / ALTER / DROP starts a task's crash count over: only silent owners in
            # a row make it FAILED, not those before the user brought it back.
            self._forget_restarts(effects.catalog)
        except BusError:
            raise
        except Exception as exc:  # a bug, or an effect that cannot be encoded: a poison record
            log.exception(
                "DDL %s[%d]@%d cannot be applied; dead-lettered",
                message.topic,
                message.partition,
                message.offset,
            )
            self._dead_letter_ddl(message, f"{type(exc).__name__}: {exc}")

    def _dead_letter_ddl(self, message: Message, reason: str) -> None:
        """The poison record to the dlq, an error answer to its sender, and the offset past it — in one
        transaction, so no coordinator (this one or a standby) trips over it again."""
        producer = self._producer
        assert producer is not None, "only the active coordinator publishes"
        event_id = (message.value or {}).get("event_id")
        result = None
        if isinstance(event_id, str):
            error = task_error(
                ErrorCode.INVALID_CONFIG,
                f"the coordinator could not apply this DDL: {reason}",
                at_ms=self.clock.wall_ms(),
            )
            result = {
                "event_id": event_id,
                "task_id": None,
                "accepted": False,
                "error": error,
                "at": error["at"],
            }
        producer.begin()
        try:
            producer.send_dead_letter(message, reason)
            if result is not None:
                producer.send("ddl.results", event_id, result)
            producer.send_offsets(self._ddl)
            producer.commit()
        except BaseException:
            self._abort(producer)
            raise

    def _abort(self, producer: BusProducer) -> None:
        """Abort in place when the broker is there (a record that could not be encoded); if even that
        fails, the loop starts over with a new producer, whose init_transactions aborts this one."""
        try:
            producer.abort()
        except BusError as exc:
            log.warning("coordinator: abort failed: %s", exc)
            self._stand_by()

    def _publish(self, effects: Effects, *, consume: BusConsumer | None) -> None:
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
            for event in effects.freshness:
                producer.send("freshness", event["task_id"], event)
            if consume is not None:
                producer.send_offsets(consume)
            producer.commit()
        except BusError:
            raise  # the broker is away or the producer unusable: the loop starts over (see step)
        except BaseException:
            self._abort(producer)
            raise
        for task_id, task in effects.catalog.items():
            if task is None:
                self.tasks.pop(task_id, None)
            else:
                self.tasks[task_id] = task
        for event in effects.freshness:
            self.metrics.record_freshness_event(event["state"])

    def close(self) -> None:
        self.metrics.track_freshness(None)
        self._ddl.close()
        self._heartbeats.close()
        self._health.close()
        if self._producer is not None:
            self._producer.close(timeout_s=5.0)
