"""Topic declarations, client configs, key hashing, retry policies (no broker)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from workers.codec import get_codec
from workers.config import Settings
from workers.kafka.clients import consumer_config, producer_config
from workers.kafka.errors import BusError, is_transient
from workers.kafka.messages import murmur2, partition_for
from workers.kafka.retry import kafka_policy
from workers.topics import (
    OWNERSHIP_TOPICS,
    TopicConfigError,
    load_topics,
    logical_name,
    replication_factor,
    topic_config,
    topic_spec,
    topics,
)

EXPECTED = {
    "ddl": (1, "io.mvs.DdlEvent", "delete"),
    "ddl.results": (1, "io.mvs.DdlResult", "delete"),
    "catalog": (12, "io.mvs.TaskRecord", "compact"),
    "manager": (12, "io.mvs.ManagerCommand", "delete"),
    "maintainer": (12, "io.mvs.MaintainerCommand", "delete"),
    "coordinator": (1, "io.mvs.Heartbeat", "delete"),
    "runs": (3, "io.mvs.RunRecord", "delete"),
    "dlq": (1, None, "delete"),
    "freshness": (3, "io.mvs.FreshnessEvent", "delete"),
}


def test_declared_topics() -> None:
    declared = topics()
    assert set(declared) == set(EXPECTED)
    for name, (partitions, schema, policy) in EXPECTED.items():
        spec = declared[name]
        assert (spec.partitions, spec.value_schema, spec.config["cleanup.policy"]) == (
            partitions,
            schema,
            policy,
        )
        assert spec.replication_factor == 3 and spec.config["min.insync.replicas"] == "2" and spec.purpose
    assert len({declared[n].partitions for n in OWNERSHIP_TOPICS}) == 1
    assert "retention.bytes" in declared["runs"].config
    assert float(declared["catalog"].config["min.cleanable.dirty.ratio"]) <= 0.1


def test_value_schemas_are_known_to_the_codec() -> None:
    codec = get_codec()
    for spec in topics().values():
        if spec.value_schema:
            assert spec.value_schema in codec.record_names()


def test_physical_and_logical_names() -> None:
    settings = Settings(namespace="prod")
    assert topic_spec("ddl.results").physical(settings) == "prod.ddl.results"
    assert logical_name(settings, "prod.ddl.results") == "ddl.results"
    with pytest.raises(TopicConfigError):
        logical_name(settings, "other.ddl")
    with pytest.raises(TopicConfigError, match="no topic 'nope'"):
        topic_spec("nope")


def test_bad_declarations(tmp_path: Path) -> None:
    (tmp_path / "a.toml").write_text('name = "b"\npartitions = 1\n')
    with pytest.raises(TopicConfigError, match="name must be 'a'"):
        load_topics(tmp_path)
    (tmp_path / "a.toml").write_text('name = "a"\npartitions = 0\n')
    with pytest.raises(TopicConfigError, match="partitions must be a positive integer"):
        load_topics(tmp_path)
    (tmp_path / "a.toml").write_text('name = "a"\npartitions = 2\n[config]\n"retention.ms" = 5\n')
    assert load_topics(tmp_path)["a"].config == {"retention.ms": "5"}
    (tmp_path / "catalog.toml").write_text('name = "catalog"\npartitions = 3\n')
    (tmp_path / "manager.toml").write_text('name = "manager"\npartitions = 4\n')
    with pytest.raises(TopicConfigError, match="same partition count"):
        load_topics(tmp_path)


def test_replication_factor_and_min_insync_replicas_follow_the_deployment() -> None:
    spec = topic_spec("catalog")
    cluster = Settings(bootstrap_servers="k1:9092,k2:9092,k3:9092", embedded=False)
    assert replication_factor(cluster, spec) == 3
    assert topic_config(cluster, spec)["min.insync.replicas"] == "2"
    # The embedded broker is one node; MVS_REPLICATION_FACTOR overrides every declaration.
    assert replication_factor(Settings(), spec) == 1
    assert topic_config(Settings(), spec)["min.insync.replicas"] == "1"
    single = Settings.from_env({"MVS_BOOTSTRAP_SERVERS": "k:9092", "MVS_REPLICATION_FACTOR": "1"})
    assert replication_factor(single, spec) == 1 and topic_config(single, spec)["min.insync.replicas"] == "1"
    five = replace(cluster, replication_factor=5)
    assert replication_factor(five, spec) == 5 and topic_config(five, spec)["min.insync.replicas"] == "2"
    two = replace(cluster, replication_factor=2)
    assert topic_config(two, spec)["min.insync.replicas"] == "1"


def test_client_configs() -> None:
    settings = Settings(kafka_options={"security.protocol": "SSL"})
    producer = producer_config(settings, transactional_id="tx")
    assert producer["partitioner"] == "murmur2_random"
    assert (producer["enable.idempotence"], producer["acks"], producer["transactional.id"]) == (
        "true",
        "all",
        "tx",
    )
    assert producer["security.protocol"] == "SSL"
    classic = consumer_config(settings, "g")
    assert classic["isolation.level"] == "read_committed" and classic["enable.auto.commit"] == "false"
    assert classic["partition.assignment.strategy"] == "cooperative-sticky"
    assert classic["group.protocol"] == "classic"
    kip848 = consumer_config(replace(settings, group_protocol="consumer"), "g")
    assert kip848["group.protocol"] == "consumer"
    assert not {"partition.assignment.strategy", "session.timeout.ms", "heartbeat.interval.ms"} & set(kip848)


@pytest.mark.parametrize(
    ("key", "java"),
    [
        # Kafka's UtilsTest.testMurmur2 (signed Java ints).
        ("21", -973932308),
        ("foobar", -790332482),
        ("a-little-bit-long-string", -985981536),
        ("a-little-bit-longer-string", -1486304829),
        ("lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8", -58897971),
        ("abc", 479470107),
    ],
)
def test_murmur2_matches_java(key: str, java: int) -> None:
    assert murmur2(key.encode()) == java & 0xFFFFFFFF
    assert partition_for(key, 12) == (java & 0x7FFFFFFF) % 12


def test_retry_policy_retries_transient_errors_only() -> None:
    sleeps: list[float] = []
    policy = kafka_policy("test", attempts=4, initial_s=0.1, max_s=0.3).with_sleep(sleeps.append)
    calls = iter([BusError("down", retriable=True), TimeoutError("slow"), None])

    def flaky() -> str:
        error = next(calls)
        if error is not None:
            raise error
        return "ok"

    assert policy.call(flaky) == "ok"
    assert sleeps == [0.1, 0.2]
    with pytest.raises(BusError, match="broken"):
        policy.call(lambda: (_ for _ in ()).throw(BusError("broken")))
    sleeps.clear()
    with pytest.raises(BusError, match="still down"):
        policy.call(lambda: (_ for _ in ()).throw(BusError("still down", retriable=True)))
    assert sleeps == [0.1, 0.2, 0.3]


def test_transient_classification() -> None:
    assert is_transient(BusError("x", retriable=True))
    assert not is_transient(BusError("x", retriable=True, abort_required=True))
    assert not is_transient(BusError("x", retriable=True, fatal=True))
    assert not is_transient(ValueError("x"))
