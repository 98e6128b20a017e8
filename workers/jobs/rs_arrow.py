"""Rows read by delta-rs (Arrow) handed to Spark with exactly the types Spark's own read would give."""

from __future__ import annotations

import pyarrow as pa
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.types import StructType

from workers.jobs.held import LOCAL_ROWS
from workers.jobs.session import confs


def conform(rows: pa.Table, schema: StructType) -> pa.Table:
    """``rows`` with ``schema``'s columns, in its order and of its types (DataFusion's string views,
    unsigned versions and the like cast); a column ``rows`` lacks is all NULL, as in Spark's
    ``unionByName(allowMissingColumns=True)``. Raises when a column does not cast."""
    wanted = to_arrow_schema(schema)
    columns = [
        rows.column(f.name).cast(f.type) if f.name in rows.column_names else pa.nulls(rows.num_rows, f.type)
        for f in wanted
    ]
    return pa.Table.from_arrays(columns, schema=wanted)


# Spark's createDataFrame makes a local relation of Arrow rows up to this many bytes, an RDD past it.
_LOCAL_BYTES = "spark.sql.execution.arrow.localRelationThreshold"
_BATCH_ROWS = "spark.sql.execution.arrow.maxRecordsPerBatch"


def to_spark(session: SparkSession, rows: pa.Table, schema: StructType) -> DataFrame:
    """``rows`` (conformed to ``schema``) as a Spark frame held on the driver, as ``held.hold`` holds
    rows: a local relation up to ``held.LOCAL_ROWS`` rows, an RDD of the Arrow batches past it; no
    lineage back to the table either way, so its reads run no scan."""
    slices = session.sparkContext.defaultParallelism  # one Arrow batch per partition
    batch = str(max(1, -(-rows.num_rows // slices)))
    held = {} if rows.num_rows <= LOCAL_ROWS else {_LOCAL_BYTES: "0", _BATCH_ROWS: batch}
    with confs(session, held):
        return session.createDataFrame(conform(rows, schema).combine_chunks(), schema=schema)
