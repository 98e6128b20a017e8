"""MV commits by delta-rs (``deltalake``) instead of Spark: a FAST run's MERGE of rows it already holds
(``merge``), the MV rows that MERGE touches, read for the run's Spark work (``read_rows``), a FAST
run's appended rows (``append``), and a small complete refresh's result (``overwrite``).

Why: Spark's Delta MERGE of a few rows into an MV costs ~1 s on a 2-core worker whatever the change
(5-6 Spark jobs: source, snapshot rebuild, touched-file scan, rewrite; and ~0.6 s of driver-side
planning and commit); delta-rs merges the same held rows in ~25 ms, the Arrow hand-over from Spark
taking ~35 ms more. Reading the touched MV rows through Spark costs a Delta snapshot, a file-skipping
job and a scan (~0.4-0.7 s); delta-rs reads a small MV whole in a few ms (``bench.fast_vs_complete``:
a 1-row aggregate refresh at 1M base rows, 1.5 s -> 0.7 s).

Only plain merges (``PlainMerge``: match on key columns, delete / upsert / insert by the source's OP
column) go this way; merges whose values are Spark expressions (the one-pass aggregate) stay Spark's.
The commit is fenced as Spark's is: it carries the run's transaction identifier (app id, version) and
user metadata; it is skipped when the table already recorded a version at or above ours for the app id
(Delta's idempotent writes); and it is made on the MV version the run read, never rebased: any commit
in between fails it as a write conflict, and the run is retried.

Where delta-rs writes the table itself: a local warehouse (an object store needs a commit protocol both
writers honour), a table without change data feed (delta-rs would have to write its change files) and
with only the table features checked here. Elsewhere, and for a table delta-rs refuses, Spark merges.
delta-rs rewrites every file a merge touches, and skips the others by their statistics against the
run's key filter (``PlainMerge.narrow``, a predicate on the target): an MV with large files is merged
by delta-rs only while the files that filter keeps are few bytes (``REWRITE_LIMIT_BYTES``), else Spark
marks the rows in deletion vectors instead.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Literal

import pyarrow as pa
import pyarrow.compute as pc
from arro3.core import Table
from deltalake import CommitProperties, DeltaTable, Transaction, write_deltalake
from deltalake.exceptions import CommitFailedError
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.types import IntegralType, StringType, StructType

from workers import warehouse
from workers.config import Settings
from workers.jobs.delta import log as deltalog
from workers.jobs.delta.arrow import read_whole, small, to_spark
from workers.jobs.delta.key_filter import KeyFilter
from workers.jobs.delta.metadata import CommitId

# Writer features of the MV tables mvs makes (``refresh``: deletion vectors on) that delta-rs writes
# correctly: it applies a file's deletion vector when it rewrites the file (checked by a test).
_WRITABLE_FEATURES = frozenset({"deletionVectors", "appendOnly", "invariants"})
log = logging.getLogger(__name__)

# The most rows handed between Spark and delta-rs (both hold them on the driver): a larger MERGE source,
# complete result or read of touched MV rows stays Spark's.
ARROW_ROWS = 200_000
# The most bytes of data files a merge into an MV with large files may rewrite through delta-rs (it
# rewrites each file it touches; ~0.5 s for a 1.25M-row file here, against ~2.5 s or more for Spark's
# deletion-vector MERGE at any size): past it, Spark merges.
REWRITE_LIMIT_BYTES = 32 << 20
# Spark checkpoints an MV's log every 10 commits (``delta.checkpointInterval``'s default), delta-rs
# every 100: Spark's snapshot of an MV committed by delta-rs would replay up to 100 commit files.
CHECKPOINT_INTERVAL = 10
# Every Delta concurrent-write conflict matches the "write conflict" rule of ``workers.jobs.errors``.
_CONFLICT = "DELTA_CONCURRENT_WRITE"


class WriteConflict(Exception):
    """Another writer committed to the MV after the version the run read: the run is retried."""


@dataclass(frozen=True)
class PlainMerge:
    """Source rows carry the MV's columns and ``op_column``. Rows whose ``op_column`` is ``delete_op``
    delete the target rows they match (NULL-safe on ``keys``); ``upsert_op`` rows update the row they
    match (every non-key column) or are inserted; ``insert_op`` rows are only inserted (never matched)."""

    keys: tuple[str, ...]
    columns: tuple[str, ...]
    op_column: str
    delete_op: str
    upsert_op: str | None = None
    insert_op: str | None = None
    # The target rows the source can match lie within it (``key_filter``): the files delta-rs reads
    # and rewrites are the ones whose statistics may hold such rows.
    narrow: KeyFilter | None = None


def usable(settings: Settings, name: str, version: int) -> bool:
    """May delta-rs commit to MV ``name`` read at ``version`` (see the module's docstring)?"""
    if not warehouse.is_local(settings):
        return False
    try:
        table = warehouse.rs_table(settings, name, version)
    except Exception:  # noqa: BLE001 - unreadable by delta-rs: Spark merges
        return False
    return _writable(table)


def _writable(table: DeltaTable) -> bool:
    protocol = table.protocol()
    features = set(protocol.writer_features or ())
    if protocol.min_writer_version > 7 or not features <= _WRITABLE_FEATURES:
        return False
    config = table.metadata().configuration
    return not deltalog.change_feed_on(config) and deltalog.column_mapping_mode(config) == "none"


def read_rows(
    session: SparkSession,
    settings: Settings,
    name: str,
    version: int,
    schema: StructType,
    narrow: KeyFilter | None,
    whole: bool,
) -> DataFrame | None:
    """The rows of MV ``name`` at ``version`` that ``narrow``'s IN lists or ranges keep (a superset of
    the rows a merge touches; all rows without one), read by delta-rs (for an MV the caller found
    ``usable``) and handed to Spark as a local relation: no Delta snapshot, file-skipping or scan job
    in Spark. Only the files ``narrow`` may keep are read; unless the MV is small (``whole``: read
    whole without a narrow) they must hold at most ``REWRITE_LIMIT_BYTES``. None (the caller reads
    with Spark) when they do not, the rows kept are over ``ARROW_ROWS`` or a column does not convert."""
    within = _within(narrow)
    table = None
    if not whole:
        try:
            table = warehouse.rs_table(settings, name, version)
            many = within is None or _bytes_in(table, within) > REWRITE_LIMIT_BYTES
        except Exception as unread:  # noqa: BLE001 - whatever delta-rs cannot do here, Spark reads
            log.info("delta-rs did not select the files of %s (%s): Spark reads", name, unread)
            return None
        if many:
            return None
    rows = read_whole(settings, name, version, schema, within, table)
    if rows is None:
        return None
    for part in narrow.parts if narrow is not None else ():  # the parts ``within`` leaves out too
        rows = rows.filter(_kept(rows.column(part.column), part))
    if rows.num_rows > ARROW_ROWS:
        return None
    return to_spark(session, rows, schema)


def _kept(column: Any, part: Any) -> Any:
    """``part`` (a ``key_filter`` IN list or range of literal-exact values) as an Arrow mask:
    ``column IN values`` or ``low <= column <= high``, NULL kept where the keys hold a NULL."""
    if part.values is not None:
        present = [v for v in part.values if v is not None]
        found = pc.is_in(column, value_set=pa.array(present, type=column.type))
        nulls = None in part.values
    elif part.low is None:  # every key value is NULL
        return pc.is_null(column)
    else:
        low, high = pa.scalar(part.low, type=column.type), pa.scalar(part.high, type=column.type)
        found = pc.and_(pc.greater_equal(column, low), pc.less_equal(column, high))
        nulls = part.nulls
    return pc.or_kleene(found, pc.is_null(column)) if nulls else pc.fill_null(found, False)


def merge(
    settings: Settings,
    name: str,
    version: int,
    spec: PlainMerge,
    source: DataFrame,
    commit: CommitId,
    *,
    large_files: bool = False,
) -> bool | None:
    """Commit ``spec`` with ``source`` (small, held) into MV ``name`` as of ``version``. False when
    nothing was committed because the table already recorded ``commit``'s version or more for its app id;
    None when ``source`` has over ``ARROW_ROWS`` rows, or the MV has ``large_files`` and the ones its
    rows may be in (``spec.narrow``, by their statistics) hold over ``REWRITE_LIMIT_BYTES`` (Spark
    merges: delta-rs rewrites each file it touches, Spark can mark rows in deletion vectors).

    Raises WriteConflict when another commit came after ``version``; another error when delta-rs
    cannot merge these rows into this table (the caller has Spark merge: same transaction identifier)."""
    table = warehouse.rs_table(settings, name, version)
    if _recorded(table, commit):
        return False
    within = _within(spec.narrow, "t")
    if large_files and (within is None or _bytes_in(table, _within(spec.narrow)) > REWRITE_LIMIT_BYTES):
        return None  # many large files to rewrite: Spark marks the rows in deletion vectors instead
    properties = _properties(commit)
    rows = source.limit(ARROW_ROWS + 1).toArrow()  # held: no job beyond the hand-over
    if rows.num_rows > ARROW_ROWS:
        return None
    with _committing(table, name, version):
        if rows.num_rows:
            _merge(table, rows, spec, properties, within)
        if table.version() == version:  # delta-rs commits no MERGE that changes nothing: the
            _append_nothing(table, properties)  # watermark needs one
    return True


def empty_commit(settings: Settings, name: str, version: int, commit: CommitId) -> bool:
    """An empty commit carrying ``commit`` (its watermark, its transaction identifier) on table
    ``name`` as of ``version``, by delta-rs (no Spark job); False when the table already recorded
    ``commit``'s version or more for its app id. The caller checked ``usable``.

    Raises WriteConflict when another commit came after ``version``."""
    table = warehouse.rs_table(settings, name, version)
    if _recorded(table, commit):
        return False
    with _committing(table, name, version):
        _append_nothing(table, _properties(commit))
    return True


def _append_nothing(table: DeltaTable, properties: CommitProperties) -> None:
    empty = Table.from_batches([], schema=table.schema().to_arrow())
    write_deltalake(table, empty, mode="append", commit_properties=properties)


def overwrite(
    settings: Settings,
    name: str,
    version: int,
    frame: DataFrame,
    commit: CommitId,
) -> bool | None:
    """A complete refresh's result ``frame`` replacing MV ``name`` as of ``version``, by delta-rs: the
    result collected as Arrow (one Spark job) instead of written by Spark (Delta's snapshot of the MV,
    the write and its statistics: ~0.5 s more for a tiny MV). True when committed, False when the
    table already recorded ``commit``'s version or more for its app id; None where Spark writes instead:
    delta-rs may not write the MV (``usable``), it was or now is over ``arrow.READ_LIMIT_BYTES`` /
    ``ARROW_ROWS``, or the result's columns are not the table's (Spark changes the schema).

    Raises WriteConflict when another commit came after ``version``."""
    if not warehouse.is_local(settings) or not small(warehouse.table_summary(settings, name, version)):
        return None
    return _write_rows(settings, name, version, frame, commit, mode="overwrite")


def append(settings: Settings, name: str, version: int, frame: DataFrame, commit: CommitId) -> bool | None:
    """A FAST run's new MV rows ``frame`` (computed from held change rows) appended to MV ``name`` as
    of ``version``, by delta-rs: collected as Arrow instead of written by Spark (Delta's snapshot of the
    MV, the write job and its statistics job: ~1 s whatever the rows). True, False and None as for
    ``overwrite`` (None: over ``ARROW_ROWS`` rows, or columns delta-rs would not write as Spark does).

    Raises WriteConflict when another commit came after ``version``."""
    if not warehouse.is_local(settings):
        return None
    return _write_rows(settings, name, version, frame, commit, mode="append")


def _write_rows(
    settings: Settings,
    name: str,
    version: int,
    frame: DataFrame,
    commit: CommitId,
    *,
    mode: Literal["append", "overwrite"],
) -> bool | None:
    table = warehouse.rs_table(settings, name, version)
    if not _writable(table):
        return None
    if _recorded(table, commit):
        return False
    try:
        wanted = pa.schema(table.schema().to_arrow())
        if [(f.name, f.type) for f in to_arrow_schema(frame.schema)] != [(f.name, f.type) for f in wanted]:
            return None
        rows = frame.limit(ARROW_ROWS + 1).toArrow()
        if rows.num_rows > ARROW_ROWS:
            return None
        rows = rows.cast(wanted)
    except Exception as unfit:  # noqa: BLE001 - e.g. a column type Arrow or delta-rs lacks
        log.info("delta-rs does not write %s (%s): Spark writes", name, unfit)
        return None
    with _committing(table, name, version):
        write_deltalake(table, rows, mode=mode, commit_properties=_properties(commit))
    return True


def _properties(commit: CommitId) -> CommitProperties:
    return CommitProperties(
        custom_metadata={"userMetadata": commit.metadata} if commit.metadata is not None else None,
        app_transactions=[Transaction(commit.app_id, commit.txn_version)],
        max_commit_retries=0,  # no rebase onto a newer version: see the module's docstring
    )


def _recorded(table: DeltaTable, commit: CommitId) -> bool:
    """Has the table recorded ``commit``'s version or more for its app id? Delta's idempotent writes
    skip such a commit (a replay, or an older epoch than the table's writer)."""
    recorded = table.transaction_version(commit.app_id)
    return recorded is not None and recorded >= commit.txn_version


@contextmanager
def _committing(table: DeltaTable, name: str, version: int) -> Iterator[None]:
    """A commit made on ``version``: a commit after it is a WriteConflict; a checkpoint every
    ``CHECKPOINT_INTERVAL`` versions."""
    try:
        yield
    except CommitFailedError as conflict:
        raise WriteConflict(
            f"{_CONFLICT}: another writer committed to {name} after version {version} ({conflict})"
        ) from conflict
    if table.version() % CHECKPOINT_INTERVAL == 0:
        table.create_checkpoint()


def _merge(
    table: DeltaTable, rows: Any, spec: PlainMerge, commit: CommitProperties, within: str | None
) -> None:
    s, t = "s", "t"
    # Each in parentheses: DataFusion's parser binds AND tighter than IS NOT DISTINCT FROM. A predicate
    # on the target alone (``within``) is what delta-rs skips the target's files by.
    matches = [f"({t}.{_q(k)} IS NOT DISTINCT FROM {s}.{_q(k)})" for k in spec.keys]
    if within is not None:
        matches.insert(0, within)
    condition = " AND ".join(matches) or "TRUE"  # no keys: a global aggregate's one row
    op = f"{s}.{_q(spec.op_column)}"
    if spec.insert_op is not None:  # insert-only rows must not match a target row
        condition = f"({op} <> {_literal(spec.insert_op)}) AND {condition}"
    builder = table.merge(rows, condition, source_alias=s, target_alias=t, commit_properties=commit)
    builder = builder.when_matched_delete(f"{op} = {_literal(spec.delete_op)}")
    values = {_q(c): f"{s}.{_q(c)}" for c in spec.columns}
    if spec.upsert_op is not None:
        updates = {k: v for k, v in values.items() if k not in {_q(c) for c in spec.keys}}
        if updates:
            builder = builder.when_matched_update(updates, f"{op} = {_literal(spec.upsert_op)}")
    inserted = [o for o in (spec.upsert_op, spec.insert_op) if o is not None]
    if inserted:
        builder = builder.when_not_matched_insert(
            values, " OR ".join(f"{op} = {_literal(o)}" for o in inserted)
        )
    builder.execute()


def _within(narrow: KeyFilter | None, alias: str | None = None) -> str | None:
    """``narrow`` as a DataFusion predicate on the target's columns (``alias.column``), from its
    integer and plain-string parts (the rest left out: a superset still); None when no part is left."""
    terms = []
    for part in narrow.parts if narrow is not None else ():
        literals = _literals(part)
        if literals is None:
            continue
        column = f"{alias}.{_q(part.column)}" if alias else _q(part.column)
        if part.values is not None:
            found = f"{column} IN ({', '.join(literals)})" if literals else "FALSE"
            nulls = None in part.values
        elif part.low is None:  # every key value is NULL
            found, nulls = "FALSE", True
        else:
            found, nulls = f"({column} >= {literals[0]} AND {column} <= {literals[1]})", part.nulls
        terms.append(f"({found} OR {column} IS NULL)" if nulls else f"({found})")
    return " AND ".join(terms) or None


def _literals(part: Any) -> list[str] | None:
    """The part's values (or low and high) as SQL literals, or None: a type, or a string with a
    character, that a literal might not carry exactly (only integers and plain strings are)."""
    values = [v for v in part.values if v is not None] if part.values is not None else [part.low, part.high]
    values = [v for v in values if v is not None]
    if isinstance(part.dtype, IntegralType):
        return [str(int(v)) for v in values]
    if isinstance(part.dtype, StringType) and all(_plain(v) for v in values):
        return [_literal(v) for v in values]
    return None


def _plain(value: object) -> bool:
    return isinstance(value, str) and value.isprintable() and "\\" not in value


def _bytes_in(table: DeltaTable, predicate: str | None) -> int:
    """Bytes of the table's data files whose statistics may hold rows ``predicate`` keeps (local)."""
    return sum(os.path.getsize(uri) for uri in table.file_uris(file_pruning_predicate=predicate))


def _q(name: str) -> str:
    """A column name as a quoted DataFusion identifier (case and punctuation kept)."""
    return '"' + name.replace('"', '""') + '"'


def _literal(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"
