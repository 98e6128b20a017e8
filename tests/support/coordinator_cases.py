"""What the coordinator handler tests share: a context over known tables, DDL applied to a task
map, raw events as any producer may write them, and the refusal check."""

from typing import Any

from workers.catalog.names import name_problem
from workers.coordinator.handlers import Context, handle_ddl
from workers.ddl import parse_statement
from workers.records import Record

TABLES = {"sales", "orders"}


def ctx(now_ms: int = 1_000) -> Context:
    return Context(now_ms=now_ms, coordinator_epoch=7, table_exists=lambda t: t in TABLES)


def apply(sql: str, tasks: dict[str, Record]) -> Any:
    effects = handle_ddl(parse_statement(sql), tasks, ctx())
    for key, value in effects.catalog.items():
        if value is None:
            tasks.pop(key, None)
        else:
            tasks[key] = value
    return effects


CREATE = (
    "CREATE MATERIALIZED VIEW by_region REFRESH COMPLETE EVERY 30 SECONDS AS "
    "SELECT region, sum(amount) AS total FROM sales GROUP BY region"
)


def worker_status(task: Record, epoch: int, checkpoint: dict[str, int]) -> Record:
    return {
        "task_id": task["task_id"],
        "epoch": epoch,
        "state": "NORMAL",
        "checkpoint": checkpoint,
        "last_run": None,
        "next_run_at": None,
        "error": None,
    }


def raw_event(action: str, name: str, **fields: Any) -> Record:
    """A DdlEvent as any producer may write it (no parser in between)."""
    return {
        "schema_version": 1,
        "event_id": "e1",
        "issued_at": 0,
        "issued_by": "User:alice",
        "action": action,
        "name": name,
        "mv": None,
        "mv_log": None,
        "sql": None,
        **fields,
    }


def mv_spec(
    query: str = "SELECT id FROM sales", kind: str = "EVERY", interval_ms: int | None = 60_000
) -> Record:
    return {
        "query": query,
        "refresh_mode": "COMPLETE",
        "trigger": {"kind": kind, "interval_ms": interval_ms},
        "base_tables": [],
    }


def checked_ctx(
    tables: set[str], *, owner_rule: bool = False, admins: frozenset[str] = frozenset()
) -> Context:
    """A context whose table_exists fails the test if it is ever asked about an unchecked name."""

    def exists(name: str) -> bool:
        assert name_problem(name, "table") is None, f"table_exists called with unchecked {name!r}"
        return name in tables

    return Context(
        now_ms=1_000, coordinator_epoch=7, table_exists=exists, owner_rule=owner_rule, admin_principals=admins
    )


def refusal(effects: Any) -> Record:
    assert (
        len(effects.results) == 1 and not effects.catalog and not effects.manager and not effects.maintainer
    )
    result = effects.results[0]
    assert result["accepted"] is False
    error: Record = result["error"]
    return error
