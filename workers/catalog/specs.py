"""MV and MV-log definitions as a raw producer may send them, checked value by value.

``mvs sql`` only writes sensible specs, but anyone who may write the DDL topic can send any record
that decodes (or, from a buggy producer, a dict missing fields): these checks turn every such spec
into either a normalized dict or an ``MvsError`` (1001) saying what to change. Pure logic: the
query itself is analysed by ``workers.ddl`` in the coordinator's handlers.
"""

from __future__ import annotations

from collections.abc import Mapping

from workers.catalog.errors import ErrorCode, MvsError
from workers.catalog.names import shown
from workers.records import Record

REFRESH_MODES = ("COMPLETE", "FAST", "FORCE")
# Trigger kinds (enum TriggerKind of the MvSpec record); the scheduler's formulas are sched/triggers.
EVERY = "EVERY"
ON_CHANGE = "ON_CHANGE"
ON_DEMAND = "ON_DEMAND"
TARGET_LAG = "TARGET_LAG"
DOWNSTREAM = "DOWNSTREAM"  # TARGET LAG DOWNSTREAM: driven by its readers (workers/coordinator/downstream.py)
INTERVAL_TRIGGERS = (EVERY, TARGET_LAG)  # their interval_ms is the period / the target lag
PLAIN_TRIGGERS = (ON_CHANGE, ON_DEMAND, DOWNSTREAM)  # no interval: one is ignored (stored as null)
ON_DEMAND_TRIGGER: Record = {"kind": ON_DEMAND, "interval_ms": None}
# Longest refresh period, target lag or purge interval: a year (366 days). Longer is better said
# ON DEMAND, and it keeps "now + interval" far inside an Avro long for every schedule computed.
MAX_INTERVAL_MS = 366 * 86_400_000


def _invalid(message: str) -> MvsError:
    return MvsError(ErrorCode.INVALID_CONFIG, message)


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def check_interval(interval_ms: object, what: str) -> int:
    """``interval_ms`` if it is a whole number of ms in (0, MAX_INTERVAL_MS]; else 1001."""
    if not _is_int(interval_ms):
        raise _invalid(f"{what} needs an interval in milliseconds, got {interval_ms!r}")
    assert isinstance(interval_ms, int)
    if interval_ms <= 0:
        raise _invalid(f"{what} interval must be greater than zero, got {interval_ms} ms")
    if interval_ms > MAX_INTERVAL_MS:
        raise _invalid(
            f"{what} interval {interval_ms} ms is longer than the limit of 366 days; "
            "use ON DEMAND for views refreshed that rarely"
        )
    return interval_ms


def checked_trigger(trigger: object) -> Record:
    """The trigger with its interval checked (EVERY, TARGET_LAG) or dropped (the others)."""
    if not isinstance(trigger, Mapping):
        raise _invalid(f"the refresh trigger must be a record, got {type(trigger).__name__}")
    kind = trigger.get("kind")
    if kind in PLAIN_TRIGGERS:
        return {"kind": kind, "interval_ms": None}
    if kind in INTERVAL_TRIGGERS:
        what = "EVERY" if kind == EVERY else "TARGET LAG"
        return {"kind": kind, "interval_ms": check_interval(trigger.get("interval_ms"), what)}
    kinds = ", ".join(INTERVAL_TRIGGERS + PLAIN_TRIGGERS)
    raise _invalid(f"unknown trigger kind {shown(kind)}: use one of {kinds}")


def checked_mv_spec(spec: object, *, query_may_be_empty: bool = False) -> Record:
    """A copy of MvSpec ``spec`` with checked mode and trigger; ``base_tables`` is left for the
    caller to derive from the query (a producer's list is not trusted). ``query_may_be_empty``:
    an ALTER's "query unchanged"."""
    if not isinstance(spec, Mapping):
        raise _invalid(f"the materialized view definition must be a record, got {type(spec).__name__}")
    query = spec.get("query")
    if not isinstance(query, str) or (query.strip() == "" and not query_may_be_empty):
        raise _invalid("the materialized view definition has no query")
    mode = spec.get("refresh_mode")
    if mode not in REFRESH_MODES:
        raise _invalid(f"unknown refresh mode {shown(mode)}: use one of {', '.join(REFRESH_MODES)}")
    base_tables = spec.get("base_tables", [])
    if not isinstance(base_tables, list) or not all(isinstance(t, str) for t in base_tables):
        raise _invalid("base_tables must be a list of table names")
    freshness = spec.get("freshness_ms")
    return {
        "query": query,
        "refresh_mode": mode,
        "trigger": checked_trigger(spec.get("trigger")),
        "base_tables": list(base_tables),
        # The freshness goal (FRESHNESS clause; workers/coordinator/freshness.py), optional.
        "freshness_ms": None if freshness is None else check_interval(freshness, "FRESHNESS"),
        # Written by the coordinator from the catalog, never taken from a producer.
        "driven_by": None,
    }


def effective_trigger(mv: Mapping[str, object]) -> Record:
    """The trigger MV spec ``mv`` runs by: its own, or for TARGET LAG DOWNSTREAM the one its readers
    drive (``driven_by``), ON DEMAND while none does."""
    trigger = mv.get("trigger")
    assert isinstance(trigger, Mapping)
    if trigger.get("kind") != DOWNSTREAM:
        return dict(trigger)
    driven = mv.get("driven_by")
    return dict(driven) if isinstance(driven, Mapping) else dict(ON_DEMAND_TRIGGER)


def checked_mv_log_spec(spec: object, base_table: str) -> Record:
    """MvLogSpec ``spec`` for an MV log on ``base_table``, checked; 1001 when it names another
    table or its purge interval is out of range."""
    if not isinstance(spec, Mapping):
        raise _invalid(f"the MV log definition must be a record, got {type(spec).__name__}")
    if spec.get("base_table") != base_table:
        raise _invalid(
            f"the MV log definition is for table {shown(spec.get('base_table'))} but the event names "
            f"{base_table}; they must be the same"
        )
    purge_ms = check_interval(spec.get("purge_interval_ms"), "PURGE")
    return {"base_table": base_table, "purge_interval_ms": purge_ms}


def mv_cycle(name: str, reads: list[str], mv_reads: Mapping[str, list[str]]) -> list[str] | None:
    """The path ``name → … → name`` if an MV ``name`` reading ``reads`` closes a cycle through the
    other MVs (``mv_reads``: MV name → the tables it reads; ``name``'s own entry is ignored, it is
    being replaced), else None. An MV reading another MV is fine as long as no path leads back."""
    graph = {mv: tables for mv, tables in mv_reads.items() if mv != name}
    graph[name] = reads
    stack: list[tuple[str, list[str]]] = [(name, [name])]
    seen: set[str] = set()
    while stack:
        node, path = stack.pop()
        for table in graph.get(node, []):
            if table == name:
                return [*path, name]
            if table not in seen:
                seen.add(table)
                stack.append((table, [*path, table]))
    return None
