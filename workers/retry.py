"""Retry policies (exponential backoff with jitter, capped) built on tenacity's wait objects.

A leaf (imports nothing of mvs), the only module that imports tenacity. One concept for every
retry in mvs: ``RetryPolicy.delay`` is the pure function the maintainer
uses to reschedule a failed refresh (seed 000 §8.3: base 5 s, doubling, cap 5 min);
``RetryPolicy.call`` / ``retrying`` are the blocking form for client calls (the Kafka package's
named policies), with an injectable sleep and a stop event that interrupts the sleep.
"""

from __future__ import annotations

import logging
import random
import threading
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import TypeVar

import tenacity
from tenacity.wait import wait_base, wait_exponential

log = logging.getLogger(__name__)
T = TypeVar("T")


class _wait_jitter(wait_base):
    """Uniform jitter in [0, jitter_s], from an injectable rng (tenacity's own uses ``random``)."""

    def __init__(self, jitter_s: float, rng: random.Random | None) -> None:
        self.jitter_s = jitter_s
        self.rng = rng

    def __call__(self, retry_state: tenacity.RetryCallState) -> float:
        if self.jitter_s <= 0:
            return 0.0
        uniform = self.rng.uniform if self.rng is not None else random.uniform
        return uniform(0.0, self.jitter_s)


class _wait_capped(wait_base):
    """Caps a combined wait, so jitter never pushes a delay past the policy's cap."""

    def __init__(self, inner: wait_base, cap_s: float) -> None:
        self.inner = inner
        self.cap_s = cap_s

    def __call__(self, retry_state: tenacity.RetryCallState) -> float:
        return min(self.cap_s, self.inner(retry_state))


class RetryInterrupted(Exception):
    """``retrying`` was stopped by its stop event; ``__cause__`` is the last attempt's error."""


@dataclass(frozen=True)
class RetryPolicy:
    """``delay(n) = min(cap, base * factor**(n-1) + U(0, jitter))`` after the n-th failure.

    ``retry_on``, ``sleep`` and ``log_level`` only matter to the blocking form (``call``):
    which errors are worth another attempt (default: every ``Exception``), how to wait (default
    ``time.sleep``; tests inject a recorder), and how loudly to log each retry.
    """

    name: str
    base_s: float = 5.0
    factor: float = 2.0
    cap_s: float = 300.0
    jitter_s: float = 1.0
    max_attempts: int | None = 8
    retry_on: Callable[[BaseException], bool] | None = field(default=None, compare=False)
    sleep: Callable[[float], None] | None = field(default=None, compare=False)
    log_level: int = logging.WARNING  # DEBUG for policies that wait for an expected state

    def __post_init__(self) -> None:
        if self.base_s < 0 or self.cap_s < self.base_s or self.factor < 1 or self.jitter_s < 0:
            raise ValueError(f"invalid retry policy {self}")
        if self.max_attempts is not None and self.max_attempts < 1:
            raise ValueError(f"max_attempts must be >= 1 or None, got {self.max_attempts}")

    def wait(self, *, rng: random.Random | None = None) -> wait_base:
        """The tenacity wait strategy of this policy."""
        exponential = wait_exponential(multiplier=self.base_s, exp_base=self.factor, max=self.cap_s)
        return _wait_capped(exponential + _wait_jitter(self.jitter_s, rng), self.cap_s)

    def delay(self, attempt: int, *, rng: random.Random | None = None) -> float:
        """Seconds to wait after failed attempt number ``attempt`` (1-based)."""
        if attempt < 1:
            raise ValueError(f"attempt is 1-based, got {attempt}")
        state = tenacity.RetryCallState(retry_object=_STATE_OWNER, fn=None, args=(), kwargs={})
        state.attempt_number = attempt
        return self.wait(rng=rng)(state)

    def exhausted(self, attempt: int) -> bool:
        """True once ``attempt`` failed attempts used up the budget (never when unlimited)."""
        return self.max_attempts is not None and attempt >= self.max_attempts

    def with_sleep(self, sleep: Callable[[float], None]) -> RetryPolicy:
        """The same policy waiting with ``sleep`` (tests pass ``list.append``: no real waiting)."""
        return replace(self, sleep=sleep)

    def call(self, fn: Callable[[], T], *, stop_event: threading.Event | None = None) -> T:
        """``fn()``, retried per this policy; the last error is re-raised when attempts run out."""
        result: T = retrying(self, stop_event=stop_event)(fn)
        return result


# RetryCallState wants an owner; delay() never runs it.
_STATE_OWNER = tenacity.Retrying()

# Refresh and purge runs (seed 000 §8.3): 5 s, 10 s, 20 s, … capped at 5 min, 8 attempts.
REFRESH_RETRY = RetryPolicy("refresh")
# Kafka admin / client calls: fast, short, bounded to roughly 10 s in total.
CLIENT_RETRY = RetryPolicy("client", base_s=0.2, factor=2.0, cap_s=5.0, jitter_s=0.1, max_attempts=6)
# A role's loop after step() raised (a bug, the bus away): 0.1 s, doubling, capped at 5 s, never giving
# up; the count starts again after a good step. No jitter: one process, nothing to de-synchronise.
LOOP_ERROR_RETRY = RetryPolicy(
    "loop.error", base_s=0.1, factor=2.0, cap_s=5.0, jitter_s=0.0, max_attempts=None
)


def retrying(
    policy: RetryPolicy,
    *,
    sleep: Callable[[float], None] | None = None,
    stop_event: threading.Event | None = None,
    retry_on: Callable[[BaseException], bool] | None = None,
    rng: random.Random | None = None,
) -> tenacity.Retrying:
    """A blocking ``tenacity.Retrying`` for ``policy``.

    Use as ``retrying(CLIENT_RETRY, stop_event=ev)(fn, *args)`` or
    ``for attempt in retrying(...): with attempt: ...``. Retries exceptions for which
    ``retry_on`` (default ``policy.retry_on``, else every ``Exception``) is true, up to
    ``policy.max_attempts`` attempts, then re-raises the last error itself (not
    ``tenacity.RetryError``). ``sleep`` defaults to ``policy.sleep``.

    The sleep between attempts is ``stop_event.wait`` when a stop event is given (so setting
    it ends the wait at once), else ``sleep`` or ``time.sleep``. If the event is set before or
    during a wait, no further attempt is made: ``RetryInterrupted`` is raised from the last
    error. An injected ``sleep`` is still called, then the event is checked.
    """
    last_error: list[BaseException | None] = [None]
    sleep = sleep if sleep is not None else policy.sleep
    retry_on = retry_on if retry_on is not None else policy.retry_on

    def remember(state: tenacity.RetryCallState) -> None:
        last_error[0] = state.outcome.exception() if state.outcome is not None else None
        log.log(
            policy.log_level,
            "%s: attempt %d failed (%s); retrying",
            policy.name,
            state.attempt_number,
            last_error[0],
        )

    def interruptible_sleep(seconds: float) -> None:
        if stop_event is not None and stop_event.is_set():
            raise RetryInterrupted(f"{policy.name}: stopped") from last_error[0]
        if sleep is not None:
            sleep(seconds)
        elif stop_event is not None:
            stop_event.wait(seconds)
        else:
            tenacity.nap.sleep(seconds)
        if stop_event is not None and stop_event.is_set():
            raise RetryInterrupted(f"{policy.name}: stopped") from last_error[0]

    if retry_on is None:
        retry: tenacity.retry_base = tenacity.retry_if_exception_type(Exception)
    else:
        retry = tenacity.retry_if_exception(retry_on)
    stop: tenacity.stop.stop_base = tenacity.stop_never
    if policy.max_attempts is not None:
        stop = tenacity.stop_after_attempt(policy.max_attempts)
    return tenacity.Retrying(
        sleep=interruptible_sleep,
        stop=stop,
        wait=policy.wait(rng=rng),
        retry=retry,
        before_sleep=remember,
        reraise=True,
        name=policy.name,
    )
