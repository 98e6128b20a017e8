"""Task states and the lifecycle transitions users may ask for (seed 002 "状态迁移约束").

Pure logic: given a task's state and an action, say what the new state is, whether the
epoch is raised, or why the action is refused. The coordinator applies the answer.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from workers.catalog.errors import ErrorCode, MvsError


class TaskState(StrEnum):
    NORMAL = "NORMAL"
    WARNING = "WARNING"
    FAILED = "FAILED"
    PAUSED = "PAUSED"
    FINISHED = "FINISHED"
    # Dropped by the user; its table (and MV log / helper state) not removed yet: the name stays taken
    # until the owner (whichever worker has the task now) reports it DROPPED.
    DROPPING = "DROPPING"
    # Only in a worker's report (MaintainerStatus): the data is gone; the coordinator removes the task.
    DROPPED = "DROPPED"


class Action(StrEnum):
    ALTER = "ALTER"
    PAUSE = "PAUSE"
    RESUME = "RESUME"
    REFRESH = "REFRESH"
    CANCEL = "CANCEL"
    DROP = "DROP"


RUNNABLE = frozenset({TaskState.NORMAL, TaskState.WARNING})


@dataclass(frozen=True)
class Transition:
    new_state: TaskState
    raise_epoch: bool
    noop: bool = False  # accepted but nothing changes (e.g. a repeated pause)


def transition(state: TaskState, action: Action) -> Transition:
    """The transition for ``action`` from ``state``; raises MvsError(1001) when refused."""
    if state is TaskState.DROPPING:
        if action is Action.DROP:
            return Transition(state, raise_epoch=False, noop=True)
        raise _refused(action, state, "the task is being dropped")
    if action is Action.DROP:
        return Transition(TaskState.DROPPING, raise_epoch=True)
    if state is TaskState.FAILED:
        # The way back once the cause is fixed (e.g. a dropped base table created again): a new
        # epoch in NORMAL with the error cleared, which the owner runs at once. REFRESH says the
        # same thing in the user's words ("run it now"), so it resumes too.
        if action in (Action.RESUME, Action.REFRESH):
            return Transition(TaskState.NORMAL, raise_epoch=True)
        raise _refused(action, state, "a failed task can only be resumed, refreshed or dropped")
    if state is TaskState.FINISHED:
        raise _refused(action, state, "a finished task can only be dropped")
    if action is Action.PAUSE:
        if state is TaskState.PAUSED:
            return Transition(state, raise_epoch=False, noop=True)
        return Transition(TaskState.PAUSED, raise_epoch=True)
    if action is Action.RESUME:
        if state not in (TaskState.PAUSED, TaskState.WARNING):
            raise _refused(action, state, "only a paused, warning or failed task can be resumed")
        return Transition(TaskState.NORMAL, raise_epoch=True)
    if action is Action.ALTER:
        # A new spec takes effect under a new epoch; a paused task stays paused.
        return Transition(state, raise_epoch=True)
    if action is Action.REFRESH:
        if state not in RUNNABLE:
            raise _refused(action, state, "resume the task before refreshing it")
        return Transition(state, raise_epoch=False)
    if action is Action.CANCEL:
        return Transition(state, raise_epoch=False)
    raise AssertionError(f"unhandled action {action}")


def _refused(action: Action, state: TaskState, why: str) -> MvsError:
    return MvsError(ErrorCode.INVALID_CONFIG, f"cannot {action.lower()} a task in state {state}: {why}")
