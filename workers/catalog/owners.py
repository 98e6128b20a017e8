"""The owner rule: who may change a task (optional; ``MVS_OWNER_RULE=1``).

With the rule on, only the principal that created a task (``TaskRecord.created_by``, taken from
the creating event's ``issued_by``) or an admin principal may alter, pause, resume, cancel or drop
it. Who sent an event is the event's ``issued_by``; making that field the authenticated Kafka
principal is the bus's job, not this rule's.

- REFRESH is open to everyone who may write DDL: it changes nothing the owner decided (same
  definition, same result, only sooner) and refreshes coalesce (at most one run follows a running
  one), so it cannot starve or reshape an MV. A REFRESH of a FAILED task resumes it, which *is* a
  change of state: that one is guarded like RESUME.
- CANCEL is guarded: cancelling every run of someone else's MV would keep it stale for good.
- A task created before creators were recorded (``created_by`` null) can be changed by admins only:
  the rule fails closed.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from workers.catalog.errors import ErrorCode, MvsError
from workers.catalog.lifecycle import Action, TaskState
from workers.catalog.names import shown

GUARDED_ACTIONS = frozenset({Action.ALTER, Action.PAUSE, Action.RESUME, Action.CANCEL, Action.DROP})


def is_guarded(action: Action, state: TaskState) -> bool:
    """Whether ``action`` on a task in ``state`` is reserved to its creator and admins."""
    return action in GUARDED_ACTIONS or (action is Action.REFRESH and state is TaskState.FAILED)


def check_owner(
    task: Mapping[str, Any], action: Action, principal: str, admin_principals: frozenset[str]
) -> None:
    """Raise MvsError(1001, "permission denied: …") unless ``principal`` may do ``action`` on ``task``."""
    if not is_guarded(action, TaskState(task["state"])) or principal in admin_principals:
        return
    creator = task.get("created_by")
    if creator is not None and principal == creator:
        return
    owner = f"its creator {creator}" if creator is not None else "no recorded creator"
    raise MvsError(
        ErrorCode.INVALID_CONFIG,
        f"permission denied: {shown(principal)} may not {action.lower()} {task['task_id']}: it has "
        f"{owner}; only the creator or an admin principal (MVS_ADMIN_PRINCIPALS) may",
    )
