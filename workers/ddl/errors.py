"""Errors raised by the `mvs sql` front end.

Both kinds are user errors (error code 1001 in the DdlResult): the message is written for the person who
typed the statement, so callers can pass ``str(error)`` straight through.
"""

from __future__ import annotations

from sqlglot import exp


def start_of(node: exp.Expr) -> int | None:
    """The 0-based offset in the query text of ``node``'s first token, when sqlglot kept it."""
    starts = [n.meta["start"] for n in node.walk() if isinstance(n.meta.get("start"), int)]
    return min(starts) if starts else None


class DdlError(ValueError):
    """Base of every error the DDL front end raises; ``position`` is a 0-based offset when known."""

    def __init__(self, message: str, position: int | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.position = position


class InvalidQueryError(DdlError):
    """The SELECT body is not a single read-only query we can maintain.

    ``position`` (when known) is an offset into the query text handed to ``analyze_query``.
    """


class DdlSyntaxError(DdlError):
    """The statement does not follow the grammar in docs/GRAMMAR.md.

    ``position`` is a 0-based offset into the statement; ``line``/``column`` are 1-based and are part of
    ``str()`` so a bare message in a DdlResult still says where the problem is.
    """

    position: int

    def __init__(self, message: str, position: int, sql: str | None = None) -> None:
        super().__init__(message, position)
        self.position = position
        text = sql if sql is not None else ""
        before = text[:position]
        self.line = before.count("\n") + 1
        self.column = position - (before.rfind("\n") + 1) + 1

    def __str__(self) -> str:
        return f"{self.message} (line {self.line}, column {self.column})"
