"""Named retry policies for Kafka calls that may fail while the cluster is briefly away.

The sleep is injectable so tests run policies without waiting.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import TypeVar

from tenacity import RetryCallState, Retrying, retry_if_exception, stop_after_attempt, wait_exponential

from workers.kafka.errors import is_transient

T = TypeVar("T")
log = logging.getLogger(__name__)


@dataclass(frozen=True)
class RetryPolicy:
    name: str
    attempts: int = 8
    initial_s: float = 0.2
    max_s: float = 5.0
    sleep: Callable[[float], None] = field(default=time.sleep, compare=False)
    retry_on: Callable[[BaseException], bool] = field(default=is_transient, compare=False)
    log_level: int = logging.WARNING  # DEBUG for policies that wait for an expected state

    def with_sleep(self, sleep: Callable[[float], None]) -> RetryPolicy:
        return replace(self, sleep=sleep)

    def _log(self, state: RetryCallState) -> None:
        exc = state.outcome.exception() if state.outcome else None
        log.log(self.log_level, "%s: attempt %d failed (%s); retrying", self.name, state.attempt_number, exc)

    def call(self, fn: Callable[[], T]) -> T:
        """``fn()``, retried on transient errors; the last error is re-raised when attempts run out."""
        retrying = Retrying(
            stop=stop_after_attempt(self.attempts),
            wait=wait_exponential(multiplier=self.initial_s, max=self.max_s),
            retry=retry_if_exception(self.retry_on),
            sleep=self.sleep,
            before_sleep=self._log,
            reraise=True,
        )
        return retrying(fn)


# Topic creation / config reads: the controller may be electing or loading.
ADMIN_RETRY = RetryPolicy("kafka.admin", attempts=8, initial_s=0.2, max_s=5.0)
# Waiting for metadata (a new topic's leaders, a partition count): short, frequent checks.
METADATA_RETRY = RetryPolicy(
    "kafka.metadata", attempts=60, initial_s=0.05, max_s=0.5, log_level=logging.DEBUG
)
# Transaction commit/abort calls librdkafka flags retriable.
TXN_RETRY = RetryPolicy("kafka.transaction", attempts=5, initial_s=0.1, max_s=2.0)
