"""How the REST API fails: the HTTP status and ``{"error_code", "message"}`` body of every failure,
from the same (code, message) the CLI prints (``workers.failures.failure``). Never a traceback."""

from __future__ import annotations

import logging

from typing_extensions import TypedDict

from workers.catalog.errors import ErrorCode
from workers.config import Settings
from workers.failures import EXIT_STATEMENT, EXIT_UNAVAILABLE, failure

log = logging.getLogger(__name__)

# A refused statement's error code → HTTP status (the coordinator's DdlResult, or a bad name).
_REFUSAL_STATUS: dict[int, int] = {
    ErrorCode.INVALID_CONFIG: 400,
    ErrorCode.DUPLICATE: 409,
    ErrorCode.NOT_FOUND: 404,
    ErrorCode.STORAGE_UNAVAILABLE: 503,
    ErrorCode.BUS_UNAVAILABLE: 503,
    ErrorCode.UNSUPPORTED_VERSION: 400,
}


class ApiErrorJson(TypedDict):
    error_code: (
        int | None
    )  # seed-002 code (docs/ARCHITECTURE.md "Error codes"); None only for a bug of ours (500)
    message: str


class ApiError(Exception):
    """A request the API answers with ``status`` and ``{"error_code": code, "message": message}``."""

    def __init__(self, status: int, code: int | None, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = " ".join(message.split())

    def body(self) -> ApiErrorJson:
        return {"error_code": self.code, "message": self.message}


def refusal(code: int, message: str) -> ApiError:
    """A statement refused with seed-002 ``code``: 404 for an unknown MV, 409 for a duplicate, …"""
    return ApiError(_REFUSAL_STATUS.get(code, 409), code, message)


def not_found(message: str) -> ApiError:
    return ApiError(404, int(ErrorCode.NOT_FOUND), message)


def bad_request(message: str) -> ApiError:
    return ApiError(400, int(ErrorCode.INVALID_CONFIG), message)


def api_error(exc: BaseException, settings: Settings) -> ApiError:
    """The answer to a request that raised ``exc``: 400 for a bad statement, 403 when this principal
    may not read or write what it needs, 503 when the broker (or storage) is out, 504 when no
    coordinator answered a statement in time, 500 (logged here, never shown) for a bug of ours."""
    from workers.catalog.errors import MvsError
    from workers.client import DdlTimeout, NotAuthorized

    if isinstance(exc, ApiError):
        return exc
    code, message, exit_code = failure(exc, settings)
    if isinstance(exc, NotAuthorized):
        return ApiError(403, exc.code, message)
    if isinstance(exc, DdlTimeout):
        return ApiError(504, exc.code, message)
    if exit_code == EXIT_STATEMENT:
        return ApiError(400, code or int(ErrorCode.INVALID_CONFIG), message)
    if exit_code == EXIT_UNAVAILABLE or isinstance(exc, OSError):
        return ApiError(503, code or int(ErrorCode.BUS_UNAVAILABLE), message)
    if isinstance(exc, MvsError):
        return refusal(int(exc.code), message)
    log.error("unexpected failure in a request", exc_info=exc)
    return ApiError(500, None, f"unexpected {type(exc).__name__} (see the server's log)")
