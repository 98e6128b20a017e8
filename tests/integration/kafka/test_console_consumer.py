"""Kafka's own console consumer (from the broker's jars) reads every mvs topic through the schema
registry: ``bin/mvs-console-consumer``, the command the README gives operators."""

from __future__ import annotations

import json
import os
import subprocess
from typing import Any

from tests.support.paths import AVRO_FIXTURES as FIXTURES
from workers.config import REPO_ROOT, Settings
from workers.kafka import Message, TypedProducer, apply_topics, read_to_end
from workers.kafka.subjects import apply_schemas
from workers.topics import topics

CONSOLE = REPO_ROOT / "bin" / "mvs-console-consumer"


def sample(record_type: str) -> dict[str, Any]:
    return dict(json.loads((FIXTURES / f"{record_type.rpartition('.')[2]}.json").read_text()))


def test_kafkas_console_consumer_prints_every_topic_with_field_names(registry_settings: Settings) -> None:
    apply_topics(registry_settings)
    apply_schemas(registry_settings)
    written = {name: spec.value_schema for name, spec in topics().items() if spec.value_schema}
    with TypedProducer(registry_settings) as producer:
        for topic, record_type in written.items():
            producer.send(topic, topic, sample(record_type))  # key = the topic: says where a line came from
        producer.flush()
        # A dead letter keeps the record as its topic holds it: the registry's form.
        (ddl,) = read_to_end(registry_settings, "ddl")
        producer.send_dead_letter(Message(**{**ddl.__dict__, "key": "dlq"}), "could not be handled")
        producer.flush()
    expected = {topic: sample(record_type) for topic, record_type in written.items()}
    expected["dlq"] = sample("DdlEvent")
    env = {
        **os.environ,
        "MVS_SCHEMA_REGISTRY_URL": str(registry_settings.schema_registry_url),
        "MVS_BOOTSTRAP_SERVERS": registry_settings.bootstrap_servers,
        "MVS_NAMESPACE": registry_settings.namespace,
    }
    pattern = registry_settings.namespace.replace(".", r"\.") + r"\..*"
    options = ["--include", pattern, "--from-beginning", "--max-messages", str(len(expected))]
    done = subprocess.run(
        [str(CONSOLE), *options, "--timeout-ms", "60000"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    printed: dict[str, Any] = {}
    for line in done.stdout.splitlines():
        key, _, value = line.partition("\t")
        printed[key] = json.loads(value)  # Avro's JSON text: field names and values
    assert printed == expected
