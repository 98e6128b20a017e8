"""What a Spark executor did with its tasks, read from its own log (stderr under the standalone worker's
work dir, INFO level): which task ran, which files it read, and how it ended (finished, failed, or killed
and why). The driver of a fleet test is another process with its UI off, so the executor's log is where
the test sees the tasks themselves."""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

_RUNNING = re.compile(r"Executor: Running task \S+ in stage \S+ \(TID (\d+)\)")
_READING = re.compile(r"FileScanRDD: Reading File path: (\S+)")
_FINISHED = re.compile(r"Executor: Finished task \S+ in stage \S+ \(TID (\d+)\)")
_FAILED = re.compile(r"Executor: Exception in task \S+ in stage \S+ \(TID (\d+)\)")
# "Executor interrupted and killed task 0.0 in stage 53.0 (TID 81), reason: Stage cancelled: ..."
_KILLED = re.compile(
    r"Executor: Executor (?:interrupted and )?killed task \S+ in stage \S+ \(TID (\d+)\), reason: (.*)"
)


@dataclass
class ExecutorTask:
    tid: int
    reads: list[str] = field(default_factory=list)  # files the task logged opening
    ended: str | None = None  # "finished", "failed" or "killed"; None: still running
    reason: str = ""  # why it was killed

    def reads_table(self, table: str) -> bool:
        """Whether it scanned a data file of ``table`` (not its ``_delta_log``)."""
        return any(f"/{table}/part-" in path for path in self.reads)


def executor_tasks(logs: Iterable[Path]) -> list[ExecutorTask]:
    """Every task the executors whose ``logs`` are given started, in the order each one started them.
    A task's "Reading File" lines come from its own thread, so they are attributed right only with one
    task at a time per executor (a one-core worker)."""
    tasks: list[ExecutorTask] = []
    for log in logs:
        by_tid: dict[int, ExecutorTask] = {}
        current: ExecutorTask | None = None
        for line in log.read_text(errors="replace").splitlines():
            if match := _RUNNING.search(line):
                current = by_tid[int(match[1])] = ExecutorTask(int(match[1]))
                tasks.append(current)
            elif (match := _READING.search(line)) and current is not None:
                current.reads.append(match[1])
            elif match := _FINISHED.search(line):
                _end(by_tid, int(match[1]), "finished")
            elif match := _FAILED.search(line):
                _end(by_tid, int(match[1]), "failed")
            elif match := _KILLED.search(line):
                _end(by_tid, int(match[1]), "killed", match[2])
    return tasks


def _end(by_tid: dict[int, ExecutorTask], tid: int, how: str, reason: str = "") -> None:
    task = by_tid.get(tid)
    if task is not None:
        task.ended, task.reason = how, reason
