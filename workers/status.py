"""Plain-text tables for `mvs status` and `mvs history` (pure formatting, no I/O but the warehouse lookup)."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping, Sequence

from workers.catalog.specs import DOWNSTREAM
from workers.records import Record
from workers.sched.clock import SystemClock


def table(headers: Sequence[str], rows: Iterable[Sequence[object]]) -> str:
    cells = [[str(h) for h in headers]] + [["" if c is None else str(c) for c in row] for row in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in cells]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


# A run record's message when the task waits for its inputs (``workers.worker.upstreams``).
WAITING = "waiting for "
# Ends the message of a run of an MV over MVs (``workers.worker.runner``): the base-table versions
# its result reflects through them (``sales@v12``): MVs reflecting the same are consistent.
REFLECTS = "; reflects "


# Snowflake's trap of a DOWNSTREAM table that nothing reads, made visible.
IDLE_DOWNSTREAM = (
    "TARGET LAG DOWNSTREAM, and no MV reading it has a schedule: refreshed only when asked "
    "(create a reader, or ALTER its schedule)"
)


def _problem(task: Record) -> str:
    """The ERROR column: the task's error, else what it waits for (an MV over an MV not built yet)."""
    error = task.get("error")
    if error:
        return f"{error['code']}: {error['message']}"
    message = (task.get("last_run") or {}).get("message") or ""
    if message.startswith(WAITING):
        return message
    mv = task.get("mv") or {}
    if task["kind"] == "MV" and mv["trigger"]["kind"] == DOWNSTREAM and mv.get("driven_by") is None:
        return IDLE_DOWNSTREAM
    return "-"


def _watermark(task: Record) -> str:
    """The WATERMARK column: the versions the MV read, and for an MV over MVs the base versions its
    last run says they reflect (``a@v3 (sales@v12)``)."""
    read = _table_versions(task["checkpoint"])
    message = (task.get("last_run") or {}).get("message") or ""
    _, found, reflects = message.rpartition(REFLECTS)
    return f"{read} ({reflects})" if found and reflects else read


def _ago(ms: int | None, now_ms: int) -> str:
    if not ms:
        return "-"
    seconds = max(0.0, (now_ms - ms) / 1000)
    return f"{seconds:.0f}s ago" if seconds < 120 else f"{seconds / 60:.0f}m ago"


def _until(ms: int | None, now_ms: int) -> str:
    if not ms:
        return "-"
    return f"in {max(0.0, (ms - now_ms) / 1000):.0f}s"


def _table_versions(versions: dict[str, int]) -> str:
    """A watermark (a task's ``checkpoint`` field, a run's ``watermark_before|after``), base table →
    Delta version: ``a@v3,b@v7``."""
    return ",".join(f"{t}@v{v}" for t, v in sorted(versions.items())) or "-"


def _has_lag(task: Record) -> bool:
    return task["kind"] == "MV" and task.get("mv") is not None and task["state"] not in ("FAILED", "DROPPING")


def behind_versions(task: Record, latest_version: Callable[[str], int | None]) -> int | None:
    """How many base-table versions the MV is behind; None for an MV log, a failed or dropping MV,
    and when a base table's version is unknown."""
    if not _has_lag(task):
        return None
    behind = 0
    for base in task["mv"]["base_tables"]:
        latest = latest_version(base)
        if latest is None:
            return None
        behind += max(0, latest - task["checkpoint"].get(base, -1))
    return behind


def lag_versions(task: Record, latest_version: Callable[[str], int | None]) -> str:
    """``behind_versions`` as text: ``3v``; ``-`` for MV logs and failed MVs, ``?`` when unknown."""
    if not _has_lag(task):
        return "-"
    behind = behind_versions(task, latest_version)
    return "?" if behind is None else f"{behind}v"


def status_table(
    tasks: dict[str, Record], latest_version: Callable[[str], int | None], now_ms: int | None = None
) -> str:
    now_ms = now_ms or SystemClock().wall_ms()
    rows = []
    for task_id in sorted(tasks):
        task = tasks[task_id]
        run = task.get("last_run") or {}
        rows.append(
            [
                task_id,
                task["kind"],
                task["state"],
                task.get("owner") or "-",
                task["epoch"],
                f"{run.get('state', '-')} {_ago(run.get('ended_at') or run.get('started_at'), now_ms)}",
                run.get("rows_written") if run.get("rows_written") is not None else "-",
                _watermark(task),
                lag_versions(task, latest_version),
                _until(task.get("next_run_at"), now_ms),
                _problem(task),
            ]
        )
    headers = [
        "TASK",
        "KIND",
        "STATE",
        "OWNER",
        "EPOCH",
        "LAST RUN",
        "ROWS",
        "WATERMARK",
        "LAG",
        "NEXT",
        "ERROR",
    ]
    return table(headers, rows) if rows else "no tasks"


def _ranges(partitions: Sequence[int]) -> str:
    """``[0, 1, 2, 5]`` → ``0-2,5``."""
    spans: list[list[int]] = []
    for p in sorted(partitions):
        if spans and p == spans[-1][1] + 1:
            spans[-1][1] = p
        else:
            spans.append([p, p])
    return ",".join(str(a) if a == b else f"{a}-{b}" for a, b in spans) or "-"


def members_table(
    coordinators: dict[str, list[int]],
    workers: dict[str, list[int]],
    tasks: dict[str, Record],
    loop_errors: Mapping[str, str | None] | None = None,
    ddl_lag: int | None = None,
) -> str:
    """The live roles, from their consumer groups: the coordinator holding the DDL partition is the
    active one, with the DDL records not applied yet (``ddl_lag``); each worker with the manager
    partitions it holds and the tasks the catalog gives it; each role with the last error its loop
    survived (from its newest heartbeat)."""
    errors = loop_errors or {}
    rows: list[list[object]] = []
    for name in sorted(coordinators):
        active = 0 in coordinators[name]
        lag = "-" if not active or ddl_lag is None else ddl_lag
        state = "active" if active else "standby"
        rows.append(["coordinator", name, state, "-", "-", lag, errors.get(name) or "-"])
    for name in sorted(workers):
        owned = sum(1 for task in tasks.values() if task.get("owner") == name)
        rows.append(["worker", name, "member", _ranges(workers[name]), owned, "-", errors.get(name) or "-"])
    headers = ["ROLE", "NAME", "STATE", "PARTITIONS", "TASKS", "DDL LAG", "LAST LOOP ERROR"]
    return table(headers, rows) if rows else "no live roles"


def history_table(runs: list[Record]) -> str:
    rows = [
        [
            r["task_id"],
            r["run_id"],
            r["epoch"],
            r["trigger"],
            r["state"],
            time.strftime("%H:%M:%S", time.localtime(r["started_at"] / 1000)),
            f"{(r['ended_at'] - r['started_at']) / 1000:.2f}s" if r.get("ended_at") else "-",
            r.get("rows_written") if r.get("rows_written") is not None else "-",
            f"{_table_versions(r['watermark_before'])} → {_table_versions(r['watermark_after'])}",
            planning_text(r.get("planning")),
            _change_text(r),
            r.get("message") or "-",
        ]
        for r in runs
    ]
    headers = ["TASK", "RUN", "EPOCH", "TRIGGER", "STATE", "STARTED", "TOOK", "ROWS", "WATERMARK"]
    headers += ["PLAN (est.)", "CHANGE", "MESSAGE"]
    return table(headers, rows) if rows else "no runs"


def planning_text(planning: Record | None) -> str:
    """The candidates as "*FAST 1.2s COMPLETE 3.0s": their estimates, the one that ran starred."""
    if not planning:
        return "-"
    parts = []
    for candidate in planning["candidates"]:
        estimate = candidate.get("estimated_ms")
        unknown = "?" if candidate["available"] else "n/a"
        shown = f"{estimate / 1000:.1f}s" if estimate is not None else unknown
        star = "*" if candidate["technique"] == planning["choice"] else ""
        parts.append(f"{star}{candidate['technique']} {shown}")
    return " ".join(parts)


def _change_text(run: Record) -> str:
    """A run's change as "12/2000 +12 -0": change rows of the bases' rows, MV rows inserted, deleted."""
    planning: Record = run.get("planning") or {}
    change, base = planning.get("change_rows"), planning.get("base_rows")
    inserted, deleted = run.get("rows_inserted"), run.get("rows_deleted")
    parts = []
    if change is not None or base is not None:
        parts.append(f"{'?' if change is None else change}/{'?' if base is None else base}")
    if inserted is not None or deleted is not None:
        parts.append(f"+{'?' if inserted is None else inserted} -{'?' if deleted is None else deleted}")
    return " ".join(parts) or "-"


def ddl_table(entries: list[Record]) -> str:
    def outcome(answer: Record | None) -> str:
        if answer is None:
            return "pending"
        if answer["accepted"]:
            return "OK"
        return f"ERROR {answer['error']['code']}: {answer['error']['message']}"

    rows = [
        [
            time.strftime("%H:%M:%S", time.localtime(e["at"] / 1000)),
            e["action"],
            e["name"],
            e["issued_by"],
            outcome(e["answer"]),
        ]
        for e in entries
    ]
    return table(["AT", "ACTION", "NAME", "BY", "OUTCOME"], rows) if rows else "no DDL"


def notes_text(notes: list[str]) -> str:
    """What a view could not read, one line each under its tables (empty when all was read)."""
    return "".join(f"\n{note}" for note in notes) if notes else ""
