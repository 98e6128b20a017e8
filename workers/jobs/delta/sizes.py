"""How much work a refresh run has, read from the Delta logs without a Spark job (``ChangeSize``).

FORCE's cost model (``workers.worker.planning``) and every run's planning information use it: the
rows and bytes the bases changed in the run's range (each commit's operation metrics, else its
add/remove actions' ``numRecords`` stats), and the bases' and the MV's rows, bytes and files at the
versions read (delta-rs's add actions). A table's size at a version never changes, so it is kept.
"""

from __future__ import annotations

import json
import threading
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from workers import warehouse
from workers.config import Settings

# Sizes of tables at versions kept for the next runs (a few per MV: bases and MV at their versions).
_KEPT_SIZES = 256


@dataclass(frozen=True)
class TableSize:
    rows: int | None  # None: a writer left no numRecords stats
    bytes: int
    files: int


@dataclass(frozen=True)
class BaseChange:
    """One base of a run: its rows at the pinned version and its change rows in the range."""

    name: str
    rows: int | None
    change_rows: int | None


@dataclass(frozen=True)
class ChangeSize:
    """A run's work as the logs tell it. ``change_rows`` None: no range (first build) or unreadable."""

    change_rows: int | None
    change_bytes: int | None
    base: TableSize  # every base at its pinned version, summed
    mv: TableSize | None  # the MV table at its current version, None before the first build
    bases: tuple[BaseChange, ...] = ()  # each base alone (FAST's prior: the bases a change meets)

    @property
    def change_share(self) -> float | None:
        """Change rows against base rows (0.64 = 64 %), None when either is unknown."""
        if self.change_rows is None or not self.base.rows:
            return None
        return self.change_rows / self.base.rows


_sizes: OrderedDict[tuple[str, int], TableSize] = OrderedDict()
_sizes_lock = threading.Lock()


def table_size(settings: Settings, name: str, version: int) -> TableSize:
    """Rows (from the files' stats), bytes and files of table ``name`` at ``version``."""
    key = (warehouse.table_path(settings, name), version)
    with _sizes_lock:
        if key in _sizes:
            _sizes.move_to_end(key)
            return _sizes[key]
    files = warehouse.rs_table(settings, name, version).get_add_actions(flatten=True)
    names = set(files.schema.names)
    records: list[Any] = files.column("num_records").to_pylist() if "num_records" in names else [None]
    rows = None if None in records else sum(int(r) for r in records)
    size = TableSize(rows, sum(int(b) for b in files.column("size_bytes").to_pylist()), files.num_rows)
    with _sizes_lock:
        _sizes[key] = size
        while len(_sizes) > _KEPT_SIZES:
            _sizes.popitem(last=False)
    return size


def change_size(
    settings: Settings,
    ranges: Mapping[str, tuple[int | None, int]],
    mv_name: str,
    mv_version: int | None,
) -> ChangeSize:
    """The change of each base in (since, until] (``since`` None: a first build, no range) and the
    sizes of the bases at ``until`` and of the MV at ``mv_version``."""
    change_rows: int | None = 0
    change_bytes: int | None = 0
    rows: int | None = 0
    size = files = 0
    bases: list[BaseChange] = []
    for base, (since, until) in ranges.items():
        at = table_size(settings, base, until)
        rows = None if rows is None or at.rows is None else rows + at.rows
        size, files = size + at.bytes, files + at.files
        changed = None if since is None else _changes(settings, base, since, until)
        change_rows = None if change_rows is None or changed is None else change_rows + changed[0]
        change_bytes = None if change_bytes is None or changed is None else change_bytes + changed[1]
        bases.append(BaseChange(base, at.rows, None if changed is None else changed[0]))
    mv = None if mv_version is None else table_size(settings, mv_name, mv_version)
    return ChangeSize(change_rows, change_bytes, TableSize(rows, size, files), mv, tuple(bases))


def _changes(settings: Settings, base: str, since: int, until: int) -> tuple[int, int] | None:
    """Rows and bytes changed by ``base``'s commits (since, until]; None when a commit is gone."""
    rows = size = 0
    for version in range(since + 1, until + 1):
        try:
            actions = warehouse.read_commit(settings, base, version)
        except FileNotFoundError:
            return None
        commit_rows, commit_bytes = commit_change(actions, version)
        rows, size = rows + commit_rows, size + commit_bytes
    return rows, size


def no_change_rows(settings: Settings, base: str, since: int, until: int) -> bool:
    """Do ``base``'s commits (since, until] hold no change row, by their actions alone (no Spark)?
    True when every commit file is there and none has a ``cdc`` file, nor a data-changing ``add`` /
    ``remove`` that may hold rows (its stats give ``numRecords`` 0): OPTIMIZE, VACUUM, property and
    fence commits, a DELETE or UPDATE that matched nothing. False when a commit may hold one, or is
    gone (log cleanup: nothing is known of it)."""
    for version in range(since + 1, until + 1):
        try:
            actions = warehouse.read_commit(settings, base, version)
        except FileNotFoundError:
            return False
        for action in actions:
            if "cdc" in action:
                return False
            file = action.get("add") or action.get("remove")
            if file is not None and file.get("dataChange", True) and _stat_records(file) != 0:
                return False
    return True


def commit_change(actions: list[dict[str, Any]], version: int) -> tuple[int, int]:
    """Rows one commit changed (an update counts as a delete and an insert, as in the change data
    feed) and the bytes of the files it added and removed."""
    files = [a.get("add") or a.get("remove") for a in actions if "add" in a or "remove" in a]
    size = sum(int(f.get("size") or 0) for f in files if f)
    from workers.jobs.delta import log as deltalog  # with pyspark: loaded by a run, not by the module

    metrics = deltalog.commit_info(version, actions).operation_metrics
    measured = _rows_from_metrics(metrics)
    if measured is not None:
        removed = sum(_records(a["remove"]) for a in actions if "remove" in a)
        overwrite = "numOutputRows" in metrics and removed > 0  # an overwrite also removed rows
        return measured + (removed if overwrite else 0), size
    return sum(_records(f) for f in files if f), size


def _rows_from_metrics(metrics: Mapping[str, str]) -> int | None:
    def metric(name: str) -> int:
        return int(metrics.get(name) or 0)

    if "numTargetRowsInserted" in metrics:  # MERGE
        updated = metric("numTargetRowsUpdated")
        return metric("numTargetRowsInserted") + metric("numTargetRowsDeleted") + 2 * updated
    if "numUpdatedRows" in metrics:
        return 2 * metric("numUpdatedRows")
    if "numDeletedRows" in metrics:
        return metric("numDeletedRows")
    if "numOutputRows" in metrics:
        return metric("numOutputRows")
    return None


def _records(file: Mapping[str, Any]) -> int:
    """``numRecords`` of an add/remove action's stats (0 when the writer left none)."""
    return _stat_records(file) or 0


def _stat_records(file: Mapping[str, Any]) -> int | None:
    """``numRecords`` of an add/remove action's stats, None when they do not say."""
    stats = file.get("stats")
    if not stats:
        return None
    try:
        found = json.loads(stats).get("numRecords")
    except (ValueError, TypeError, AttributeError):
        return None
    return int(found) if isinstance(found, int) else None


def rows_inserted_deleted(operation: str | None, metrics: Mapping[str, str]) -> tuple[int, int] | None:
    """Rows an MV commit inserted and deleted, by its operation metrics (an updated row counts as
    one deleted and one inserted); None when the commit does not say (an overwrite: its deleted
    rows are the MV's rows before, which the caller knows)."""

    def metric(name: str) -> int:
        return int(metrics.get(name) or 0)

    if operation == "MERGE" or "numTargetRowsInserted" in metrics:
        updated = metric("numTargetRowsUpdated")
        return metric("numTargetRowsInserted") + updated, metric("numTargetRowsDeleted") + updated
    if operation == "WRITE" and metrics.get("numOutputRows") is not None:
        return metric("numOutputRows"), 0
    return None
