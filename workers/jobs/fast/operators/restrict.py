"""A node's rows restricted to the key values a change reaches, exactly.

A keyed recompute (``keyed``) reads its inputs restricted to the keys K its change reaches, at new and
at old. Any superset of those rows gives the same result, but every row outside K comes out in both
signs, held, counted as reached keys by the node above, and applied to the top: a LEFT JOIN whose
preserved side was read whole (a base held on the driver, past the list limit of
``join.narrowed``) re-derived every one of TPC-H Q13's 150,000 customers where RF1 + RF2 reach 3,000.
So the restriction is exact: the key values, held on the driver (``nodes.Evaluation.keys``), as one
``IN`` list parsed by Spark (one call however many values: no job, no per-value round trip), beside
the ranges Delta skips files by; a semi-join with them (a broadcast job) where they cannot be listed.
"""

from __future__ import annotations

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from workers.jobs.delta import files
from workers.jobs.delta.key_filter import LITERAL_TYPES, among, key_ranges
from workers.jobs.fast.join import KEY_FILTER_LIMIT, KEY_RANGES, narrowed
from workers.jobs.fast.operators.keyed import KEY, Keys
from workers.jobs.spark.columns import q
from workers.jobs.spark.held import LOCAL_ROWS

# The most key values listed: up to it the keys are a local relation on the driver (``held``), read
# without a job; more are matched by a semi-join.
LISTED_LIMIT = LOCAL_ROWS


def restricted_rows(frame: DataFrame, column: str, keys: Keys, *, nulls: bool, held: bool) -> DataFrame:
    """``frame``'s rows whose ``column`` is among ``keys`` (NULL-safe when ``nulls``), exactly. ``held``:
    ``frame`` is on the driver or computed (no Delta files to skip)."""
    target = next((f for f in frame.schema.fields if f.name.lower() == column.lower()), None)
    if target is None:
        return frame  # not a column of the frame (Spark resolves the query): nothing to restrict by
    wanted = keys.frame.select(F.col(q(KEY)))
    if not nulls:
        wanted = wanted.where(F.col(q(KEY)).isNotNull())
    dtype = target.dataType
    if (
        wanted.schema[KEY].dataType != dtype
        or keys.rows > LISTED_LIMIT
        or not isinstance(dtype, LITERAL_TYPES)
    ):
        return narrowed(frame, column, keys.frame, KEY, nulls=nulls)  # a list, else a semi-join: exact
    values = [row[0] for row in wanted.collect()]
    read = None if held else files.read_within(frame, target.name, values, KEY_RANGES)
    if read is not None:  # only the files a value's range reaches, listed from the log
        frame = read
    elif not held and len(values) > KEY_FILTER_LIMIT:  # the files no value's range reaches are skipped
        spans = key_ranges(q(target.name), dtype, values, KEY_RANGES)
        if spans is not None:
            frame = frame.where(spans)
    return frame.where(among(q(target.name), values, dtype))
