"""The manager: one per worker process; Kafka's consumer group decides which tasks it owns.

Owning partition p of the manager topic means owning every task whose key hashes to p. On
assignment the manager restores those tasks from partition p of the compacted catalog and
starts their maintainers, and starts reading partition p of the maintainer topic (so a
per-task command reaches only the owner). On revocation it stops those maintainers and cancels
their runs; it waits up to REVOKE_WAIT_S for them to end, then releases the partition (a run that
cannot stop yet drains in the background, recorded when it ends).

A maintainer runs only under an epoch the coordinator issued to this worker by name: a task
whose record names another owner, or none (new, restarted, or restored after its partition moved
here), waits. The manager claims it in a heartbeat at once, the coordinator raises the epoch with
this worker as owner (ADD_MAINTAINER), and only then does a maintainer start. So a new owner never
shares an epoch with an old one that is still alive (a zombie: frozen, partitioned), and Delta's
txnVersion (epoch first) skips whatever the old one commits after the new one did.

The loop is ``step()``, run until a stop event; tests drive it step by step.

Riding out the broker: nothing in ``step()`` waits for the broker. Run records wait in librdkafka
(no local timeout) and are re-queued if a delivery fails anyway; a heartbeat is skipped while the
previous one is undelivered, and the first one delivered after an outage is followed by a full
snapshot (the coordinator takes a full one as the truth). Catalog reads (restore, reconcile,
unanswered claims) are put off while the bus looks away and retried on a later step. The group
session expires during a long outage: the partitions are lost (``_on_revoke``) and the consumer
rejoins by itself when the broker is back. A producer librdkafka reports fatal is rebuilt.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any, ClassVar

from workers.catalog.store import restore_catalog
from workers.config import Settings
from workers.kafka.admin import configure_group
from workers.kafka.producer import NEVER_TIME_OUT
from workers.kafka.typed import BusError, Message, TypedConsumer, TypedProducer, partition_for
from workers.role import LoopRole
from workers.sched.clock import Clock, SystemClock
from workers.sched.due import DueQueue
from workers.sched.executor import BoundedExecutor
from workers.sched.mailbox import BatchSystem
from workers.sched.metrics import SchedMetrics, TaskGauges, process_metrics
from workers.topics import topic_spec
from workers.worker.maintainer import Command, Due, Maintainer, MaintainerEnv, Stop, Update
from workers.worker.outbox import Outbox
from workers.worker.runner import Runner, SparkRunner

log = logging.getLogger(__name__)
Record = dict[str, Any]
PARTITIONS = topic_spec("manager").partitions
FULL_HEARTBEAT_EVERY_S = 10.0
RECONCILE_EVERY_S = 30.0
STOP_RUN_TIMEOUT_S = 30.0
REVOKE_WAIT_S = 0.5  # how long a revocation waits for its cancelled runs before letting go
# Coordinator epochs are activation wall times; one further ahead than any clock skew is forged.
MAX_CLOCK_SKEW_MS = 86_400_000
# A heartbeat undelivered for this long means the broker is away: catalog reads wait for it to be back.
BUS_SUSPECT_S = 3.0
CATALOG_RETRY_S = 5.0  # a failed catalog read (reconcile) is tried again after this long


class Manager(LoopRole):
    role_name: ClassVar[str] = "worker"

    def __init__(
        self,
        settings: Settings,
        *,
        runner: Runner | None = None,
        clock: Clock | None = None,
        pollers: int = 0,
        metrics: SchedMetrics | None = None,
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
        self.partitions: set[int] = set()  # manager partitions assigned to us
        # Tasks not (yet) issued to us — new, restarted, or moved here: (latest record, monotonic time
        # it arrived), kept until the coordinator raises the epoch naming us (see the module doc).
        self.waiting: dict[str, tuple[Record, float]] = {}
        # Maintainers of revoked tasks whose cancelled run has not ended yet (see _on_revoke).
        self.draining: dict[str, Maintainer] = {}
        # Dropped tasks whose cancelled run has not ended: their data goes when it has (see _remove);
        # a task of the same id created meanwhile waits in _deferred until then.
        self._drop_after_drain: dict[str, Record] = {}
        self._deferred: dict[str, tuple[Record, int]] = {}
        self._unrestored: set[int] = set()  # assigned partitions whose catalog read failed: retried
        self._heartbeat_pending_since: float | None = None  # monotonic send time of an undelivered one
        self._sent_loop_error: str | None = None
        self._producer_failed = False  # librdkafka reported the producer fatal: rebuild it
        self._outbox = Outbox(self.worker_id, on_fatal=self._producer_fatal)
        self._dirty: set[str] = set()
        self._removed: set[str] = set()
        self._lock = threading.Lock()
        # A full snapshot at least every 10 s, and always well within the coordinator's heartbeat
        # timeout (an idle worker sends nothing else), so a short timeout never restarts a live one.
        self._full_every_s = min(FULL_HEARTBEAT_EVERY_S, settings.heartbeat_timeout_s / 3)
        self._last_heartbeat = float("-inf")
        self._last_full = float("-inf")
        self._last_reconcile = self.clock.monotonic()
        self._full_requested = True
        self._claim_now = False  # a new claim: heartbeat at once (it is on the failover path)
        self._closing = False
        self.coordinator_epoch = 0
        self._commands = TypedConsumer(settings, group_id=settings.group("workers"))
        self._task_commands = TypedConsumer(settings, group_id=settings.group("workers.maintainer"))
        self._producer = TypedProducer(settings, config=NEVER_TIME_OUT)
        # Prometheus (issue 4): the executor's counters and each owned task's lag / time to next
        # run, all read at scrape time.
        self.metrics = metrics if metrics is not None else process_metrics()
        self.metrics.track_executor(self.executor)
        self.metrics.track_tasks(self.worker_id, self._task_gauges)

    def loop_metrics(self) -> SchedMetrics:
        return self.metrics

    # -- ownership ---------------------------------------------------------------------------------
    def start(self) -> None:
        # KIP-848: the session timeout (how long a dead worker keeps its tasks) is a group config.
        configure_group(self.settings, self.settings.group("workers"))
        self._commands.subscribe(["manager"], on_assign=self._on_assign, on_revoke=self._on_revoke)
        if self._pollers:
            self.maintainers.start()

    def _on_assign(self, partitions: list[tuple[str, int]]) -> None:
        owned = sorted(p for topic, p in partitions if topic == "manager")
        if not owned:
            return
        self.partitions.update(owned)
        self._restore(owned)

    def _restore(self, partitions: list[int]) -> None:
        """Start the tasks of newly assigned partitions from the catalog, then read their per-task
        commands; a read that fails (the broker went away) is retried on a later step."""
        began = self.clock.monotonic()
        try:
            # One read of all the new partitions: restoring is on the failover path.
            catalog = restore_catalog(self.settings, partitions)
        except BusError as exc:
            log.warning("%s: restoring partitions %s failed, retrying: %s", self.worker_id, partitions, exc)
            self._unrestored.update(partitions)
            return
        self._unrestored.difference_update(partitions)
        for task_id, task in catalog.items():
            self._add_task_safely(task, partition_for(task_id, PARTITIONS))
        self._task_commands.assign("maintainer", partitions)
        self._full_requested = True
        log.info(
            "%s assigned partitions %s: %d tasks, %d waiting for a new epoch (restored in %.0f ms)",
            self.worker_id,
            partitions,
            len(self.owned),
            len(self.waiting),
            (self.clock.monotonic() - began) * 1000,
        )

    def _add_task_safely(self, task: Record, partition: int) -> None:
        """``add_task`` for a record from the bus: one that makes it raise is logged and skipped."""
        try:
            self.add_task(task, partition)
        except Exception:
            log.exception("%s: skipping a task record that cannot be started: %r", self.worker_id, task)

    def _on_revoke(self, partitions: list[tuple[str, int]]) -> None:
        lost = {p for topic, p in partitions if topic == "manager"}
        if not lost:
            return
        self.partitions -= lost
        self._unrestored -= lost
        for task_id in [t for t, (_, p) in self._deferred.items() if p in lost]:
            del self._deferred[task_id]
        leaving = [task_id for task_id, p in self.partition_of.items() if p in lost]
        for task_id in [t for t in self.waiting if partition_for(t, PARTITIONS) in lost]:
            del self.waiting[task_id]
            leaving.append(task_id)
        for task_id in leaving:
            self._stop(task_id)
        # A cancelled run usually ends within a fraction of a second: wait that long, so it is over
        # (and recorded) before the partition goes. But the handoff is never held hostage by a run
        # that cannot stop yet (its Spark may still be starting): that one drains in the background,
        # and whatever it commits is fenced by the epoch the coordinator raises for the new owner.
        # Leaving for good (close): no wait at all — the group hands off first, close() awaits the runs.
        deadline = self.clock.monotonic() + (0.0 if self._closing else REVOKE_WAIT_S)
        for task_id in leaving:
            self.executor.wait_idle(task_id, max(0.0, deadline - self.clock.monotonic()))
        if not self._pollers:
            self.maintainers.run_pending()
        for task_id in leaving:
            maintainer = self.owned.pop(task_id, None)
            self.partition_of.pop(task_id, None)
            if maintainer is not None and maintainer.running is not None:
                self.draining[task_id] = maintainer  # stays registered: its outcome is still recorded
            else:
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
            metrics=self.metrics,
        )

    def _task_gauges(self) -> list[TaskGauges]:
        return [maintainer.gauges() for maintainer in list(self.owned.values())]  # scrape thread: a copy

    def add_task(self, task: Record, partition: int) -> None:
        task_id = task["task_id"]
        if task_id in self._drop_after_drain:
            # Dropped, and its cancelled run has not ended: the new task starts once the old data is gone.
            self._deferred[task_id] = (task, partition)
            return
        if self.draining.pop(task_id, None) is not None:
            self.maintainers.unregister(task_id)  # back here: the old run's outcome no longer matters
        existing = self.owned.get(task_id)
        if existing is not None:
            self.maintainers.send(task_id, Update(task))
            return
        waiting = self.waiting.get(task_id)
        if waiting is not None and task["epoch"] < waiting[0]["epoch"]:
            return  # a replayed older record
        if task["owner"] != self.worker_id:
            # Not issued to us (yet): claim it and wait for the coordinator's epoch naming us.
            since = waiting[1] if waiting is not None else self.clock.monotonic()
            self.waiting[task_id] = (task, since)
            self._mark_dirty(task_id)
            self._claim_now = True
            return
        self.waiting.pop(task_id, None)
        self._start_maintainer(task, partition)

    def _start_maintainer(self, task: Record, partition: int) -> None:
        maintainer = Maintainer(task, self._env())
        self.owned[task["task_id"]] = maintainer
        self.partition_of[task["task_id"]] = partition
        self.maintainers.register(task["task_id"], maintainer)
        self._mark_dirty(task["task_id"])

    def _remove(self, task_id: str, *, drop_data: bool) -> None:
        """Stop a task's maintainer for good (a dropped task). Never waits: a cancelled run that has
        not ended drains in the background (its outcome is still recorded), and the task's data is
        dropped once it has ended (``_reap_drained``), so no run writes the table after the drop."""
        self._deferred.pop(task_id, None)
        waiting = self.waiting.pop(task_id, None)
        if waiting is not None and drop_data:
            self.runner.drop(waiting[0])
        maintainer = self.owned.get(task_id)
        if maintainer is None:
            if waiting is not None:
                with self._lock:
                    self._removed.add(task_id)
                    self._dirty.discard(task_id)
            return
        self._stop(task_id)
        self.owned.pop(task_id, None)
        self.partition_of.pop(task_id, None)
        if maintainer.running is not None:
            self.draining[task_id] = maintainer
            if drop_data:
                self._drop_after_drain[task_id] = maintainer.task
        else:
            self.maintainers.unregister(task_id)
            if drop_data:
                self.runner.drop(maintainer.task)
        with self._lock:
            self._removed.add(task_id)
            self._dirty.discard(task_id)

    def _stop(self, task_id: str) -> None:
        if task_id in self.owned:
            self.maintainers.send(task_id, Stop())
            if not self._pollers:
                self.maintainers.run_pending()

    # -- commands ----------------------------------------------------------------------------------
    def _handle_command(self, message: Message, handler: Callable[[Message], None]) -> None:
        """A command whatever its producer wrote: one that makes its handler raise is logged and
        skipped (the loop goes on; the catalog, reconciled every RECONCILE_EVERY_S, is the truth)."""
        try:
            handler(message)
        except Exception:
            log.exception(
                "%s: skipping %s[%d]@%d: %r",
                self.worker_id,
                message.topic,
                message.partition,
                message.offset,
                message.value,
            )

    def _implausible(self, command: Record) -> bool:
        """A coordinator epoch is the wall time (ms) its coordinator became active: one far in the
        future is not a coordinator's (a forged or corrupt command). Accepting it would make every
        real coordinator look older and silence it for good, so it is refused."""
        if command["coordinator_epoch"] <= self.clock.wall_ms() + MAX_CLOCK_SKEW_MS:
            return False
        log.warning("%s: refusing a command from the future: %r", self.worker_id, command)
        return True

    def _on_manager_command(self, message: Message) -> None:
        command = message.value
        if command is None or self._implausible(command):
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
            current = maintainer.task if maintainer is not None else self.waiting.get(task_id, (None,))[0]
            if current is not None and command["epoch"] > current["epoch"]:
                self._remove(task_id, drop_data=True)
        elif kind == "BOOTSTRAP":
            self._full_requested = True

    def _on_task_command(self, message: Message) -> None:
        command = message.value
        if (
            command is None
            or self._implausible(command)
            or command["coordinator_epoch"] < self.coordinator_epoch
        ):
            return
        if command["task_id"] in self.owned:
            self.maintainers.send(command["task_id"], Command(command))

    # -- outbox and heartbeats ---------------------------------------------------------------------
    def _enqueue(self, topic: str, key: str, record: Record) -> None:
        self._outbox.put(topic, key, record)

    def _mark_dirty(self, task_id: str) -> None:
        with self._lock:
            self._dirty.add(task_id)

    def _publish_outbox(self) -> None:
        self._outbox.publish(self._producer)

    def _producer_fatal(self) -> None:
        self._producer_failed = True

    def _heartbeat_delivered(self, error: BusError | None) -> None:
        sent, self._heartbeat_pending_since = self._heartbeat_pending_since, None
        if error is not None:
            log.warning("%s: heartbeat not delivered: %s", self.worker_id, error)
            self._producer_failed = self._producer_failed or error.fatal
        outage = sent is not None and self.clock.monotonic() - sent >= BUS_SUSPECT_S
        if error is not None or outage:
            # Heartbeats were skipped or lost: the coordinator gets the whole truth next.
            self._full_requested = True

    def _bus_away(self) -> bool:
        """A heartbeat has waited BUS_SUSPECT_S for the broker: reads would only block the loop."""
        sent = self._heartbeat_pending_since
        return sent is not None and self.clock.monotonic() - sent >= BUS_SUSPECT_S

    def _send_heartbeat(self, *, full: bool, removed: list[str] | None = None) -> None:
        if self._heartbeat_pending_since is not None:
            # The previous one is not delivered yet (the broker is away): skip this one; what changed
            # stays marked, and a full one follows the delivery after an outage.
            with self._lock:
                self._removed.update(removed or [])
            self._full_requested = self._full_requested or full
            return
        with self._lock:
            dirty, self._dirty = self._dirty, set()
            gone, self._removed = self._removed, set()
        ids = list(self.owned) if full else [t for t in dirty if t in self.owned]
        statuses = [self.owned[t].status() for t in ids]
        # A claim on each task waiting for its new epoch, at the epoch it arrived with.
        claims = list(self.waiting) if full else [t for t in dirty if t in self.waiting]
        statuses += [_claim(self.waiting[t][0]) for t in claims]
        gone |= set(removed or [])
        loop_error = self.last_error.summary() if self.last_error is not None else None
        if not statuses and not gone and not full and loop_error == self._sent_loop_error:
            return
        self._sent_loop_error = loop_error  # a new one goes out at once (`mvs status` shows it)
        heartbeat = {
            "worker_id": self.worker_id,
            "sent_at": self.clock.wall_ms(),
            "coordinator_epoch": self.coordinator_epoch,
            "full": full,
            "statuses": statuses,
            "removed": sorted(gone),
            "loop_error": loop_error,
        }
        # Pending before it is queued: its delivery report may be served inside send() already.
        self._heartbeat_pending_since = self.clock.monotonic()
        try:
            self._producer.send(
                "coordinator", self.worker_id, heartbeat, on_delivery=self._heartbeat_delivered
            )
        except BusError as exc:
            self._heartbeat_pending_since = None
            log.warning("%s: heartbeat skipped: %s", self.worker_id, exc)
            with self._lock:
                self._dirty.update(dirty)
                self._removed.update(gone)
            self._full_requested = True

    # -- loop --------------------------------------------------------------------------------------
    def step(self, timeout_s: float = 0.05) -> None:
        """One turn of the loop: commands in, due tasks dispatched, records and heartbeats out."""
        next_due = self.due.next_due()
        now = self.clock.monotonic()
        wait = timeout_s if next_due is None else max(0.0, min(timeout_s, next_due - now))
        if self._producer_failed:
            self._rebuild_producer()
        self._producer.poll(0)  # delivery callbacks: heartbeats and run records acknowledged or failed
        message = self._poll_commands(wait)
        if message is not None:
            self._handle_command(message, self._on_manager_command)
            self._commit(self._commands, message)
        while (task_message := self._task_commands.poll(0)) is not None:
            self._handle_command(task_message, self._on_task_command)
            self._commit(self._task_commands, task_message)
        bus_away = self._bus_away()
        if self._unrestored and not bus_away:
            self._restore(sorted(self._unrestored))
        if not bus_away:
            self._start_unanswered_claims()
        self.tick()
        self._reap_drained()
        self._publish_outbox()
        now = self.clock.monotonic()
        if now - self._last_reconcile >= RECONCILE_EVERY_S and not bus_away:
            self._last_reconcile = now  # a failed read moves it (to retry sooner)
            self._reconcile()
        full = self._full_requested or now - self._last_full >= self._full_every_s
        if full or self._claim_now or now - self._last_heartbeat >= self.settings.heartbeat_interval_s:
            self._claim_now = False
            self._send_heartbeat(full=full)
            self._last_heartbeat = now
            if full:
                self._last_full, self._full_requested = now, False

    @staticmethod
    def _commit(consumer: TypedConsumer, message: Message) -> None:
        """Commit a handled command. A commit refused because the group is rebalancing (the
        partition may be moving) is harmless: a new owner restores from the catalog, and a replayed
        command is a no-op (its epoch is not newer), so the loop must not die of it."""
        try:
            consumer.commit(message)
        except BusError as exc:
            if exc.fatal:
                raise
            log.info("commit of %s[%d]@%d skipped: %s", message.topic, message.partition, message.offset, exc)

    def _reap_drained(self) -> None:
        for task_id, maintainer in list(self.draining.items()):
            if maintainer.running is None:  # its outcome was handled (and recorded)
                del self.draining[task_id]
                self.maintainers.unregister(task_id)
                dropped = self._drop_after_drain.pop(task_id, None)
                if dropped is not None:
                    self.runner.drop(dropped)
                    log.info("%s: dropped after its cancelled run ended", task_id)
                deferred = self._deferred.pop(task_id, None)
                if deferred is not None:
                    self._add_task_safely(*deferred)

    def _poll_commands(self, wait_s: float) -> Message | None:
        try:
            return self._commands.poll(wait_s)
        except BusError as exc:
            if not exc.fatal or exc.fenced:
                raise
            self._rebuild_consumers(exc)
            return None

    def _rebuild_consumers(self, cause: BusError) -> None:
        """librdkafka gave up on the group consumer (a fatal error, not a fence): let go of every
        partition as if revoked, and join again with new consumers."""
        log.warning("%s: the consumer failed fatally (%s); rebuilding it", self.worker_id, cause)
        self._on_revoke([("manager", p) for p in sorted(self.partitions)])
        for consumer in (self._commands, self._task_commands):
            try:
                consumer.close()
            except Exception as exc:
                log.info("%s: closing the failed consumer: %s", self.worker_id, exc)
        self._commands = TypedConsumer(self.settings, group_id=self.settings.group("workers"))
        self._task_commands = TypedConsumer(self.settings, group_id=self.settings.group("workers.maintainer"))
        self._commands.subscribe(["manager"], on_assign=self._on_assign, on_revoke=self._on_revoke)

    def _rebuild_producer(self) -> None:
        """librdkafka gave up on the producer (a fatal error, e.g. an idempotence sequence gap): a new
        one takes over; the old one's failed records were re-queued by their delivery callbacks."""
        log.warning("%s: the producer failed fatally; rebuilding it", self.worker_id)
        old, self._producer = self._producer, TypedProducer(self.settings, config=NEVER_TIME_OUT)
        self._producer_failed = False
        self._heartbeat_pending_since = None
        self._full_requested = True
        try:
            old.poll(0)  # the last delivery callbacks (re-queue what failed)
        except Exception as exc:
            log.info("%s: old producer: %s", self.worker_id, exc)
        old.close(timeout_s=0)

    def _start_unanswered_claims(self) -> None:
        """Without an active coordinator nobody raises epochs: a claim unanswered for the heartbeat
        timeout (any old owner left the group long ago) starts at the newest catalog epoch."""
        now = self.clock.monotonic()
        overdue = [
            t for t, (_, since) in self.waiting.items() if now - since >= self.settings.heartbeat_timeout_s
        ]
        if not overdue:
            return
        try:
            catalog = restore_catalog(self.settings, sorted({partition_for(t, PARTITIONS) for t in overdue}))
        except BusError as exc:
            log.warning("%s: catalog read for unanswered claims failed, retrying: %s", self.worker_id, exc)
            return
        for task_id in overdue:
            task, since = self.waiting[task_id]
            latest = catalog.get(task_id)
            if latest is None:
                self._remove(task_id, drop_data=False)
            elif latest["epoch"] > task["epoch"]:
                self.waiting[task_id] = (latest, now)  # a coordinator is at work: claim the new epoch
                self._mark_dirty(task_id)
                self._claim_now = True
            else:
                log.warning(
                    "%s: no coordinator answered its claim in %.0fs; starting it", task_id, now - since
                )
                del self.waiting[task_id]
                self._start_maintainer(latest, partition_for(task_id, PARTITIONS))

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
        owned = sorted(self.partitions)
        if not owned:
            return
        try:
            catalog = restore_catalog(self.settings, owned)
        except BusError as exc:
            log.warning("%s: reconcile put off: %s", self.worker_id, exc)
            self._last_reconcile = self.clock.monotonic() - RECONCILE_EVERY_S + CATALOG_RETRY_S
            return
        for task_id, task in catalog.items():
            current = self.owned.get(task_id)
            if current is None or task["epoch"] > current.task["epoch"]:
                self._add_task_safely(task, partition_for(task_id, PARTITIONS))
        gone = [t for t in [*self.partition_of, *self.waiting] if t not in catalog]
        for task_id in gone:
            self._remove(task_id, drop_data=False)

    def close(self) -> None:
        """Leave the group cleanly: revocation stops every maintainer and releases the partitions
        (within REVOKE_WAIT_S); then runs still draining are awaited and their outcomes published."""
        log.info("%s leaving the group", self.worker_id)
        self._closing = True
        self._commands.close()
        self._task_commands.close()
        self.executor.shutdown(cancel_running=True, timeout_s=STOP_RUN_TIMEOUT_S)
        if self._pollers:
            self.maintainers.stop()
        self.maintainers.run_pending()  # the drained runs' outcomes, into the outbox
        for dropped in self._drop_after_drain.values():
            self.runner.drop(dropped)  # the runs have ended (or been given up on) by now
        self._drop_after_drain.clear()
        self._publish_outbox()
        self._producer.close(timeout_s=STOP_RUN_TIMEOUT_S)  # best effort: the broker may be away
        self.metrics.untrack_tasks(self.worker_id)
        self.metrics.untrack_executor(self.executor)


def _claim(task: Record) -> Record:
    """The MaintainerStatus a manager sends for a task it waits to start: its catalog state."""
    return {
        "task_id": task["task_id"],
        "epoch": task["epoch"],
        "state": task["state"],
        "checkpoint": dict(task["checkpoint"]),
        "last_run": task["last_run"],
        "next_run_at": None,
        "error": task["error"],
    }
