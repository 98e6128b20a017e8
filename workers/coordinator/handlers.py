"""The coordinator's decisions, as plain functions: a record in, the records to send out.

Nothing here touches Kafka; the coordinator loop publishes an ``Effects`` in one transaction
together with the offset of the record that caused it. The decisions live in ``ddl`` (DDL events)
and ``heartbeats`` (worker statuses, liveness); what they share in ``effects``.
"""

from workers.coordinator.ddl import handle_ddl
from workers.coordinator.effects import (
    Context,
    Effects,
    bootstrap_commands,
    maintainer_command,
    manager_command,
    mv_task_id,
    mvlog_task_id,
    new_task,
    safepoint_for,
)
from workers.coordinator.heartbeats import (
    handle_heartbeat,
    recovered_tasks,
    refresh_safepoints,
    restart_silent_tasks,
)
from workers.ddl.parser import SCHEMA_VERSION  # of DdlEvent, defined with the grammar that writes them
from workers.records import Record

__all__ = [
    "SCHEMA_VERSION",
    "Context",
    "Effects",
    "Record",
    "bootstrap_commands",
    "handle_ddl",
    "handle_heartbeat",
    "maintainer_command",
    "manager_command",
    "mv_task_id",
    "mvlog_task_id",
    "new_task",
    "recovered_tasks",
    "refresh_safepoints",
    "restart_silent_tasks",
    "safepoint_for",
]
