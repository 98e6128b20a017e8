"""A role's loop (dagster-daemon style): ``step()`` repeated until a stop event; tests call ``step()``.

The loop survives its own bugs and the bus's outages: an exception out of ``start()`` or ``step()``
is logged (with its traceback, unless it is the bus being away), counted
(``mvs_loop_errors_total{role}``), kept as ``last_error``, and the loop backs off by
``LOOP_ERROR_RETRY`` (waiting on the stop event, so SIGTERM is never delayed) and goes on. Only a
role that cannot do anything useful exits, with one log line and a non-zero code:

- ``EXIT_FENCED`` (75): the bus says another instance took this role's identity over;
- ``EXIT_MISCONFIGURED`` (78, sysexits' EX_CONFIG): what only an operator can fix — failed
  authentication, a missing ACL, a topic nobody created — persisting for ``MISCONFIG_PERSIST_S``
  with no good step in between (a broker may answer so for a moment after an ACL or topic change).
"""

from __future__ import annotations

import logging
import threading
import time
import traceback
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass
from typing import ClassVar

from workers.kafka.errors import BusError
from workers.retry import LOOP_ERROR_RETRY, RetryPolicy
from workers.sched.clock import SystemClock
from workers.sched.metrics import SchedMetrics, process_metrics

log = logging.getLogger(__name__)

EXIT_OK = 0
EXIT_FENCED = 75
EXIT_MISCONFIGURED = 78
MISCONFIG_PERSIST_S = 60.0


@dataclass(frozen=True)
class LoopError:
    """The last exception a loop survived (or died of)."""

    at_ms: int  # wall clock
    message: str  # "TypeError: ..."
    traceback: str
    consecutive: int  # failed turns in a row, this one included

    def summary(self, limit: int = 300) -> str:
        """One line for an operator: when (UTC), what, and how many turns in a row."""
        when = time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(self.at_ms / 1000))
        text = f"{when}Z: {' '.join(self.message.split())} ({self.consecutive} in a row)"
        return text if len(text) <= limit else text[: limit - 1] + "…"


class LoopRole(ABC):
    role_name: ClassVar[str] = "role"  # the metric's label
    error_policy: ClassVar[RetryPolicy] = LOOP_ERROR_RETRY
    last_error: LoopError | None = None

    @abstractmethod
    def start(self) -> None: ...

    @abstractmethod
    def step(self) -> None: ...

    @abstractmethod
    def close(self) -> None: ...

    def loop_metrics(self) -> SchedMetrics:
        return process_metrics()

    def run(
        self,
        stop: threading.Event,
        *,
        sleep: Callable[[float], object] | None = None,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> int:
        """Start, then ``step()`` until ``stop`` is set; close. Returns the process exit code.

        ``sleep`` (default ``stop.wait``) waits out a backoff; tests inject a recorder."""
        wait = sleep if sleep is not None else stop.wait
        started = False
        failures = 0
        misconfigured_since: float | None = None
        code = EXIT_OK
        try:
            while not stop.is_set():
                try:
                    if started:
                        self.step()
                    else:
                        self.start()
                        started = True
                except Exception as exc:
                    failures += 1
                    self._record(exc, failures)
                    misconfigured = isinstance(exc, BusError) and exc.misconfigured
                    if not misconfigured:
                        misconfigured_since = None
                    elif misconfigured_since is None:
                        misconfigured_since = monotonic()
                    code = _exit_code(
                        exc, None if misconfigured_since is None else monotonic() - misconfigured_since
                    )
                    if code != EXIT_OK:
                        log.error("%s exits (code %d): %s: %s", self.role_name, code, type(exc).__name__, exc)
                        break
                    wait(self.error_policy.delay(failures))
                else:
                    failures, misconfigured_since = 0, None
        finally:
            try:
                self.close()
            except Exception:
                log.exception("%s: close failed", self.role_name)
        return code

    def _record(self, exc: Exception, failures: int) -> None:
        delay = self.error_policy.delay(failures)
        message = f"{type(exc).__name__}: {exc}"
        self.last_error = LoopError(
            at_ms=SystemClock().wall_ms(),
            message=message,
            traceback="".join(traceback.format_exception(exc)),
            consecutive=failures,
        )
        self.loop_metrics().record_loop_error(self.role_name)
        if isinstance(exc, BusError) and exc.retriable:
            # The bus is away (an outage): expected, one line is enough.
            log.warning("%s: bus unavailable (%s); retrying in %.1fs", self.role_name, message, delay)
        else:
            log.error("%s: loop error #%d, retrying in %.1fs", self.role_name, failures, delay, exc_info=exc)


def _exit_code(exc: Exception, misconfigured_for_s: float | None) -> int:
    """EXIT_OK (back off and go on) unless the role cannot do anything useful any more."""
    if isinstance(exc, BusError) and exc.fenced:
        return EXIT_FENCED  # another instance took this role's identity over
    if misconfigured_for_s is not None and misconfigured_for_s >= MISCONFIG_PERSIST_S:
        return EXIT_MISCONFIGURED  # credentials, ACLs or topics: only an operator can fix it
    return EXIT_OK
