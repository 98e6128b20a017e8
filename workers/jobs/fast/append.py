"""The cheapest FAST plan: insert-only changes to a projection/filter MV are appended, no MERGE.

Whether a version range of the base only inserted rows is read from the base's Delta log (commit
operations), not from the change rows: no Spark job, and the number of change rows comes from the
commits' metrics. A range with any other data-changing operation (UPDATE, DELETE, MERGE, overwrite,
an operation this module does not know) is not insert-only and takes the general plan; so does a
range whose commit files are gone (log cleanup) or a warehouse whose log is read through Spark.
"""

from __future__ import annotations

from pyspark.sql import SparkSession

from workers import warehouse
from workers.config import Settings
from workers.jobs.delta import log as deltalog

# Commits that add no change rows (the change data feed has none for them).
_NO_DATA_CHANGE = frozenset({"SET TBLPROPERTIES", "OPTIMIZE", "VACUUM START", "VACUUM END"})


def inserted_rows(spark: SparkSession, settings: Settings, base: str, since: int, until: int) -> int | None:
    """How many rows the base's versions (since, until] appended, if they only appended; else None."""
    if not warehouse.is_local(settings):
        return None
    seen: set[int] = set()
    rows = 0
    for commit in deltalog.iter_commits(spark, settings, base, after=since):
        if commit.version > until:
            continue
        seen.add(commit.version)
        if commit.operation in _NO_DATA_CHANGE:
            continue
        appended = commit.operation == "WRITE" and commit.operation_parameters.get("mode") == "Append"
        if not appended or "numOutputRows" not in commit.operation_metrics:
            return None
        rows += int(commit.operation_metrics["numOutputRows"])
    if seen != set(range(since + 1, until + 1)):
        return None  # a commit file is gone: nothing is known about it
    return rows
