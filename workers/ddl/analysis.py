"""The coordinator's analysis of an MV query, the one both CREATE and EXPLAIN use.

``analyze_query`` with the base tables' columns as the Delta logs give them (so a join's unqualified
columns resolve as Spark resolves them), its refusals as coded errors (``MvsError``): the coordinator
answers a CREATE with them, ``mvs explain`` and ``POST /explain`` show them.
"""

from __future__ import annotations

from collections.abc import Callable

from workers.catalog.errors import ErrorCode, MvsError
from workers.catalog.names import name_problem
from workers.ddl.errors import DdlError
from workers.ddl.query import QueryInfo, analyze_query

# A table's columns from its Delta log; None: no such table (or unreadable by its log).
TableColumns = Callable[[str], tuple[str, ...] | None]


def analyze_mv_query(query: str, table_columns: TableColumns) -> QueryInfo:
    """The analysis of ``query``; raises MvsError (1001 for a query that may not be an MV's, 2001
    when a table's columns cannot be read)."""

    def columns_of(table: str) -> tuple[str, ...] | None:
        if name_problem(table, "table") is not None:
            return None  # refused by name after the analysis
        try:
            return table_columns(table)
        except OSError as exc:
            raise MvsError(
                ErrorCode.STORAGE_UNAVAILABLE, f"cannot read the columns of {table}: {exc}"
            ) from exc

    try:
        return analyze_query(query, columns_of=columns_of)
    except DdlError as exc:
        raise MvsError(ErrorCode.INVALID_CONFIG, str(exc)) from exc
    except (RecursionError, ValueError, TypeError) as exc:
        # The SQL parser gave up on text no statement of ours produces (a raw producer's).
        raise MvsError(
            ErrorCode.INVALID_CONFIG, f"the query cannot be analysed: {type(exc).__name__}: {exc}"
        ) from exc
