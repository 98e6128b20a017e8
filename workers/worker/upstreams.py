"""What a task waits for before its first run can do anything: the tables of the MVs it reads.

An MV may read MVs of the catalog that are not built yet (a pipeline created in one script); an MV
log may be created on such an MV. Until the upstream's first refresh has made its table, a run would
only fail: the task waits instead, says so in its run record ("waiting for a's first refresh", the
message ``mvs status`` shows), and looks again every ``WAIT_POLL_S`` without a Spark job.
"""

from __future__ import annotations

from collections.abc import Callable

from workers.records import Record
from workers.status import WAITING

WAIT_POLL_S = 1.0  # as an ON CHANGE poll: a look at the warehouse's Delta logs, no Spark


def waiting_reason(task: Record, exists: Callable[[str], bool]) -> str | None:
    """Why ``task`` cannot run yet (None: it can): the MVs it reads whose tables ``exists`` does not
    find, or, for an MV log, its table (an MV log on an MV starts with the MV's first refresh)."""
    if task["kind"] == "MV":
        absent = [name for name in task["mv"].get("upstream_mvs") or [] if not exists(name)]
        if not absent:
            return None
        if len(absent) == 1:
            return f"{WAITING}{absent[0]}'s first refresh"
        return f"{WAITING}the first refreshes of {', '.join(absent)}"
    table = task["name"]
    if exists(table):
        return None
    return f"{WAITING}table {table} (an MV log on a materialized view starts with its first refresh)"
