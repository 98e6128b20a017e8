"""TARGET LAG DOWNSTREAM: an MV refreshed as often as the MVs that read it need, with no trigger of
its own (Snowflake's ``TARGET_LAG = DOWNSTREAM``).

The coordinator writes the trigger such an MV runs by into its record (``MvSpec.driven_by``) whenever
the catalog changes: the tightest of its readers' own triggers, a reader that is DOWNSTREAM itself
resolved first (cycles are refused at CREATE). ON CHANGE wins; then the shortest interval, a reader's
TARGET LAG halved (data reaching the reader through this MV then stays within the reader's target,
the other half being the reader's own run and wait), a reader's EVERY as is. Readers refreshed ON
DEMAND drive nothing. With no driving reader ``driven_by`` is null: the MV refreshes only when asked,
and ``mvs status`` says so (Snowflake's trap of a DOWNSTREAM table nothing reads, made visible).

Pure: the catalog after a decision in; updated records and their ADD_MAINTAINER commands out.
"""

from __future__ import annotations

from collections.abc import Mapping

from workers.catalog.specs import DOWNSTREAM, EVERY, ON_CHANGE, TARGET_LAG
from workers.coordinator.effects import Context, Effects, manager_command
from workers.coordinator.pipelines import live_mv, readers_of
from workers.records import Record


def driven_by(name: str, tasks: Mapping[str, Record]) -> Record | None:
    """The trigger MV ``name`` (TARGET LAG DOWNSTREAM) runs by, from its readers; None: none drives it."""
    return _driven(name, tasks, seen=frozenset())


def _driven(name: str, tasks: Mapping[str, Record], seen: frozenset[str]) -> Record | None:
    wanted: list[Record] = []
    for reader in readers_of(name, tasks):
        task = live_mv(reader, tasks)
        if task is None or reader in seen:
            continue
        trigger = task["mv"]["trigger"]
        if trigger["kind"] == DOWNSTREAM:
            trigger = _driven(reader, tasks, seen | {name})
        if trigger is not None:
            wanted.append(trigger)
    return _tightest(wanted)


def _tightest(triggers: list[Record]) -> Record | None:
    if any(t["kind"] == ON_CHANGE for t in triggers):
        return {"kind": ON_CHANGE, "interval_ms": None}
    timed = [
        (t["interval_ms"] // 2 if t["kind"] == TARGET_LAG else t["interval_ms"], t["kind"] != TARGET_LAG)
        for t in triggers
        if t["kind"] in (TARGET_LAG, EVERY) and t.get("interval_ms")
    ]
    if not timed:
        return None  # no reader, or only ON DEMAND ones
    interval_ms, every = min(timed)  # a tie goes to TARGET LAG (False < True)
    return {"kind": EVERY if every else TARGET_LAG, "interval_ms": max(interval_ms, 1)}


def drive_downstream(tasks: Mapping[str, Record], effects: Effects, ctx: Context) -> None:
    """Bring ``driven_by`` of every TARGET LAG DOWNSTREAM MV up to the catalog after ``effects``: a
    record this decision already writes is corrected in place (its ADD_MAINTAINER carries it), any
    other changed one is written under a new epoch (its owner then schedules by it at once)."""
    after = dict(tasks)
    for changed, record in effects.catalog.items():
        if record is None:
            after.pop(changed, None)
        else:
            after[changed] = record
    for task_id, task in after.items():
        if live_mv(task["name"], after) is not task or task["mv"]["trigger"]["kind"] != DOWNSTREAM:
            continue
        trigger = driven_by(task["name"], after)
        if trigger == task["mv"].get("driven_by"):
            continue
        updated = {**task, "mv": {**task["mv"], "driven_by": trigger}, "updated_at": ctx.now_ms}
        if task_id not in effects.catalog:
            updated["epoch"] += 1
        effects.catalog[task_id] = updated
        effects.manager[:] = [
            c for c in effects.manager if not (c["task_id"] == task_id and c["kind"] == "ADD_MAINTAINER")
        ]
        effects.manager.append(manager_command("ADD_MAINTAINER", updated, ctx))
