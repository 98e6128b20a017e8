"""The manager: one per worker process, the loop between the bus and its task host.

Kafka's consumer group decides which tasks the worker owns: owning partition p of the manager topic
means owning every task whose key hashes to p (the host, workers/worker/host.py, keeps the tasks and
decides; see its doc for epochs, claims and draining). On assignment the manager restores those
tasks from partition p of the compacted catalog, and starts reading partition p of the maintainer
topic (so a per-task command reaches only the owner). On revocation the host stops those maintainers
and cancels their runs, waiting up to REVOKE_WAIT_S for them to end; then the partition is released
(a run that cannot stop yet drains in the background, recorded when it ends).

The loop is ``step()``, run until a stop event; tests drive it step by step, over a real broker or
an in-memory bus (the ``bus`` argument; the default is Kafka).

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
from typing import ClassVar

from workers.bus import Bus, BusConsumer, BusProducer, KafkaBus
from workers.config import Settings
from workers.kafka.typed import BusError, Message
from workers.role import LoopRole
from workers.sched.clock import Clock, SystemClock
from workers.sched.executor import BoundedExecutor
from workers.sched.metrics import SchedMetrics, process_metrics
from workers.worker.host import TaskHost
from workers.worker.runner import Runner, SparkRunner

log = logging.getLogger(__name__)
FULL_HEARTBEAT_EVERY_S = 10.0
RECONCILE_EVERY_S = 30.0
STOP_RUN_TIMEOUT_S = 30.0
# A heartbeat undelivered for this long means the broker is away: catalog reads wait for it to be back.
BUS_SUSPECT_S = 3.0
CATALOG_RETRY_S = 5.0  # a failed catalog read (reconcile) is tried again after this long


class Manager(LoopRole):
    role_name: ClassVar[str] = "worker"

    def __init__(
        self,
        settings: Settings,
        *,
        bus: Bus | None = None,
        runner: Runner | None = None,
        clock: Clock | None = None,
        pollers: int = 0,
        metrics: SchedMetrics | None = None,
    ) -> None:
        self.settings = settings
        self.worker_id = settings.worker_id
        self.clock = clock or SystemClock()
        self.bus: Bus = bus if bus is not None else KafkaBus(settings)
        self.metrics = metrics if metrics is not None else process_metrics()
        # The host sizes the queue to the tasks it owns (workers/worker/host.py).
        executor = BoundedExecutor(
            settings.max_concurrent_runs,
            queue_size=settings.max_concurrent_runs,
            clock=self.clock,
            name="runs",
        )
        self.host = TaskHost(
            self.worker_id,
            clock=self.clock,
            runner=runner or SparkRunner(settings),
            executor=executor,
            heartbeat_timeout_s=settings.heartbeat_timeout_s,
            run_timeout_s=settings.run_timeout_s,
            pollers=pollers,
            metrics=self.metrics,
        )
        self.partitions: set[int] = set()  # manager partitions assigned to us
        self._unrestored: set[int] = set()  # assigned partitions whose catalog read failed: retried
        self._heartbeat_pending_since: float | None = None  # monotonic send time of an undelivered one
        self._producer_failed = False  # the bus reported the producer fatal: rebuild it
        # A full snapshot at least every 10 s, and always well within the coordinator's heartbeat
        # timeout (an idle worker sends nothing else), so a short timeout never restarts a live one.
        self._full_every_s = min(FULL_HEARTBEAT_EVERY_S, settings.heartbeat_timeout_s / 3)
        self._last_heartbeat = float("-inf")
        self._last_full = float("-inf")
        self._last_reconcile = self.clock.monotonic()
        self._commands = self.bus.consumer(settings.group("workers"))
        self._task_commands = self.bus.consumer(settings.group("workers.maintainer"))
        self._producer = self.bus.producer(keep_until_delivered=True)
        # Prometheus (issue 4): the executor's counters and each owned task's lag / time to next
        # run, all read at scrape time.
        self.metrics.track_executor(executor)
        self.metrics.track_tasks(self.worker_id, self.host.task_gauges)

    def loop_metrics(self) -> SchedMetrics:
        return self.metrics

    # -- ownership ---------------------------------------------------------------------------------
    def start(self) -> None:
        # KIP-848: the session timeout (how long a dead worker keeps its tasks) is a group config.
        self.bus.configure_group(self.settings.group("workers"))
        self._commands.subscribe(["manager"], on_assign=self._on_assign, on_revoke=self._on_revoke)
        if self.host.pollers:
            self.host.mailboxes.start()

    def _on_assign(self, partitions: list[tuple[str, int]]) -> None:
        owned = sorted(p for topic, p in partitions if topic == "manager")
        if owned:
            self.partitions.update(owned)
            self._restore(owned)

    def _restore(self, partitions: list[int]) -> None:
        """Start the tasks of newly assigned partitions from the catalog, then read their per-task
        commands; a read that fails (the broker went away) is retried on a later step."""
        began = self.clock.monotonic()
        try:
            catalog = self.bus.read_catalog(partitions)  # one read of all: it is on the failover path
        except BusError as exc:
            log.warning("%s: restoring partitions %s failed, retrying: %s", self.worker_id, partitions, exc)
            self._unrestored.update(partitions)
            return
        self._unrestored.difference_update(partitions)
        self.host.restore(catalog)
        self._task_commands.assign("maintainer", partitions)
        log.info(
            "%s assigned partitions %s: %d tasks, %d waiting for a new epoch (restored in %.0f ms)",
            self.worker_id,
            partitions,
            len(self.host.owned),
            len(self.host.waiting),
            (self.clock.monotonic() - began) * 1000,
        )

    def _on_revoke(self, partitions: list[tuple[str, int]]) -> None:
        lost = {p for topic, p in partitions if topic == "manager"}
        if not lost:
            return
        self.partitions -= lost
        self._unrestored -= lost
        self.host.release(lost)
        self._task_commands.unassign("maintainer", sorted(lost))
        self._publish_outbox()
        self._send_heartbeat(full=False)
        log.info("%s revoked partitions %s", self.worker_id, sorted(lost))

    # -- commands ----------------------------------------------------------------------------------
    def _handle(self, consumer: BusConsumer, message: Message) -> None:
        """Hand a command to the host whatever its producer wrote: one that makes the host raise is
        logged and skipped (the catalog, reconciled every RECONCILE_EVERY_S, is the truth); then
        commit it."""
        try:
            if message.value is not None and message.topic == "manager":
                self.host.on_manager_command(message.value, message.partition)
            elif message.value is not None:
                self.host.on_task_command(message.value)
        except Exception:
            log.exception(
                "%s: skipping %s[%d]@%d: %r",
                self.worker_id,
                message.topic,
                message.partition,
                message.offset,
                message.value,
            )
        # A commit refused because the group is rebalancing (the partition may be moving) is harmless:
        # a new owner restores from the catalog, and a replayed command is a no-op (its epoch is not
        # newer), so the loop must not die of it.
        try:
            consumer.commit(message)
        except BusError as exc:
            if exc.fatal:
                raise
            log.info("commit of %s[%d]@%d skipped: %s", message.topic, message.partition, message.offset, exc)

    def _poll_commands(self, wait_s: float) -> Message | None:
        try:
            return self._commands.poll(wait_s)
        except BusError as exc:
            if not exc.fatal or exc.fenced:
                raise
            self._rebuild_consumers(exc)
            return None

    # -- outbox and heartbeats ---------------------------------------------------------------------
    def _publish_outbox(self) -> None:
        self.host.outbox.publish(self._producer, on_fatal=self._producer_fatal)

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
            self.host.full_requested = True

    def _bus_away(self) -> bool:
        """A heartbeat has waited BUS_SUSPECT_S for the broker: reads would only block the loop."""
        sent = self._heartbeat_pending_since
        return sent is not None and self.clock.monotonic() - sent >= BUS_SUSPECT_S

    def _send_heartbeat(self, *, full: bool) -> None:
        if self._heartbeat_pending_since is not None:
            # The previous one is not delivered yet (the broker is away): skip this one; what changed
            # stays marked, and a full one follows the delivery after an outage.
            self.host.full_requested = self.host.full_requested or full
            return
        loop_error = self.last_error.summary() if self.last_error is not None else None
        heartbeat = self.host.heartbeat(full=full, loop_error=loop_error)
        if heartbeat is None:
            return
        # Pending before it is queued: its delivery report may be served inside send() already.
        self._heartbeat_pending_since = self.clock.monotonic()
        try:
            self._producer.send(
                "coordinator", self.worker_id, heartbeat, on_delivery=self._heartbeat_delivered
            )
        except BusError as exc:
            self._heartbeat_pending_since = None
            log.warning("%s: heartbeat skipped: %s", self.worker_id, exc)
            self.host.unsent(heartbeat)

    # -- loop --------------------------------------------------------------------------------------
    def step(self, timeout_s: float = 0.05) -> None:
        """One turn of the loop: commands in, due tasks dispatched, records and heartbeats out."""
        host = self.host
        next_due = host.due.next_due()
        now = self.clock.monotonic()
        wait = timeout_s if next_due is None else max(0.0, min(timeout_s, next_due - now))
        if self._producer_failed:
            self._rebuild_producer()
        self._producer.poll(0)  # delivery callbacks: heartbeats and run records acknowledged or failed
        message = self._poll_commands(wait)
        if message is not None:
            self._handle(self._commands, message)
        while (task_message := self._task_commands.poll(0)) is not None:
            self._handle(self._task_commands, task_message)
        bus_away = self._bus_away()
        if self._unrestored and not bus_away:
            self._restore(sorted(self._unrestored))
        if not bus_away:
            self._start_unanswered_claims()
        host.tick()
        host.reap_drained()
        self._publish_outbox()
        now = self.clock.monotonic()
        if now - self._last_reconcile >= RECONCILE_EVERY_S and not bus_away:
            self._last_reconcile = now  # a failed read moves it (to retry sooner)
            self._reconcile()
        full = host.full_requested or now - self._last_full >= self._full_every_s
        urgent = host.claim_now or host.report_now
        if full or urgent or now - self._last_heartbeat >= self.settings.heartbeat_interval_s:
            host.claim_now = host.report_now = False
            self._send_heartbeat(full=full)
            self._last_heartbeat = now
            if full:
                self._last_full, host.full_requested = now, False

    def _start_unanswered_claims(self) -> None:
        partitions = self.host.unanswered_claims()
        if not partitions:
            return
        try:
            catalog = self.bus.read_catalog(partitions)
        except BusError as exc:
            log.warning("%s: catalog read for unanswered claims failed, retrying: %s", self.worker_id, exc)
            return
        self.host.start_unanswered_claims(catalog, partitions)

    def _reconcile(self) -> None:
        owned = sorted(self.partitions)
        if not owned:
            return
        try:
            catalog = self.bus.read_catalog(owned)
        except BusError as exc:
            log.warning("%s: reconcile put off: %s", self.worker_id, exc)
            self._last_reconcile = self.clock.monotonic() - RECONCILE_EVERY_S + CATALOG_RETRY_S
            return
        self.host.reconcile(catalog)

    def _rebuild_consumers(self, cause: BusError) -> None:
        """The bus gave up on the group consumer (a fatal error, not a fence): let go of every
        partition as if revoked, and join again with new consumers."""
        log.warning("%s: the consumer failed fatally (%s); rebuilding it", self.worker_id, cause)
        self._on_revoke([("manager", p) for p in sorted(self.partitions)])
        for consumer in (self._commands, self._task_commands):
            try:
                consumer.close()
            except Exception as exc:
                log.info("%s: closing the failed consumer: %s", self.worker_id, exc)
        self._commands = self.bus.consumer(self.settings.group("workers"))
        self._task_commands = self.bus.consumer(self.settings.group("workers.maintainer"))
        self._commands.subscribe(["manager"], on_assign=self._on_assign, on_revoke=self._on_revoke)

    def _rebuild_producer(self) -> None:
        """The bus gave up on the producer (a fatal error, e.g. an idempotence sequence gap): a new
        one takes over; the old one's failed records were re-queued by their delivery callbacks."""
        log.warning("%s: the producer failed fatally; rebuilding it", self.worker_id)
        old: BusProducer = self._producer
        self._producer = self.bus.producer(keep_until_delivered=True)
        self._producer_failed = False
        self._heartbeat_pending_since = None
        self.host.full_requested = True
        try:
            old.poll(0)  # the last delivery callbacks (re-queue what failed)
        except Exception as exc:
            log.info("%s: old producer: %s", self.worker_id, exc)
        old.close(timeout_s=0)

    def close(self) -> None:
        """Leave the group cleanly: revocation stops every maintainer and releases the partitions
        (within REVOKE_WAIT_S); then runs still draining are awaited and their outcomes published."""
        log.info("%s leaving the group", self.worker_id)
        self.host.closing = True
        self._commands.close()
        self._task_commands.close()
        self.host.close(timeout_s=STOP_RUN_TIMEOUT_S)
        self._publish_outbox()
        self._producer.close(timeout_s=STOP_RUN_TIMEOUT_S)  # best effort: the broker may be away
        self.metrics.untrack_tasks(self.worker_id)
        self.metrics.untrack_executor(self.host.executor)
