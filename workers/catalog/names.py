"""The one rule for the names of tables, MVs and MV logs: the grammar, the coordinator and the
warehouse path check all use it, so a name one of them accepts is never refused (or mangled)
by another.

A name is ``[A-Za-z_][A-Za-z0-9_]*`` (the grammar's unquoted identifier), at most
``MAX_NAME_LENGTH`` characters. Names in the catalog are lower case: ``mvs sql`` lower-cases
every name, and Delta folders are looked up by name on case-sensitive file systems, so a raw
event spelling ``Sales`` is refused (with the lower-case spelling in the message) rather than
silently treated as ``sales``.

Why 128: a name becomes a warehouse folder (``<name>`` and, for an MV log, ``<name>__mlog``), and
every common file system limits one path component to 255 bytes (ext4, xfs, APFS; NTFS: 255
UTF-16 units); object stores allow 1024-byte keys in total, which must also hold the warehouse
prefix and Delta's own file names under the table folder. A name is also part of Kafka keys
(``mv:<name>``), where 128 characters is far below any limit, and of log lines and messages a
person reads.
"""

from __future__ import annotations

import re

NAME_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
MAX_NAME_LENGTH = 128
MLOG_SUFFIX = "__mlog"  # workers/jobs keeps the MV log of table T in the table T__mlog
# workers/jobs keeps the helper state of aggregate MV M (per-group counts and sums) in M__mvstate
MVSTATE_SUFFIX = "__mvstate"
# ... and the rows of a top-N MV's query without its ORDER BY … LIMIT in M__mvtopn (whose own helper
# state is M__mvtopn__mvstate)
TOPN_SUFFIX = "__mvtopn"
# ... and the matching rows per key of its EXISTS / NOT EXISTS / IN subqueries' inputs in M__mvkeys
KEYS_SUFFIX = "__mvkeys"
# A warehouse folder may also be an MV log or helper table: the longest name plus the longest suffix.
MAX_TABLE_NAME_LENGTH = MAX_NAME_LENGTH + max(
    len(MLOG_SUFFIX), len(TOPN_SUFFIX) + max(len(MVSTATE_SUFFIX), len(KEYS_SUFFIX))
)
# The fleet's own tables in the warehouse (workers/worker/history_table.py): run history and task
# states. An MV may read them; none may be created under these names (it would replace them).
REFRESH_HISTORY_TABLE = "mvs_refresh_history"
TASKS_TABLE = "mvs_tasks"
RESERVED_TABLE_NAMES = frozenset({REFRESH_HISTORY_TABLE, TASKS_TABLE})
_SHOWN_CHARS = 40
_RESERVED_WHAT = {REFRESH_HISTORY_TABLE: "refresh history", TASKS_TABLE: "task states"}


class InvalidName(ValueError):
    """A name that breaks the rule; the message says which part and how to fix it."""


def shown(name: object) -> str:
    """``name`` quoted for a message, cut short: a refused 10 000-character name is not echoed whole."""
    text = repr(name)
    return text if len(text) <= _SHOWN_CHARS else f"{text[: _SHOWN_CHARS - 4]}...{text[-1]}"


def _shape_problem(name: object, what: str, max_length: int) -> str | None:
    if not isinstance(name, str):
        return f"a {what} name must be a string, not {type(name).__name__}"
    if name == "":
        return f"a {what} name cannot be empty"
    if len(name) > max_length:
        return f"{what} name {shown(name)} is {len(name)} characters long; the limit is {max_length}"
    if not NAME_RE.fullmatch(name):
        return (
            f"invalid {what} name {shown(name)}: names start with a letter or underscore and contain "
            "only letters, digits and underscores (no dots, slashes, spaces or other characters)"
        )
    return None


def name_problem(name: object, what: str) -> str | None:
    """Why ``name`` cannot name a catalog object (an MV, a table read by one, the table of an MV
    log), or None when it can."""
    problem = _shape_problem(name, what, MAX_NAME_LENGTH)
    if problem is None and isinstance(name, str) and name != name.lower():
        return (
            f"{what} name {shown(name)} has upper-case letters: names are lower case "
            f"(mvs sql lower-cases them); use {shown(name.lower())}"
        )
    return problem


def mv_name_problem(name: object) -> str | None:
    """``name_problem`` plus the names reserved for MV log and MV state tables."""
    problem = name_problem(name, "materialized view")
    if problem is None and isinstance(name, str) and name.endswith(MLOG_SUFFIX):
        return f"materialized view names ending in {MLOG_SUFFIX} are reserved for MV log tables"
    for suffix in (MVSTATE_SUFFIX, TOPN_SUFFIX, KEYS_SUFFIX):
        if problem is None and isinstance(name, str) and name.endswith(suffix):
            return f"materialized view names ending in {suffix} are reserved for MV state tables"
    if problem is None and name in RESERVED_TABLE_NAMES:
        return f"{name} is reserved for the table mvs keeps its {_RESERVED_WHAT[str(name)]} in"
    return problem


def mv_log_table_problem(name: object) -> str | None:
    """Why an MV log cannot be kept on table ``name`` (by name alone), or None."""
    problem = name_problem(name, "table")
    if problem is None and isinstance(name, str) and name.endswith(MLOG_SUFFIX):
        return f"{name} is itself an MV log table; an MV log is kept on a base table"
    return problem


def check_table_name(name: str) -> str:
    """``name`` if it may be a warehouse folder (a table, an MV or an MV log table); else InvalidName.

    Case is not checked here: this guards paths, the catalog's lower-case rule is ``name_problem``'s.
    """
    problem = _shape_problem(name, "table", MAX_TABLE_NAME_LENGTH)
    if problem is not None:
        raise InvalidName(problem)
    return name
