"""The task host: the maintainers one worker runs and the bookkeeping around them, without any I/O.

Owning partition p of the manager topic means owning every task whose key hashes to p; the manager
(workers/worker/manager.py) moves records between the bus and this host, which decides.

Epochs: a maintainer runs only under an epoch the coordinator issued to this worker by name. A task
whose record names another owner, or none (new, restarted, or restored after its partition moved
here), *waits*: the host claims it in the next heartbeat at once (``claim_now``), the coordinator
raises the epoch with this worker as owner (ADD_MAINTAINER), and only then does a maintainer start.
So a new owner never shares an epoch with an old one that is still alive (a zombie: frozen,
partitioned), and Delta's txnVersion (epoch first) skips whatever the old one commits after the new
one did. Without an active coordinator nobody raises epochs: a claim unanswered for the heartbeat
timeout starts at the newest catalog epoch (``start_unanswered_claims``).

Draining: a maintainer whose task was revoked or dropped while its run goes on is *draining*: the
run is cancelled, its outcome still recorded, and the host never waits for it beyond REVOKE_WAIT_S.
A dropped task's data goes only once its run has ended (``reap_drained``), so no run writes a table
after its drop; a task of the same id created meanwhile is *deferred* until then.

Dropping (issue 32): a DROP leaves the task in the catalog, DROPPING, under a new epoch. The worker it
is issued to (its owner, or whoever claims it after the owner died) removes its data — retried every
DROP_RETRY_S while the warehouse refuses — and then reports it DROPPED at that epoch in every
heartbeat until the catalog no longer has it; the coordinator then removes the task and frees the name.

Run queue: the executor's bound is the number of tasks this worker owns or drains (each has at
most one queued run), so a burst of every owned task falling due at once waits in the queue and is
never turned away; what shows an overload is a run not started before its task is due again.

Threads: maintainers run on the loop thread (``pollers=0``, deterministic) or on poller threads; they
reach the host only through ``MaintainerEnv`` (outbox, dirty marks), which is thread-safe.
"""

from __future__ import annotations

import logging
import random
import threading
from collections.abc import Mapping

from workers.catalog.lifecycle import TaskState
from workers.kafka.messages import partition_for
from workers.records import Record
from workers.retry import REFRESH_RETRY, RetryPolicy
from workers.sched.clock import Clock
from workers.sched.due import DueQueue
from workers.sched.executor import BoundedExecutor
from workers.sched.mailbox import BatchSystem
from workers.sched.metrics import SchedMetrics, TaskGauges
from workers.topics import topic_spec
from workers.worker.drops import DataRemovals
from workers.worker.maintainer import Command, Due, Maintainer, MaintainerEnv, Stop, Update
from workers.worker.outbox import Outbox
from workers.worker.runner import Runner

log = logging.getLogger(__name__)
PARTITIONS = topic_spec("manager").partitions
REVOKE_WAIT_S = 0.5  # how long a revocation waits for its cancelled runs before letting go
# Coordinator epochs are activation wall times; one further ahead than any clock skew is forged.
MAX_CLOCK_SKEW_MS = 86_400_000


class TaskHost:
    def __init__(
        self,
        worker_id: str,
        *,
        clock: Clock,
        runner: Runner,
        executor: BoundedExecutor,
        heartbeat_timeout_s: float,
        run_timeout_s: float = 600.0,
        pollers: int = 0,
        metrics: SchedMetrics | None = None,
        retry: RetryPolicy = REFRESH_RETRY,
        rng: random.Random | None = None,
    ) -> None:
        self.worker_id = worker_id
        self.clock = clock
        self.runner = runner
        self.removals = DataRemovals(runner, clock, self.mark_dirty)
        self.executor = executor
        self.heartbeat_timeout_s = heartbeat_timeout_s
        self.run_timeout_s = run_timeout_s
        self.metrics = metrics
        self.retry = retry
        self.rng = rng
        self.due: DueQueue[str] = DueQueue()
        # pollers=0: maintainers handle their mail on the loop thread, in tick() (deterministic).
        self.mailboxes = BatchSystem(pollers=max(1, pollers), name="maintainers")
        self.pollers = pollers
        self.outbox = Outbox(worker_id)
        self.owned: dict[str, Maintainer] = {}
        self.partition_of: dict[str, int] = {}
        # Tasks not (yet) issued to us: (latest record, monotonic time it arrived), until the
        # coordinator raises the epoch naming us (see the module doc).
        self.waiting: dict[str, tuple[Record, float]] = {}
        self.draining: dict[str, Maintainer] = {}  # cancelled runs not ended yet (see the module doc)
        self._deferred: dict[str, tuple[Record, int]] = {}
        self.coordinator_epoch = 0
        self.full_requested = True  # the next heartbeat is a full snapshot
        self.claim_now = False  # a new claim: heartbeat at once (it is on the failover path)
        self.report_now = False  # a task's state changed: heartbeat at once (`mvs status` shows it)
        self.closing = False  # leaving for good: a revocation does not wait for runs
        self._lock = threading.Lock()  # the marks below are set from maintainer threads
        self._dirty: set[str] = set()
        self._removed: set[str] = set()
        self._sent_loop_error: str | None = None

    def env(self) -> MaintainerEnv:
        return MaintainerEnv(
            worker_id=self.worker_id,
            clock=self.clock,
            executor=self.executor,
            due=self.due,
            runner=self.runner,
            send_to_self=self.mailboxes.send,
            publish=self.outbox.put,
            status_changed=self.mark_dirty,
            report_now=self._report_now,
            run_timeout_s=self.run_timeout_s,
            retry=self.retry,
            metrics=self.metrics,
            rng=self.rng,
        )

    @property
    def dropped(self) -> dict[str, Record]:
        """Tasks whose data is removed, reported DROPPED until the catalog forgets them."""
        return self.removals.done

    def task_gauges(self) -> list[TaskGauges]:
        return [maintainer.gauges() for maintainer in list(self.owned.values())]  # scrape thread: a copy

    # -- tasks -------------------------------------------------------------------------------------
    def add_task(self, task: Record, partition: int) -> None:
        """A task record for us (a command, the catalog): update, start, or claim it."""
        task_id = task["task_id"]
        if task_id in self.removals.after_drain:
            self._deferred[task_id] = (task, partition)  # starts once the old data is gone
            return
        if task["state"] == TaskState.DROPPING.value and task["owner"] == self.worker_id:
            self._drop(task)
            return
        self.removals.done.pop(task_id, None)
        if self.draining.pop(task_id, None) is not None:
            self.mailboxes.unregister(task_id)  # back here: the old run's outcome no longer matters
        if task_id in self.owned:
            self.mailboxes.send(task_id, Update(task))
            return
        waiting = self.waiting.get(task_id)
        if waiting is not None and task["epoch"] < waiting[0]["epoch"]:
            return  # a replayed older record
        if task["owner"] != self.worker_id:
            # Not issued to us (yet): claim it and wait for the coordinator's epoch naming us.
            since = waiting[1] if waiting is not None else self.clock.monotonic()
            self.waiting[task_id] = (task, since)
            self.mark_dirty(task_id)
            self.claim_now = True
            return
        self.waiting.pop(task_id, None)
        self.start_maintainer(task, partition)

    def add_task_safely(self, task: Record, partition: int) -> None:
        """``add_task`` for a record from the bus: one that makes it raise is logged and skipped."""
        try:
            self.add_task(task, partition)
        except Exception:
            log.exception("%s: skipping a task record that cannot be started: %r", self.worker_id, task)

    def start_maintainer(self, task: Record, partition: int) -> Maintainer:
        maintainer = Maintainer(task, self.env())
        self.owned[task["task_id"]] = maintainer
        self.partition_of[task["task_id"]] = partition
        self.mailboxes.register(task["task_id"], maintainer)
        self.mark_dirty(task["task_id"])
        self._fit_run_queue()
        return maintainer

    def _fit_run_queue(self) -> None:
        """Room in the executor for one run of every task this worker owns or drains (module doc)."""
        self.executor.set_queue_size(len(self.owned) + len(self.draining))

    def _drop(self, task: Record) -> None:
        """A DROPPING record issued to us: stop the task, then remove its data (see the module doc)."""
        task_id = task["task_id"]
        current = self.owned.get(task_id)
        if current is not None and task["epoch"] <= current.task["epoch"]:
            return  # a replayed or stale command
        done = self.removals.done.get(task_id)
        if done is not None and done["epoch"] >= task["epoch"]:
            self.mark_dirty(task_id)  # already removed: say so again
            return
        self.remove(task_id, dropping=task)

    def remove(self, task_id: str, *, dropping: Record | None = None) -> None:
        """Stop a task's maintainer for good. Never waits: a cancelled run that has not ended drains.
        With ``dropping`` (the task's DROPPING record) its data goes once no run of it is left."""
        self._deferred.pop(task_id, None)
        waiting = self.waiting.pop(task_id, None)
        maintainer = self.owned.pop(task_id, None)
        if maintainer is not None:
            self._stop(task_id)
            self.partition_of.pop(task_id, None)
        if maintainer is not None or waiting is not None:
            self._mark_removed(task_id)
        if maintainer is not None and maintainer.running is not None:
            self.draining[task_id] = maintainer
            if dropping is not None:
                self.removals.after_drain[task_id] = dropping
        else:
            if maintainer is not None:
                self.mailboxes.unregister(task_id)
            if dropping is not None:
                self.removals.remove(dropping)
        if maintainer is not None:
            self._fit_run_queue()

    def _stop(self, task_id: str) -> None:
        self.mailboxes.send(task_id, Stop())
        if not self.pollers:
            self.mailboxes.run_pending()

    def restore(self, catalog: Mapping[str, Record]) -> None:
        """The tasks of newly assigned partitions, read from the catalog."""
        for task_id, task in catalog.items():
            self.add_task_safely(task, partition_for(task_id, PARTITIONS))
        self.full_requested = True

    def release(self, partitions: set[int]) -> list[str]:
        """Let go of the tasks of revoked partitions; returns their ids.

        A cancelled run usually ends within a fraction of a second: wait that long, so it is over (and
        recorded) before the partition goes. But the handoff is never held hostage by a run that cannot
        stop yet (its Spark may still be starting): that one drains, and whatever it commits is fenced
        by the epoch the coordinator raises for the new owner. Leaving for good (``closing``): no wait
        at all — the group hands off first, the host's close awaits the runs."""
        for task_id in [t for t, (_, p) in self._deferred.items() if p in partitions]:
            del self._deferred[task_id]
        self.removals.forget(lambda t: partition_for(t, PARTITIONS) not in partitions)  # new owner's now
        leaving = [task_id for task_id, p in self.partition_of.items() if p in partitions]
        for task_id in [t for t in self.waiting if partition_for(t, PARTITIONS) in partitions]:
            del self.waiting[task_id]
            leaving.append(task_id)
        for task_id in leaving:
            if task_id in self.owned:
                self.mailboxes.send(task_id, Stop())
        self.run_pending()
        deadline = self.clock.monotonic() + (0.0 if self.closing else REVOKE_WAIT_S)
        for task_id in leaving:
            self.executor.wait_idle(task_id, max(0.0, deadline - self.clock.monotonic()))
        self.run_pending()
        for task_id in leaving:
            maintainer = self.owned.pop(task_id, None)
            self.partition_of.pop(task_id, None)
            if maintainer is not None and maintainer.running is not None:
                self.draining[task_id] = maintainer  # stays registered: its outcome is still recorded
            else:
                self.mailboxes.unregister(task_id)
            self._mark_removed(task_id)
        self._fit_run_queue()
        return leaving

    def reconcile(self, catalog: Mapping[str, Record]) -> None:
        """Catch anything a missed command left behind: the catalog of our partitions is the truth."""
        for task_id, task in catalog.items():
            current = self.owned.get(task_id)
            if current is None or task["epoch"] > current.task["epoch"]:
                self.add_task_safely(task, partition_for(task_id, PARTITIONS))
        for task_id in [t for t in [*self.partition_of, *self.waiting] if t not in catalog]:
            self.remove(task_id)
        self.removals.forget(lambda t: t in catalog)

    # -- claims ------------------------------------------------------------------------------------
    def unanswered_claims(self) -> list[int]:
        """Partitions with a claim unanswered for the heartbeat timeout (any old owner left the group
        long ago): their catalog decides (``start_unanswered_claims``)."""
        now = self.clock.monotonic()
        overdue = {t for t, (_, since) in self.waiting.items() if now - since >= self.heartbeat_timeout_s}
        return sorted({partition_for(t, PARTITIONS) for t in overdue})

    def start_unanswered_claims(self, catalog: Mapping[str, Record], partitions: list[int]) -> None:
        """Decide the overdue claims of ``partitions`` from their catalog: gone → forgotten, a newer
        epoch → claimed again, else started at the newest catalog epoch."""
        now = self.clock.monotonic()
        for task_id, (task, since) in list(self.waiting.items()):
            partition = partition_for(task_id, PARTITIONS)
            if now - since < self.heartbeat_timeout_s or partition not in partitions:
                continue
            latest = catalog.get(task_id)
            if latest is None:
                self.remove(task_id)
            elif latest["epoch"] > task["epoch"]:
                self.waiting[task_id] = (latest, now)  # a coordinator is at work: claim the new epoch
                self.mark_dirty(task_id)
                self.claim_now = True
            else:
                log.warning(
                    "%s: no coordinator answered its claim in %.0fs; starting it", task_id, now - since
                )
                del self.waiting[task_id]
                self.start_maintainer(latest, partition)

    # -- commands ----------------------------------------------------------------------------------
    def _implausible(self, command: Record) -> bool:
        """A coordinator epoch is the wall time (ms) its coordinator became active: one far in the
        future is not a coordinator's (a forged or corrupt command). Accepting it would make every
        real coordinator look older and silence it for good, so it is refused."""
        if command["coordinator_epoch"] <= self.clock.wall_ms() + MAX_CLOCK_SKEW_MS:
            return False
        log.warning("%s: refusing a command from the future: %r", self.worker_id, command)
        return True

    def on_manager_command(self, command: Record, partition: int) -> None:
        """ADD_MAINTAINER / REMOVE_MAINTAINER / BOOTSTRAP from a coordinator no older than the last one."""
        if self._implausible(command):
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
            self.add_task(command["task"], partition)
        elif kind == "REMOVE_MAINTAINER":
            maintainer = self.owned.get(task_id)
            current = maintainer.task if maintainer is not None else self.waiting.get(task_id, (None,))[0]
            if command["task"] is not None:
                self.add_task(command["task"], partition)  # DROPPING: removed here if issued to us
            elif current is not None and command["epoch"] > current["epoch"]:
                self.remove(task_id, dropping=current)  # a coordinator from before DROPPING
        elif kind == "BOOTSTRAP":
            self.full_requested = True

    def on_task_command(self, command: Record) -> None:
        """A per-task command (refresh now, cancel, pause...): to its maintainer."""
        if self._implausible(command) or command["coordinator_epoch"] < self.coordinator_epoch:
            return
        if command["task_id"] in self.owned:
            self.mailboxes.send(command["task_id"], Command(command))

    # -- the loop's work ---------------------------------------------------------------------------
    def run_pending(self) -> None:
        if not self.pollers:
            self.mailboxes.run_pending()

    def tick(self) -> int:
        """Hand every due task to its maintainer and let maintainers handle their mail."""
        due = self.due.pop_due(self.clock.monotonic())
        for task_id in due:
            self.mailboxes.send(task_id, Due())
        self.run_pending()
        return len(due)

    def reap_drained(self) -> None:
        """Forget drained maintainers whose run has ended; drop their data and start deferred tasks;
        retry the data removals that failed."""
        self.removals.retry_due()
        for task_id, maintainer in list(self.draining.items()):
            if maintainer.running is None:  # its outcome was handled (and recorded)
                del self.draining[task_id]
                self.mailboxes.unregister(task_id)
                self.removals.drained(task_id)
                deferred = self._deferred.pop(task_id, None)
                if deferred is not None:
                    self.add_task_safely(*deferred)
                self._fit_run_queue()

    def close(self, timeout_s: float) -> None:
        """Await (or give up on) every run; their outcomes go to the outbox, dropped data goes."""
        self.executor.shutdown(cancel_running=True, timeout_s=timeout_s)
        if self.pollers:
            self.mailboxes.stop()
        self.mailboxes.run_pending()
        self.removals.remove_all_drained()

    # -- heartbeats --------------------------------------------------------------------------------
    def _report_now(self) -> None:
        self.report_now = True  # a flag set from maintainer threads: the loop reads it

    def mark_dirty(self, task_id: str) -> None:
        with self._lock:
            self._dirty.add(task_id)

    def _mark_removed(self, task_id: str) -> None:
        with self._lock:
            self._removed.add(task_id)
            self._dirty.discard(task_id)

    @property
    def dirty(self) -> set[str]:
        """Tasks whose status changed since the last heartbeat (the set itself: tests clear it)."""
        return self._dirty

    def heartbeat(self, *, full: bool, loop_error: str | None) -> Record | None:
        """The next heartbeat, or None when there is nothing to say. A full one carries every task;
        a delta one those whose status changed, and the removed ones. Taking it clears the marks:
        ``unsent`` puts them back."""
        with self._lock:
            dirty, self._dirty = self._dirty, set()
            gone, self._removed = self._removed, set()
        ids = list(self.owned) if full else [t for t in dirty if t in self.owned]
        statuses = [self.owned[t].status() for t in ids]
        # A claim on each task waiting for its new epoch, at the epoch it arrived with.
        claims = list(self.waiting) if full else [t for t in dirty if t in self.waiting]
        statuses += [claim(self.waiting[t][0]) for t in claims]
        dropped = list(self.dropped) if full else [t for t in dirty if t in self.dropped]
        statuses += [{**claim(self.dropped[t]), "state": TaskState.DROPPED.value} for t in dropped]
        if not statuses and not gone and not full and loop_error == self._sent_loop_error:
            return None
        self._sent_loop_error = loop_error  # a new one goes out at once (`mvs status` shows it)
        return {
            "worker_id": self.worker_id,
            "sent_at": self.clock.wall_ms(),
            "coordinator_epoch": self.coordinator_epoch,
            "full": full,
            "statuses": statuses,
            "removed": sorted(gone),
            "loop_error": loop_error,
        }

    def unsent(self, heartbeat: Record) -> None:
        """A heartbeat the bus refused: what it said is said again in the next (a full one)."""
        with self._lock:
            self._dirty.update(status["task_id"] for status in heartbeat["statuses"])
            self._removed.update(heartbeat["removed"])
        self.full_requested = True


def claim(task: Record) -> Record:
    """The MaintainerStatus a worker sends for a task it waits to start: its catalog state."""
    return {
        "task_id": task["task_id"],
        "epoch": task["epoch"],
        "state": task["state"],
        "checkpoint": dict(task["checkpoint"]),
        "last_run": task["last_run"],
        "next_run_at": None,
        "error": task["error"],
    }
