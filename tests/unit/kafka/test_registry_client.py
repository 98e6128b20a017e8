"""The registry client's pure parts: caching, how registry failures become bus errors, and how an
incompatibility message is turned into field names. (The real registry: tests/integration.)"""

from __future__ import annotations

from typing import Any

import pytest
from confluent_kafka.schema_registry.error import SchemaRegistryError

from workers.codec import DecodeError, get_codec
from workers.kafka import BusError
from workers.kafka.registry import REGISTRY_RETRY, SchemaRegistry, value_subject
from workers.kafka.subjects import field_path, name_fields


class ScriptedClient:
    """Answers each call with the next scripted outcome (a value, or an exception to raise)."""

    def __init__(self, *outcomes: Any) -> None:
        self.outcomes = list(outcomes)
        self.calls: list[str] = []

    def _next(self, call: str) -> Any:
        self.calls.append(call)
        outcome = self.outcomes.pop(0)
        if isinstance(outcome, BaseException):
            raise outcome
        return outcome

    def register_schema(self, subject: str, schema: Any) -> Any:
        return self._next(f"register {subject}")

    def get_schema(self, schema_id: int) -> Any:
        return self._next(f"get {schema_id}")


class Registered:
    def __init__(self, text: str) -> None:
        self.schema_str = text


def registry(client: ScriptedClient, waits: list[float] | None = None) -> SchemaRegistry:
    policy = REGISTRY_RETRY.with_sleep((waits if waits is not None else []).append)
    return SchemaRegistry("http://registry:8081/apis/ccompat/v7", retry=policy, client=client)  # type: ignore[arg-type]


def test_ids_and_schemas_are_asked_once() -> None:
    client = ScriptedClient(4, Registered('{"type": "string"}'))
    reg = registry(client)
    assert [reg.id_for("mvs.ddl-value", "S") for _ in range(3)] == [4, 4, 4]
    assert reg.schema_for(4) == "S"  # what this process registered needs no lookup
    assert [reg.schema_for(5) for _ in range(3)] == ['{"type": "string"}'] * 3
    assert client.calls == ["register mvs.ddl-value", "get 5"]


def test_a_registry_away_is_retried_by_the_named_policy_then_a_retriable_bus_error() -> None:
    waits: list[float] = []
    client = ScriptedClient(*[ConnectionRefusedError("refused")] * 5)
    with pytest.raises(BusError) as away:
        registry(client, waits).id_for("mvs.runs-value", "S")
    assert away.value.retriable and away.value.code == "REGISTRY_UNAVAILABLE"
    assert "schema registry http://registry:8081/apis/ccompat/v7 unavailable" in str(away.value)
    assert waits == [0.2, 0.4, 0.8, 1.6]


def test_a_registry_that_comes_back_within_the_policy_answers() -> None:
    client = ScriptedClient(SchemaRegistryError(503, 50003, "storage away"), 9)
    assert registry(client).id_for("mvs.runs-value", "S") == 9


def test_a_refusal_is_not_retried_and_says_why() -> None:
    client = ScriptedClient(SchemaRegistryError(409, 409, "Incompatible artifact"))
    with pytest.raises(BusError) as refused:
        registry(client).id_for("mvs.runs-value", "S")
    assert not refused.value.retriable and refused.value.code == "409"
    assert "register a schema under mvs.runs-value: Incompatible artifact" in str(refused.value)
    assert len(client.calls) == 1


def test_an_unknown_id_is_the_record_s_fault() -> None:
    client = ScriptedClient(SchemaRegistryError(404, 40403, "No content with ID '77'"))
    with pytest.raises(DecodeError, match="schema id 77 is unknown to the registry"):
        registry(client).schema_for(77)


def test_subjects_follow_the_topic_name_strategy() -> None:
    assert value_subject("mvs.ddl.results") == "mvs.ddl.results-value"


def test_registry_diff_paths_become_field_names() -> None:
    schema = get_codec().schema("DdlResult")  # fields: event_id, task_id, accepted, error, at
    assert field_path(schema, "/fields/0/type") == "event_id"
    assert field_path(schema, "/fields/3/type/1") == "error"
    assert field_path(schema, "/fields/3/type/1/fields/0/type") == "error.code"
    assert field_path(schema, "/fields/99") == "/fields/99"  # names nothing: the path itself
    message = (
        "RuleViolationException: Incompatible artifact: mvs.ddl.results-value [AVRO], num of "
        "incompatible diffs: {2}, list of diff types: [reader type: INT not compatible with writer "
        "type: STRING at /fields/0/type, at at /fields/4]"
    )
    assert name_fields(message, schema) == (
        "field 'event_id': reader type: INT not compatible with writer type: STRING; "
        "field 'at': added without a default (older records do not have it)"
    )
    assert name_fields("something else", schema) == "something else"
