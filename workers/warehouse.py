"""Where Delta tables live in the warehouse, and what their logs say — without a JVM.

The coordinator and the maintainers decide "base unchanged → skip" before any Spark work, so
these helpers read the Delta log without Spark (a SparkSession start is seconds). Outside the
refresh engine, the only module that imports ``deltalake`` (delta-rs): its object store reads commit
and checksum files of local and remote tables alike (``s3://``, ``gs://``, ``abfss://``…;
``Settings.storage`` says how to reach them), and gives a remote table's latest version. A local
table's latest version is a listing of its ``_delta_log`` folder instead: ~0.02 ms, where delta-rs
loads the whole snapshot (4-12 ms for a tiny table, ~50 ms with 2,500 files;
``bench/objectstore_log.py``).
Here delta-rs is used for versions, commit files and checksums only; the refresh engine's delta-rs
reads and commits (``workers.jobs.delta``, ``workers.jobs.changes.rs_reads``) say which tables they
take.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import threading
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlparse

from deltalake import DeltaTable
from deltalake._internal import DeltaFileSystemHandler, TableNotFoundError

from workers.catalog.names import KEYS_SUFFIX, MLOG_SUFFIX, MVSTATE_SUFFIX, TOPN_SUFFIX, check_table_name
from workers.config import Settings, spark_location

DELTA_LOG = "_delta_log"
# A commit file is exactly 20 digits + ".json"; checkpoints, .crc files and Delta's hidden
# in-flight temp files (".000…json.<uuid>.tmp") never match.
_COMMIT_FILE = re.compile(r"^(\d{20})\.json$")


def table_path(settings: Settings, name: str) -> str:
    """Location of table ``name``: ``<warehouse>/<name>`` as Spark addresses it (``s3://`` → ``s3a://``,
    ``workers.config.spark_location``).

    Table names come from DDL and become folder names: a name that breaks the rule of
    ``workers.catalog.names`` (and so could escape the warehouse folder, or is too long for a file
    system) raises ``InvalidName`` (a ValueError) before any path is built.
    """
    return f"{warehouse_location(settings)}/{check_table_name(name)}"


def warehouse_location(settings: Settings) -> str:
    """The warehouse root as Spark addresses it, without a trailing slash."""
    return spark_location(settings.warehouse).rstrip("/")


def mlog_table_name(base: str) -> str:
    """The MV log (captured change rows) of base table ``base`` is the Delta table ``<base>__mlog``."""
    return check_table_name(f"{check_table_name(base)}{MLOG_SUFFIX}")


def state_table_name(mv: str) -> str:
    """The helper state of aggregate MV ``mv`` (per-group counts and exact sums, never shown to its
    readers; ``workers.jobs.fast.aggregate.state``) is the Delta table ``<mv>__mvstate``."""
    return check_table_name(f"{check_table_name(mv)}{MVSTATE_SUFFIX}")


def top_n_table_name(mv: str) -> str:
    """The rows of top-N MV ``mv``'s query without its ORDER BY … LIMIT (kept FAST, the MV is their
    top n; ``workers.jobs.fast.top_n``) are the Delta table ``<mv>__mvtopn``."""
    return check_table_name(f"{check_table_name(mv)}{TOPN_SUFFIX}")


def key_counts_table_name(mv: str) -> str:
    """The matching rows per key of MV ``mv``'s counted semi / anti join inputs (helper state, never
    shown to its readers; ``workers.jobs.fast.operators.semi_join``) are the Delta table ``<mv>__mvkeys``."""
    return check_table_name(f"{check_table_name(mv)}{KEYS_SUFFIX}")


def state_tables(mv: str) -> tuple[str, ...]:
    """The helper states MV (or top-N rows table) ``mv`` may keep: its aggregate's, its key counts."""
    return (state_table_name(mv), key_counts_table_name(mv))


def helper_tables(mv: str) -> tuple[str, ...]:
    """Every helper table MV ``mv`` may keep beside it (never shown to its readers): its helper
    states, and a top-N MV's inner rows with theirs."""
    inner = top_n_table_name(mv)
    return (*state_tables(mv), inner, *state_tables(inner))


def local_table_dir(settings: Settings, name: str) -> Path:
    """Local folder of table ``name``; NotImplementedError for remote warehouses (s3a://, abfss://, …),
    which have none (``delete_table`` and the readers here work on both)."""
    location = table_path(settings, name)
    parsed = urlparse(location)
    if parsed.scheme == "":
        return Path(location)
    if parsed.scheme == "file":
        return Path(unquote(parsed.path))
    raise NotImplementedError(
        f"warehouse {settings.warehouse!r}: only local paths and file: URIs have a local folder "
        f"(scheme {parsed.scheme!r})"
    )


def is_local(settings: Settings) -> bool:
    """True when the warehouse is a local folder (plain path or ``file:`` URI)."""
    return urlparse(settings.warehouse).scheme in ("", "file")


# One attempt with short timeouts: a look taken on a role's loop thread (or by a status command),
# where an object store that is away would hold heartbeats and commands through the client's
# retries (~3 s a read, more when it hangs). The caller treats a failure as "not known now".
QUICK_LOOK = {"max_retries": "0", "connect_timeout": "1s", "timeout": "5s"}


def latest_version(settings: Settings, name: str, *, quick: bool = False) -> int | None:
    """Newest committed Delta version of table ``name``, None if no table (``quick``: one attempt,
    ``QUICK_LOOK``)."""
    if is_local(settings):
        return _latest_local_version(local_table_dir(settings, name) / DELTA_LOG)
    try:
        table = rs_table(settings, name, quick=quick)
    except TableNotFoundError:
        return None
    return table.version()


def rs_table(settings: Settings, name: str, version: int | None = None, *, quick: bool = False) -> DeltaTable:
    """Table ``name`` opened by delta-rs (at ``version``, else the latest)."""
    uri = _log_uri(table_path(settings, name))
    options = _options(settings)
    if quick and not is_local(settings):
        options = {**(options or {}), **QUICK_LOOK}
    return DeltaTable(uri, version=version, storage_options=options)


def _latest_local_version(log_dir: Path) -> int | None:
    # max ``NNNN.json`` of the folder: what delta-rs would answer, without loading the snapshot.
    try:
        entries = os.scandir(log_dir)
    except (FileNotFoundError, NotADirectoryError):
        return None
    with entries:
        versions = [int(m.group(1)) for e in entries if (m := _COMMIT_FILE.match(e.name))]
    return max(versions) if versions else None


def table_exists(settings: Settings, name: str) -> bool:
    """A Delta table exists once its ``_delta_log`` holds at least one commit."""
    return latest_version(settings, name) is not None


def read_commit(settings: Settings, name: str, version: int) -> list[dict[str, Any]]:
    """The actions of one commit (``commitInfo``, ``txn``, ``add``, …), one dict per JSON line.

    Raises FileNotFoundError when the commit file is gone (log cleanup) or never existed.
    """
    body = _read_log_file(settings, name, f"{version:020d}.json")
    return [json.loads(line) for line in body.decode("utf-8").splitlines() if line.strip()]


def read_checksum(settings: Settings, name: str, version: int) -> dict[str, Any] | None:
    """The table's state at ``version`` as Delta summarized it in ``NNNN.crc`` (``tableSizeBytes``,
    ``numFiles``, ``metadata.schemaString``…), or None: no such file (a writer may skip it; callers
    then do without) or an unreadable one."""
    try:
        body = json.loads(_read_log_file(settings, name, f"{version:020d}.crc"))
    except (OSError, ValueError):
        return None
    return body if isinstance(body, dict) else None


def table_summary(settings: Settings, name: str, version: int) -> dict[str, Any] | None:
    """``read_checksum``, else the same figures (``tableSizeBytes``, ``numFiles``,
    ``metadata.schemaString`` and ``.configuration``) read from the log by delta-rs, which writes no
    checksum of its own commits (``workers.jobs.delta.rs_commit``); None when neither can tell."""
    found = read_checksum(settings, name, version)
    if found is not None:
        return found
    try:
        table = rs_table(settings, name, version)
        files = table.get_add_actions(flatten=True)
        size = sum(files.column("size_bytes").to_pylist())
        schema = table.schema().to_json()
        configuration = dict(table.metadata().configuration)
    except Exception:  # noqa: BLE001 - unreadable: the caller does without, as without a checksum
        return None
    metadata = {"schemaString": schema, "configuration": configuration}
    return {"tableSizeBytes": size, "numFiles": files.num_rows, "metadata": metadata}


def table_columns(settings: Settings, name: str) -> tuple[str, ...] | None:
    """The column names of table ``name`` at its latest version, from its Delta log (the checksum's
    schema, else delta-rs's); None when there is no such table or its schema cannot be read."""
    version = latest_version(settings, name)
    if version is None:
        return None
    schema = ((read_checksum(settings, name, version) or {}).get("metadata") or {}).get("schemaString")
    if not isinstance(schema, str):
        try:
            schema = rs_table(settings, name, version).schema().to_json()
        except Exception:  # noqa: BLE001 - unreadable by delta-rs (a reader feature it lacks): unknown
            return None
    try:
        return tuple(str(field["name"]) for field in json.loads(schema)["fields"])
    except (TypeError, ValueError, KeyError):
        return None


def delete_table(settings: Settings, name: str) -> None:
    """Delete table ``name``'s folder (every object under its prefix); no-op for what does not exist.
    (The object store leaves a local table's empty folders behind: a local folder is removed whole.)"""
    if is_local(settings):
        shutil.rmtree(local_table_dir(settings, name), ignore_errors=True)
        return
    try:
        _store(settings).delete_dir(check_table_name(name))
    except FileNotFoundError:
        return


# -- delta-rs object store ---------------------------------------------------------------------------
# One handler per warehouse root and storage options, shared by threads (its calls take &self):
# building one costs ~0.3 ms, a read through it ~0.1 ms for a local file.
_stores: dict[tuple[str, tuple[tuple[str, str], ...]], DeltaFileSystemHandler] = {}
_stores_lock = threading.Lock()


def _log_uri(location: str) -> str:
    # delta-rs names S3 ``s3://``; Spark's ``s3a://`` is the same bucket and key.
    return f"s3://{location[len('s3a://') :]}" if location.startswith("s3a://") else location


def _options(settings: Settings) -> dict[str, str] | None:
    return settings.storage.delta_rs_options() or None


def _store(settings: Settings) -> DeltaFileSystemHandler:
    root = _log_uri(warehouse_location(settings))
    options = _options(settings)
    key = (root, tuple(sorted((options or {}).items())))
    with _stores_lock:
        store = _stores.get(key)
        if store is None:
            try:
                store = _stores[key] = DeltaFileSystemHandler(root, options)
            except TableNotFoundError as exc:  # a local warehouse folder not made yet: no table
                raise FileNotFoundError(str(exc)) from exc
        return store


def _read_log_file(settings: Settings, name: str, file_name: str) -> bytes:
    """Bytes of ``<table>/_delta_log/<file_name>``; FileNotFoundError when it does not exist."""
    path = f"{check_table_name(name)}/{DELTA_LOG}/{file_name}"
    file = _store(settings).open_input_file(path)
    return bytes(file.read(file.size()))
