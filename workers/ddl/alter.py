"""ALTER MATERIALIZED VIEW applied to a definition: only the clauses the statement spelled out
change, and REFRESH FAST must be possible for the (stored or new) query."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from workers.ddl.errors import InvalidQueryError
from workers.ddl.parser import given_clauses
from workers.ddl.plan import plan_from_record
from workers.ddl.query import analyze_query


def apply_alter(current: Mapping[str, Any], event: Mapping[str, Any]) -> dict[str, Any]:
    """The MvSpec that results from applying an ALTER_MV ``event`` to the ``current`` MvSpec.

    Only the clauses the statement spelled out change (re-read from ``event["sql"]``; an event without
    sql replaces mode, trigger and freshness wholesale). Raises ``InvalidQueryError`` when the result asks for
    REFRESH FAST on a query that cannot be refreshed incrementally.
    """
    if event.get("action") != "ALTER_MV" or event.get("mv") is None:
        raise ValueError("apply_alter needs an ALTER_MV event")
    new = event["mv"]
    mode, trigger, freshness = new["refresh_mode"], new["trigger"], new.get("freshness_ms")
    if event.get("sql"):
        mode_given, trigger_given, freshness_given = given_clauses(event["sql"])
        mode = mode if mode_given else current["refresh_mode"]
        trigger = trigger if trigger_given else current["trigger"]
        freshness = freshness if freshness_given else current.get("freshness_ms")
    query, base_tables = new["query"], new["base_tables"]
    if query == "":
        query, base_tables = current["query"], current["base_tables"]
    if mode == "FAST":
        # The analysis stored with the task (MvSpec.plan) when the query is the same.
        stored = current.get("plan") if query == current["query"] else None
        plan = plan_from_record(stored) if stored is not None else analyze_query(query).plan
        if plan.fast_refresh is None:
            raise InvalidQueryError(
                f"REFRESH FAST is not possible for {event.get('name')}: {plan.fast_reason}"
            )
    spec = {"query": query, "refresh_mode": mode, "trigger": dict(trigger), "base_tables": list(base_tables)}
    return spec if freshness is None else {**spec, "freshness_ms": freshness}
