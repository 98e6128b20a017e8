"""What the outage tests read at every poll while a part of the system is away: each task's state as
the catalog (``mvs status``) gives it, beside its newest run as the history gives it, so a test can
assert the state at every poll, not at one instant (issue 32)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from workers.client import MvsClient, MvsClientError
from workers.records import Record


@dataclass(frozen=True)
class Poll:
    """One look at the control plane, ``at_s`` seconds into the watch: the state of every task as
    ``mvs status`` shows it and, per watched task, how many of its runs the history had seen fail
    just before; ``unreadable`` says why the broker could not be read (then both are empty)."""

    at_s: float
    states: dict[str, str]
    failed_runs: dict[str, int]  # task id → how many runs ended in ERROR since the watch began
    unreadable: str | None = None
    # Task ids with a run COMPLETED after their last failed one, as the history read just after the
    # states had it (a task that recovered between the two reads may already show NORMAL).
    recovered: frozenset[str] = frozenset()

    def line(self) -> str:
        if self.unreadable is not None:
            return f"{self.at_s:6.1f}s unreadable: {self.unreadable[:100]}"
        recovered = f", recovered {sorted(self.recovered)}" if self.recovered else ""
        return f"{self.at_s:6.1f}s {self.states} failed runs so far {self.failed_runs}{recovered}"


def watch(
    client: MvsClient,
    task_ids: list[str],
    *,
    since_ms: int,
    until: Callable[[list[Poll]], bool],
    every_s: float = 0.5,
    timeout_s: float = 120.0,
) -> list[Poll]:
    """Poll until ``until(polls so far)`` (at most ``timeout_s``). The history is read before the
    catalog in each poll, so a run the poll counts as failed was reported before the state the same
    poll shows."""
    began = time.monotonic()
    pause = threading.Event()
    polls: list[Poll] = []
    while not until(polls):
        if time.monotonic() - began > timeout_s:
            raise AssertionError(f"the watch outlasted {timeout_s}s:\n" + "\n".join(p.line() for p in polls))
        at = time.monotonic() - began
        try:
            failed = {task_id: 0 for task_id in task_ids}
            for run in client.history(None, limit=10_000, timeout_s=5):
                if run["task_id"] in failed and run["state"] == "ERROR" and (run["ended_at"] or 0) > since_ms:
                    failed[run["task_id"]] += 1
            tasks, _ = client.shown_tasks(timeout_s=5)  # what `mvs status` and the API show
            states = {task_id: task["state"] for task_id, task in tasks.items()}
            recovered = _recovered(client.history(None, limit=10_000, timeout_s=5), task_ids, since_ms)
            polls.append(Poll(at, states, failed, recovered=recovered))
        except MvsClientError as exc:
            polls.append(Poll(at, {}, {}, unreadable=str(exc)))
        pause.wait(every_s)
    return polls


def _recovered(runs: list[Record], task_ids: list[str], since_ms: int) -> frozenset[str]:
    """Of ``task_ids``, those whose newest run ended since ``since_ms`` is COMPLETED after an ERROR."""
    last_failed: dict[str, int] = {}
    done: set[str] = set()
    for run in runs:  # oldest first
        task_id, ended = run["task_id"], run["ended_at"] or 0
        if task_id not in task_ids or ended <= since_ms:
            continue
        if run["state"] == "ERROR":
            last_failed[task_id] = ended
            done.discard(task_id)
        elif run["state"] == "COMPLETED" and task_id in last_failed:
            done.add(task_id)
    return frozenset(done)


def failures_seen(polls: list[Poll], task_ids: list[str]) -> bool:
    """The newest poll saw a failed run of every one of ``task_ids``."""
    return bool(polls) and all(polls[-1].failed_runs.get(task_id, 0) > 0 for task_id in task_ids)


def trace(polls: list[Poll]) -> str:
    return "\n".join(poll.line() for poll in polls)


def assert_warning_while_failing(polls: list[Poll], task_id: str) -> None:
    """From the first poll that saw a failed run of ``task_id`` on, every poll shows it WARNING."""
    failing = False
    for poll in polls:
        if poll.unreadable is not None:
            continue
        failing = failing or poll.failed_runs.get(task_id, 0) > 0
        if failing:
            assert poll.states.get(task_id) == "WARNING", f"{task_id} at {poll.at_s:.1f}s:\n{trace(polls)}"
    assert failing, f"no failed run of {task_id} was seen:\n{trace(polls)}"


def assert_warning_until_recovered(polls: list[Poll], task_id: str) -> None:
    """From the first poll that saw a failed run of ``task_id`` until a run of it completed after its
    last failure, every poll shows it WARNING (a run that failed and was then redone is no lie)."""
    for poll in polls:
        if poll.unreadable is not None or task_id in poll.recovered:
            continue
        if poll.failed_runs.get(task_id, 0) > 0:
            assert poll.states.get(task_id) == "WARNING", f"{task_id} at {poll.at_s:.1f}s:\n{trace(polls)}"


def assert_never_failed(polls: list[Poll]) -> None:
    """No task read FAILED at any poll (an outage is retried, never given up on)."""
    for poll in polls:
        failed = sorted(t for t, state in poll.states.items() if state == "FAILED")
        assert not failed, f"{failed} FAILED at {poll.at_s:.1f}s:\n{trace(polls)}"
