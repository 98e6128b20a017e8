"""The Confluent wire format through a real schema registry (Apicurio, keeping its schemas in the
session broker): both encodings on one topic, one lookup per schema, ``mvs schemas apply`` with
BACKWARD compatibility, and a registry that is away at start or goes away mid-run."""

from __future__ import annotations

import json
import shutil
import time
from dataclasses import replace
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest

from tests.support.tcp_proxy import TcpProxy
from workers.cli import main
from workers.codec import Codec, confluent_schema_id
from workers.codec.schemas import SCHEMA_DIR
from workers.config import Settings
from workers.embedded.broker import free_port
from workers.kafka import BusError, TypedConsumer, TypedProducer, apply_topics, read_to_end, tail
from workers.kafka.registry import REGISTRY_RETRY, SchemaRegistry
from workers.kafka.subjects import apply_schemas

T0 = 1_700_000_000_000


def ddl_result(event_id: str) -> dict[str, Any]:
    return {"event_id": event_id, "task_id": None, "accepted": True, "error": None, "at": T0}


def event_ids(messages: list[Any]) -> list[str]:
    return [m.value["event_id"] for m in messages]


def poll_all(consumer: TypedConsumer, count: int, timeout_s: float = 30.0) -> list[Any]:
    got: list[Any] = []
    deadline = time.monotonic() + timeout_s
    while len(got) < count:
        assert time.monotonic() < deadline, f"read {len(got)} of {count}"
        message = consumer.poll(0.2)
        if message is not None:
            got.append(message)
    return got


def test_a_topic_holding_both_encodings_is_read_whole(
    settings: Settings, registry_settings: Settings
) -> None:
    apply_topics(settings)
    with TypedProducer(settings) as before, TypedProducer(registry_settings) as after:
        for i in range(3):
            before.send("ddl.results", f"e{i}", ddl_result(f"e{i}"))
        before.flush()
        for i in range(3, 6):
            after.send("ddl.results", f"e{i}", ddl_result(f"e{i}"))
        after.flush()
        before.send("ddl.results", "e6", ddl_result("e6"))  # a worker not yet switched
        before.flush()
        framed = after.encode_value("ddl.results", ddl_result("x"))
    assert confluent_schema_id(framed) is not None and framed[:1] == b"\x00"
    expected = [f"e{i}" for i in range(7)]
    # Restore, `mvs tail` and the roles' group consumers all read both forms.
    assert event_ids(read_to_end(registry_settings, "ddl.results")) == expected
    assert event_ids(list(tail(registry_settings, "ddl.results", follow=False))) == expected
    with TypedConsumer(registry_settings, group_id=registry_settings.group("readers")) as consumer:
        consumer.assign("ddl.results", [0], from_beginning=True)
        assert event_ids(poll_all(consumer, 7)) == expected
    assert read_to_end(settings, "dlq") == []
    # A reader without the registry says why it cannot read the Confluent ones (and reads the rest).
    plain = read_to_end(settings, "ddl.results", include_errors=True)
    unreadable = [m.offset for m in plain if m.error is not None]
    assert unreadable == [3, 4, 5]
    assert "Confluent wire format (schema id" in str(plain[3].error)


def test_a_schema_is_looked_up_once_per_process_not_per_record(
    settings: Settings, registry_settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    apply_topics(settings)
    url = str(registry_settings.schema_registry_url)
    writer, reader = SchemaRegistry(url), SchemaRegistry(url)
    calls: list[str] = []
    for registry, method in ((writer, "register_schema"), (reader, "get_schema")):
        real = getattr(registry._client, method)

        def counted(*args: Any, _real: Any = real, _name: str = method, **kwargs: Any) -> Any:
            calls.append(_name)
            return _real(*args, **kwargs)

        monkeypatch.setattr(registry._client, method, counted)
    with TypedProducer(registry_settings, registry=writer) as producer:
        for i in range(50):
            producer.send("ddl.results", f"e{i}", ddl_result(f"e{i}"))
        producer.flush()
    with TypedConsumer(registry_settings, registry=reader) as consumer:
        consumer.assign("ddl.results", [0], from_beginning=True)
        assert len(poll_all(consumer, 50)) == 50
    assert calls == ["register_schema", "get_schema"]


def changed_codec(tmp_path: Path, record: str, field: dict[str, Any]) -> Codec:
    """The codec of a local copy of schemas/ where ``record`` has one more field."""
    schemas = tmp_path / "schemas"
    shutil.copytree(SCHEMA_DIR, schemas, ignore=shutil.ignore_patterns("history"))
    path = schemas / f"io.mvs.{record}.avsc"
    schema = json.loads(path.read_text())
    schema["fields"].append(field)
    path.write_text(json.dumps(schema))
    return Codec(schemas, history_dir=None)


def test_schemas_apply_registers_backward_and_names_the_incompatible_field(
    registry_settings: Settings,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    first = apply_schemas(registry_settings)
    subjects = {r.subject: r for r in first}
    topics = ["catalog", "coordinator", "ddl", "ddl.results", "freshness", "maintainer", "manager", "runs"]
    assert sorted(subjects) == sorted(f"{registry_settings.topic(t)}-value" for t in topics)
    assert {r.state for r in first} == {"registered"}
    assert {r.state for r in apply_schemas(registry_settings)} == {"unchanged"}
    registry = SchemaRegistry(str(registry_settings.schema_registry_url))
    results = f"{registry_settings.topic('ddl.results')}-value"
    assert registry._client.get_compatibility(results) == "BACKWARD"

    # A new field without a default: a reader with it cannot read what is already on the topic.
    breaking = changed_codec(tmp_path / "a", "DdlResult", {"name": "reviewer", "type": "string"})
    report = apply_schemas(registry_settings, codec=breaking)
    (refused,) = report.incompatible
    assert refused.subject == results and refused.record_type == "io.mvs.DdlResult"
    assert "field 'reviewer': added without a default" in str(refused.problem)
    assert registry.registered(results) == Codec().schema_json("DdlResult")  # nothing kept

    # The command says the same on stderr and exits 1; a compatible change (a default) registers.
    env = {
        "MVS_SCHEMA_REGISTRY_URL": str(registry_settings.schema_registry_url),
        "MVS_NAMESPACE": registry_settings.namespace,
        "MVS_BOOTSTRAP_SERVERS": registry_settings.bootstrap_servers,
    }
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setattr("workers.kafka.subjects.get_codec", lambda: breaking)
    assert main(["schemas", "apply"]) == 1
    err = capsys.readouterr().err
    assert f"ERROR 1001: {results}: io.mvs.DdlResult is not BACKWARD compatible: field 'reviewer'" in err
    optional = {"name": "reviewer", "type": ["null", "string"], "default": None}
    monkeypatch.setattr(
        "workers.kafka.subjects.get_codec", lambda: changed_codec(tmp_path / "b", "DdlResult", optional)
    )
    assert main(["schemas", "apply"]) == 0
    out = capsys.readouterr().out
    assert f"{results}" in out and "registered" in out


def test_a_registry_away_at_start_loses_no_record(settings: Settings, registry_settings: Settings) -> None:
    apply_topics(settings)
    upstream = urlsplit(str(registry_settings.schema_registry_url))
    port = free_port()  # nothing listens there yet: the registry is away
    url = f"http://127.0.0.1:{port}{upstream.path}"
    waits: list[float] = []
    registry = SchemaRegistry(url, retry=REGISTRY_RETRY.with_sleep(waits.append))
    away = replace(settings, schema_registry_url=url)
    with TypedProducer(away, registry=registry) as producer:
        with pytest.raises(BusError) as refused:
            producer.send("ddl.results", "e0", ddl_result("e0"))
        assert refused.value.retriable and f"schema registry {url} unavailable" in str(refused.value)
        assert len(waits) == REGISTRY_RETRY.max_attempts - 1  # the named policy retried
        assert producer.in_flight() == 0  # nothing half-sent: the caller still holds the record
        proxy = TcpProxy((str(upstream.hostname), int(upstream.port or 80)), port=port).start()
        try:
            producer.send("ddl.results", "e0", ddl_result("e0"))  # the caller's retry
            producer.flush()
        finally:
            proxy.stop()
    assert event_ids(read_to_end(registry_settings, "ddl.results")) == ["e0"]


def test_a_registry_going_away_mid_run_stops_no_producer_and_no_reader_loses_a_record(
    settings: Settings, registry_settings: Settings
) -> None:
    apply_topics(settings)
    upstream = urlsplit(str(registry_settings.schema_registry_url))
    proxy = TcpProxy((str(upstream.hostname), int(upstream.port or 80))).start()
    url = f"http://127.0.0.1:{proxy.port}{upstream.path}"
    through_proxy = replace(settings, schema_registry_url=url)
    fast = REGISTRY_RETRY.with_sleep(lambda _: None)
    with TypedProducer(through_proxy, registry=SchemaRegistry(url, retry=fast)) as producer:
        producer.send("ddl.results", "e0", ddl_result("e0"))
        producer.flush()
        proxy.stop()  # the registry goes away: known ids need no registry
        for i in range(1, 4):
            producer.send("ddl.results", f"e{i}", ddl_result(f"e{i}"))
        producer.flush()
    group = settings.group("readers")
    with TypedConsumer(through_proxy, group_id=group, registry=SchemaRegistry(url, retry=fast)) as consumer:
        consumer.assign("ddl.results", [0], from_beginning=True)
        deadline = time.monotonic() + 30
        with pytest.raises(BusError) as away:
            while time.monotonic() < deadline:
                consumer.poll(0.2)  # the first record's schema id is unknown here: asks the registry
        assert away.value.retriable and "unavailable" in str(away.value)
        proxy = TcpProxy(proxy.upstream, port=proxy.port).start()
        try:
            assert event_ids(poll_all(consumer, 4)) == ["e0", "e1", "e2", "e3"]  # read again, in order
        finally:
            proxy.stop()
    assert read_to_end(settings, "dlq") == []  # never dead-lettered
