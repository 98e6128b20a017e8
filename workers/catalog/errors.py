"""Error codes (seed 002) and the TaskError record every role reports."""

from __future__ import annotations

from enum import IntEnum
from typing import Any


class ErrorCode(IntEnum):
    INVALID_CONFIG = 1001
    DUPLICATE = 1002
    NOT_FOUND = 1003
    STORAGE_UNAVAILABLE = 2001
    BUS_UNAVAILABLE = 3001
    MAINTAINER_CRASH = 4001
    HEARTBEAT_TIMEOUT = 4002
    CHECKPOINT_STALE = 5001
    UNSUPPORTED_VERSION = 6001


# Codes a retry can fix; the rest need the user (seed 001: temporary vs permanent errors).
RETRYABLE_CODES = frozenset(
    {
        ErrorCode.STORAGE_UNAVAILABLE,
        ErrorCode.BUS_UNAVAILABLE,
        ErrorCode.MAINTAINER_CRASH,
        ErrorCode.HEARTBEAT_TIMEOUT,
    }
)


def is_retryable(code: int) -> bool:
    return code in RETRYABLE_CODES


def task_error(code: ErrorCode, message: str, *, at_ms: int, severity: str | None = None) -> dict[str, Any]:
    """A TaskError record; severity defaults from whether the code is retryable."""
    retryable = is_retryable(code)
    return {
        "code": int(code),
        "message": message,
        "severity": severity or ("WARN" if retryable else "ERROR"),
        "retryable": retryable,
        "at": at_ms,
    }


class MvsError(Exception):
    """An error with a seed-002 code, carried up to where the user sees it."""

    def __init__(self, code: ErrorCode, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message

    def record(self, at_ms: int) -> dict[str, Any]:
        return task_error(self.code, self.message, at_ms=at_ms)
