"""An mvs cluster inside the test process: a coordinator and N managers, each running its real loop
in a thread against the real broker, sharing the test session's one SparkSession."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import replace
from typing import Any, TypeVar

from workers.client import MvsClient
from workers.config import Settings
from workers.coordinator.service import Coordinator
from workers.kafka.admin import apply_topics
from workers.role import LoopRole
from workers.worker.manager import Manager

T = TypeVar("T")


def wait_until(
    condition: Callable[[], T | None],
    *,
    timeout_s: float = 90.0,
    what: str = "condition",
    every_s: float = 0.05,
) -> T:
    """Poll ``condition`` every ``every_s`` until it returns something truthy; fail with ``what`` at the
    deadline."""
    deadline = time.monotonic() + timeout_s
    pause = threading.Event()
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() >= deadline:
            raise AssertionError(f"timed out after {timeout_s}s waiting for {what}")
        pause.wait(every_s)


class Cluster:
    def __init__(self, settings: Settings, workers: int = 1) -> None:
        self.settings = settings
        apply_topics(settings)
        self.client = MvsClient(settings, issued_by="tests")
        self.coordinator = Coordinator(settings)
        self.managers = [Manager(replace(settings, worker_id=f"worker-{i}")) for i in range(workers)]
        self._stops: list[threading.Event] = []
        self._threads: list[threading.Thread] = []
        for role in [self.coordinator, *self.managers]:
            self._start(role)

    def _start(self, role: LoopRole) -> None:
        stop = threading.Event()
        thread = threading.Thread(target=role.run, args=(stop,), name=type(role).__name__, daemon=True)
        thread.start()
        self._stops.append(stop)
        self._threads.append(thread)

    def sql(self, statement: str) -> dict[str, Any]:
        result = self.client.execute(statement, timeout_s=60)
        assert result is not None
        return result

    def task(self, task_id: str) -> dict[str, Any] | None:
        return self.client.tasks().get(task_id)

    def close(self) -> None:
        for stop in self._stops:
            stop.set()
        for thread in self._threads:
            thread.join(60)
        self.client.close()
