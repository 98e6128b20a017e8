"""Seed 002's transition constraints, including every refused one and the error the user sees."""

import pytest

from workers.catalog.errors import ErrorCode, MvsError
from workers.catalog.lifecycle import Action, TaskState, transition


@pytest.mark.parametrize(
    ("state", "action", "new_state", "raise_epoch", "noop"),
    [
        (TaskState.NORMAL, Action.PAUSE, TaskState.PAUSED, True, False),
        (TaskState.WARNING, Action.PAUSE, TaskState.PAUSED, True, False),
        (TaskState.PAUSED, Action.PAUSE, TaskState.PAUSED, False, True),
        (TaskState.PAUSED, Action.RESUME, TaskState.NORMAL, True, False),
        (TaskState.WARNING, Action.RESUME, TaskState.NORMAL, True, False),
        (TaskState.NORMAL, Action.ALTER, TaskState.NORMAL, True, False),
        (TaskState.PAUSED, Action.ALTER, TaskState.PAUSED, True, False),
        (TaskState.NORMAL, Action.REFRESH, TaskState.NORMAL, False, False),
        (TaskState.NORMAL, Action.CANCEL, TaskState.NORMAL, False, False),
        (TaskState.FAILED, Action.DROP, TaskState.DROPPING, True, False),
        # The way back from FAILED (e.g. its base table was dropped and created again): a new epoch
        # in NORMAL. REFRESH of a failed task resumes it too.
        (TaskState.FAILED, Action.RESUME, TaskState.NORMAL, True, False),
        (TaskState.FAILED, Action.REFRESH, TaskState.NORMAL, True, False),
        (TaskState.PAUSED, Action.DROP, TaskState.DROPPING, True, False),
        (TaskState.DROPPING, Action.DROP, TaskState.DROPPING, False, True),
    ],
)
def test_allowed_transitions(
    state: TaskState, action: Action, new_state: TaskState | None, raise_epoch: bool, noop: bool
) -> None:
    step = transition(state, action)
    assert (step.new_state, step.raise_epoch, step.noop) == (new_state, raise_epoch, noop)


@pytest.mark.parametrize(
    ("state", "action", "why"),
    [
        (TaskState.FAILED, Action.PAUSE, "can only be resumed, refreshed or dropped"),
        (TaskState.FAILED, Action.ALTER, "can only be resumed, refreshed or dropped"),
        (TaskState.FAILED, Action.CANCEL, "can only be resumed, refreshed or dropped"),
        (TaskState.NORMAL, Action.RESUME, "only a paused, warning or failed task"),
        (TaskState.PAUSED, Action.REFRESH, "resume the task"),
        (TaskState.FINISHED, Action.PAUSE, "can only be dropped"),
    ],
)
def test_refused_transitions(state: TaskState, action: Action, why: str) -> None:
    with pytest.raises(MvsError) as refused:
        transition(state, action)
    assert refused.value.code is ErrorCode.INVALID_CONFIG
    assert why in refused.value.message
    assert state.value in refused.value.message
