"""The probe's ACL check: what the broker says a principal may do to a topic, before reading it."""

from __future__ import annotations

import time
from concurrent.futures import Future
from types import SimpleNamespace
from typing import Any

import pytest

from workers.kafka.errors import BusError
from workers.kafka.probe import AclOperation, _check_access


class Admin:
    """Answers describe_topics with the given authorized operations per topic (None: not said)."""

    def __init__(self, operations: dict[str, list[AclOperation] | None]) -> None:
        self.operations = operations

    def describe_topics(self, topics: Any, **_: Any) -> dict[str, Future[Any]]:
        futures = {}
        for name in topics.topic_names:
            future: Future[Any] = Future()
            future.set_result(SimpleNamespace(authorized_operations=self.operations[name]))
            futures[name] = future
        return futures


def check(operations: dict[str, list[AclOperation] | None], needs: dict[str, AclOperation]) -> None:
    _check_access(Admin(operations), needs, time.monotonic() + 5)  # type: ignore[arg-type]


def test_a_topic_the_principal_may_only_describe_is_not_readable() -> None:
    with pytest.raises(BusError) as raised:
        check({"mvs.runs": [AclOperation.DESCRIBE]}, {"mvs.runs": AclOperation.READ})
    assert raised.value.code == "TOPIC_AUTHORIZATION_FAILED"
    assert str(raised.value) == "not authorized to read topic mvs.runs (the principal needs READ on it)"


def test_granted_all_or_unknown_passes() -> None:
    check(
        {"a": [AclOperation.READ, AclOperation.DESCRIBE], "b": [AclOperation.ALL], "c": None},
        {"a": AclOperation.READ, "b": AclOperation.WRITE, "c": AclOperation.READ},
    )
