"""Removing a dropped task's data on the worker it is issued to (issue 32's durable DROP).

A DROPPING record's data (table, MV log, helper state) goes once no run of the task is left
(``after_drain`` until then); a removal the warehouse refuses is tried again every DROP_RETRY_S; a
removed task is reported DROPPED (``done``) until the catalog forgets it. The task host owns when
each step happens; this class owns the bookkeeping.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from workers.records import Record
from workers.sched.clock import Clock
from workers.worker.runner import Runner

log = logging.getLogger(__name__)
DROP_RETRY_S = 5.0  # a dropped task's data the warehouse refused to delete is tried again after this


class DataRemovals:
    def __init__(self, runner: Runner, clock: Clock, on_removed: Callable[[str], None]) -> None:
        self._runner = runner
        self._clock = clock
        self._on_removed = on_removed  # the task's DROPPED state is to be reported
        self.after_drain: dict[str, Record] = {}  # task id → its DROPPING record, removed once drained
        self._retries: dict[str, tuple[Record, float]] = {}  # DROPPING record, monotonic retry time
        self.done: dict[str, Record] = {}  # data removed: reported DROPPED until the catalog forgets it

    def remove(self, dropping: Record) -> None:
        """Delete a dropped task's data now; report it once gone, or try again after DROP_RETRY_S
        (the warehouse may be away)."""
        task_id = dropping["task_id"]
        self._retries.pop(task_id, None)
        try:
            self._runner.drop(dropping)
        except Exception as exc:
            log.warning("%s: removing the data of the dropped task failed, retrying: %s", task_id, exc)
            self._retries[task_id] = (dropping, self._clock.monotonic() + DROP_RETRY_S)
            return
        log.info("%s: data of the dropped task removed (epoch %s)", task_id, dropping["epoch"])
        self.done[task_id] = dropping
        self._on_removed(task_id)

    def drained(self, task_id: str) -> None:
        """The task's last run has ended: its data may go now, if it was dropped."""
        dropping = self.after_drain.pop(task_id, None)
        if dropping is not None:
            log.info("%s: its cancelled run ended: removing the dropped task's data", task_id)
            self.remove(dropping)

    def retry_due(self) -> None:
        now = self._clock.monotonic()
        for dropping, retry_at in list(self._retries.values()):
            if now >= retry_at:
                self.remove(dropping)

    def remove_all_drained(self) -> None:
        """At close, every run awaited: remove what waited for its run to end."""
        for task_id in list(self.after_drain):
            self.drained(task_id)

    def forget(self, keep: Callable[[str], bool]) -> None:
        """Drop the retries and DROPPED reports of tasks not kept (moved away, or gone from the catalog:
        their new owner, or nobody, finishes them)."""
        for pending in (self._retries, self.done):
            for task_id in [t for t in pending if not keep(t)]:
                del pending[task_id]
