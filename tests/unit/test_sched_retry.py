"""Retry policies (tenacity wait objects) and the blocking ``retrying`` helper; no real sleeping."""

from __future__ import annotations

import random
import threading

import pytest

from workers.catalog.errors import is_retryable
from workers.retry import (
    CLIENT_RETRY,
    REFRESH_RETRY,
    RetryInterrupted,
    RetryPolicy,
    retrying,
)


def test_backoff_sequence_without_jitter_doubles_and_caps() -> None:
    policy = RetryPolicy("t", jitter_s=0.0)
    delays = [policy.delay(n) for n in range(1, 10)]
    assert delays == [5.0, 10.0, 20.0, 40.0, 80.0, 160.0, 300.0, 300.0, 300.0]
    assert policy.delay(10_000) == 300.0  # no overflow far out


def test_backoff_jitter_from_a_seeded_rng_is_exact() -> None:
    expected_rng = random.Random(42)
    expected = [min(300.0, 5.0 * 2 ** (n - 1) + expected_rng.uniform(0.0, 1.0)) for n in range(1, 10)]
    rng = random.Random(42)
    assert [REFRESH_RETRY.delay(n, rng=rng) for n in range(1, 10)] == expected
    assert 5.0 <= expected[0] <= 6.0
    assert expected[-1] == 300.0  # jitter never pushes past the cap


def test_default_policies() -> None:
    assert (REFRESH_RETRY.base_s, REFRESH_RETRY.factor, REFRESH_RETRY.cap_s) == (5.0, 2.0, 300.0)
    assert REFRESH_RETRY.max_attempts == 8
    assert CLIENT_RETRY.delay(1) < 1.0 and CLIENT_RETRY.cap_s <= 5.0


def test_exhaustion() -> None:
    assert not REFRESH_RETRY.exhausted(7)
    assert REFRESH_RETRY.exhausted(8)
    assert REFRESH_RETRY.exhausted(9)
    forever = RetryPolicy("forever", max_attempts=None)
    assert not forever.exhausted(1_000_000)


def test_invalid_policies_and_attempts() -> None:
    with pytest.raises(ValueError):
        RetryPolicy("bad", base_s=10.0, cap_s=5.0)
    with pytest.raises(ValueError):
        RetryPolicy("bad", max_attempts=0)
    with pytest.raises(ValueError):
        REFRESH_RETRY.delay(0)


@pytest.mark.parametrize(
    ("code", "retryable"),
    [
        (1001, False),
        (1002, False),
        (1003, False),
        (2001, True),
        (3001, True),
        (4001, True),
        (4002, True),
        (5001, False),
        (6001, False),
        (9999, False),
    ],
)
def test_retryable_by_code(code: int, retryable: bool) -> None:
    assert is_retryable(code) is retryable


FAST = RetryPolicy("fast", base_s=1.0, factor=2.0, cap_s=3.0, jitter_s=0.0, max_attempts=5)


class Flaky:
    def __init__(self, failures: int, exc: type[Exception] = ConnectionError) -> None:
        self.failures = failures
        self.calls = 0
        self.exc = exc

    def __call__(self) -> str:
        self.calls += 1
        if self.calls <= self.failures:
            raise self.exc(f"failure {self.calls}")
        return "ok"


def test_retrying_records_delays_and_succeeds() -> None:
    slept: list[float] = []
    fn = Flaky(failures=3)
    assert retrying(FAST, sleep=slept.append)(fn) == "ok"
    assert fn.calls == 4
    assert slept == [1.0, 2.0, 3.0]


def test_retrying_gives_up_with_the_last_error() -> None:
    slept: list[float] = []
    fn = Flaky(failures=100)
    with pytest.raises(ConnectionError, match="failure 5"):
        retrying(FAST, sleep=slept.append)(fn)
    assert fn.calls == 5
    assert slept == [1.0, 2.0, 3.0, 3.0]


def test_retrying_as_an_attempt_loop() -> None:
    slept: list[float] = []
    fn = Flaky(failures=1)
    result = None
    for attempt in retrying(FAST, sleep=slept.append):
        with attempt:
            result = fn()
    assert result == "ok" and slept == [1.0]


def test_retrying_stops_on_the_stop_event_during_the_sleep() -> None:
    stop = threading.Event()
    slept: list[float] = []

    def sleep(seconds: float) -> None:
        slept.append(seconds)
        if len(slept) == 2:
            stop.set()  # shutdown arrives while waiting for the third attempt

    fn = Flaky(failures=100)
    with pytest.raises(RetryInterrupted) as info:
        retrying(FAST, sleep=sleep, stop_event=stop)(fn)
    assert fn.calls == 2  # no attempt after the stop
    assert slept == [1.0, 2.0]
    assert isinstance(info.value.__cause__, ConnectionError)


def test_retrying_sleeps_on_the_event_and_stops_at_once_when_already_set() -> None:
    stop = threading.Event()
    stop.set()
    fn = Flaky(failures=100)
    policy = RetryPolicy("slow", base_s=3600.0, cap_s=3600.0, jitter_s=0.0)  # would hang if it slept
    with pytest.raises(RetryInterrupted):
        retrying(policy, stop_event=stop)(fn)
    assert fn.calls == 1


def test_retrying_event_wait_is_the_sleep() -> None:
    waits: list[float | None] = []

    class RecordingEvent(threading.Event):
        def wait(self, timeout: float | None = None) -> bool:
            waits.append(timeout)
            return False  # "timed out": go on with the next attempt

    event = RecordingEvent()
    fn = Flaky(failures=2)
    assert retrying(FAST, stop_event=event)(fn) == "ok"
    assert waits == [1.0, 2.0]


def test_retrying_only_retries_what_retry_on_accepts() -> None:
    slept: list[float] = []
    fn = Flaky(failures=3, exc=ValueError)
    with pytest.raises(ValueError):
        retrying(FAST, sleep=slept.append, retry_on=lambda e: isinstance(e, ConnectionError))(fn)
    assert fn.calls == 1 and slept == []


def test_retrying_uses_the_rng_for_jitter() -> None:
    policy = RetryPolicy("j", base_s=1.0, cap_s=100.0, jitter_s=0.5, max_attempts=4)
    slept: list[float] = []
    with pytest.raises(ConnectionError):
        retrying(policy, sleep=slept.append, rng=random.Random(7))(Flaky(failures=10))
    expected_rng = random.Random(7)
    assert slept == [
        1.0 + expected_rng.uniform(0, 0.5),
        2.0 + expected_rng.uniform(0, 0.5),
        4.0 + expected_rng.uniform(0, 0.5),
    ]
