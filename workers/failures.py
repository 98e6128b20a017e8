"""How an `mvs` command fails: exit codes, the one error line, and the watchdog that gives up
on a command that hangs.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

if TYPE_CHECKING:
    from workers.config import Settings

T = TypeVar("T")
EXIT_REFUSED = 1  # the coordinator refused the statement; also any other failure
EXIT_STATEMENT = 2  # the statement is not valid DDL (nothing published)
EXIT_UNAVAILABLE = 3  # no answer from the broker or a coordinator, or refused credentials
EXIT_INTERRUPTED = 130
# The command's own deadlines report first; this much later the watchdog gives up on it.
WATCHDOG_GRACE_S = 2.0


class UsageError(Exception):
    """The command line asks for something that does not exist (code 1001)."""


def error_line(code: int | None, message: str) -> str:
    """The one line a failed command prints: ``ERROR <code>: <message>``."""
    text = " ".join(str(message).split())
    return f"ERROR {code}: {text}" if code is not None else f"ERROR: {text}"


class CommandTimeout(Exception):
    """The command did not end within its timeout (a call the deadlines could not bound)."""


def within(timeout_s: float, call: Callable[[], T], *, grace_s: float = WATCHDOG_GRACE_S) -> T:
    """``call()`` on a helper thread, given up ``grace_s`` after ``timeout_s``: every
    Kafka call inside is bounded by the command's deadline, this bounds what they cannot (a broker
    that accepts connections and never answers, a close that waits for it)."""
    box: dict[str, Any] = {}

    def run() -> None:
        try:
            box["result"] = call()
        except BaseException as exc:  # handed to the caller's thread
            box["error"] = exc

    thread = threading.Thread(target=run, name="mvs-command", daemon=True)
    thread.start()
    thread.join(timeout_s + grace_s)
    if thread.is_alive():
        raise CommandTimeout(f"no answer within {timeout_s:g}s")
    if "error" in box:
        raise box["error"]
    result: T = box["result"]
    return result


def failure(exc: BaseException, settings: Settings | None) -> tuple[int | None, str, int]:
    """(code, message, exit code) of a command that raised ``exc``."""
    from workers.catalog.errors import ErrorCode, MvsError
    from workers.client import DdlTimeout, MvsClientError, StatementError
    from workers.kafka.errors import BusError

    if isinstance(exc, StatementError):
        return exc.code, str(exc), EXIT_STATEMENT
    if isinstance(exc, DdlTimeout):
        return exc.code, str(exc), EXIT_UNAVAILABLE
    if isinstance(exc, MvsClientError):
        return exc.code, str(exc), EXIT_UNAVAILABLE
    if isinstance(exc, CommandTimeout):
        where = settings.bootstrap_servers if settings is not None else "the broker"
        return int(ErrorCode.BUS_UNAVAILABLE), f"broker unreachable at {where} ({exc})", EXIT_UNAVAILABLE
    if isinstance(exc, BusError):
        return int(ErrorCode.BUS_UNAVAILABLE), str(exc), EXIT_UNAVAILABLE
    if isinstance(exc, MvsError):
        return int(exc.code), exc.message, EXIT_REFUSED
    if isinstance(exc, RecursionError):
        return int(ErrorCode.INVALID_CONFIG), "input nested too deeply", EXIT_STATEMENT
    if isinstance(exc, (UsageError, ValueError)):
        return int(ErrorCode.INVALID_CONFIG), str(exc), EXIT_STATEMENT
    if isinstance(exc, OSError):
        return int(ErrorCode.STORAGE_UNAVAILABLE), f"{type(exc).__name__}: {exc}", EXIT_REFUSED
    return None, f"unexpected {type(exc).__name__}: {exc} (run with --debug for the traceback)", EXIT_REFUSED
