"""Where Delta tables live in the warehouse, and what their logs say — without a JVM.

The coordinator and the maintainers decide "base unchanged → skip" before any Spark work, so
these helpers read the ``_delta_log`` folder directly: a directory listing is a few milliseconds,
a SparkSession start is seconds. Only local warehouses (plain paths or ``file:`` URIs) are
supported for now; other schemes raise ``NotImplementedError`` so nobody gets a silent wrong answer.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlparse

from workers.catalog.names import MLOG_SUFFIX, MVSTATE_SUFFIX, check_table_name
from workers.config import Settings

DELTA_LOG = "_delta_log"
# A commit file is exactly 20 digits + ".json"; checkpoints, .crc files and Delta's hidden
# in-flight temp files (".000…json.<uuid>.tmp") never match.
_COMMIT_FILE = re.compile(r"^(\d{20})\.json$")


def table_path(settings: Settings, name: str) -> str:
    """Location of table ``name``: ``<warehouse>/<name>`` (any URI scheme Spark understands).

    Table names come from DDL and become folder names: a name that breaks the rule of
    ``workers.catalog.names`` (and so could escape the warehouse folder, or is too long for a file
    system) raises ``InvalidName`` (a ValueError) before any path is built.
    """
    return f"{settings.warehouse.rstrip('/')}/{check_table_name(name)}"


def mlog_table_name(base: str) -> str:
    """The MV log (captured change rows) of base table ``base`` is the Delta table ``<base>__mlog``."""
    return check_table_name(f"{check_table_name(base)}{MLOG_SUFFIX}")


def state_table_name(mv: str) -> str:
    """The helper state of aggregate MV ``mv`` (per-group counts and exact sums, never shown to its
    readers; ``workers.jobs.aggregate_state``) is the Delta table ``<mv>__mvstate``."""
    return check_table_name(f"{check_table_name(mv)}{MVSTATE_SUFFIX}")


def local_table_dir(settings: Settings, name: str) -> Path:
    """Local folder of table ``name``; NotImplementedError for remote warehouses (s3a://, abfss://, …)."""
    location = table_path(settings, name)
    parsed = urlparse(location)
    if parsed.scheme == "":
        return Path(location)
    if parsed.scheme == "file":
        return Path(unquote(parsed.path))
    raise NotImplementedError(
        f"warehouse {settings.warehouse!r}: only local paths and file: URIs are supported "
        f"by workers.warehouse so far (scheme {parsed.scheme!r})"
    )


def is_local(settings: Settings) -> bool:
    """True when the warehouse is a local folder, whose Delta logs these helpers read directly."""
    return urlparse(settings.warehouse).scheme in ("", "file")


def latest_version(settings: Settings, name: str) -> int | None:
    """Newest committed Delta version of table ``name`` (max ``NNNN.json``), None if no table."""
    log_dir = local_table_dir(settings, name) / DELTA_LOG
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
    path = local_table_dir(settings, name) / DELTA_LOG / f"{version:020d}.json"
    with path.open(encoding="utf-8") as handle:
        return [json.loads(line) for line in handle if line.strip()]


def read_checksum(settings: Settings, name: str, version: int) -> dict[str, Any] | None:
    """The table's state at ``version`` as Delta summarized it in ``NNNN.crc`` (``tableSizeBytes``,
    ``numFiles``, ``metadata.schemaString``…), or None: not a local warehouse, or no such file (a
    writer may skip it; callers then do without)."""
    if not is_local(settings):
        return None
    path = local_table_dir(settings, name) / DELTA_LOG / f"{version:020d}.crc"
    try:
        with path.open(encoding="utf-8") as handle:
            body = json.load(handle)
    except (OSError, ValueError):
        return None
    return body if isinstance(body, dict) else None
