"""Security without a broker: the ACL set per role, inbox topic templates, the embedded users file."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from workers.config import Settings
from workers.embedded.security import DEV_USERS, SecurityConfigError, load_users, secure_properties
from workers.kafka.acls import (
    AclConfigError,
    Grant,
    Roles,
    forwarder_transactional_id,
    grants_table,
    role_grants,
    user_name,
)
from workers.topics import (
    TopicConfigError,
    ddl_topic,
    inbox_topic,
    load_topics,
    template_spec,
    topic_spec,
    topics,
)

SETTINGS = Settings(namespace="prod", worker_id="w1")
ROLES = Roles(
    coordinators=["User:coord"], workers=["User:wk"], ddl_producers=["User:alice"], operators=["User:ops"]
)


def _allowed(principal: str) -> set[tuple[str, str, bool, str]]:
    return {
        (g.resource, g.name, g.prefixed, g.operation)
        for g in role_grants(SETTINGS, ROLES)
        if g.principal == principal
    }


def test_inbox_template_is_not_a_topic_but_names_one_per_user() -> None:
    assert "ddl.inbox" not in topics()  # `mvs topics apply` does not create it
    spec = topic_spec("ddl.inbox.alice")
    assert spec.name == "ddl.inbox.alice" and not spec.template
    assert spec.value_schema == "io.mvs.DdlEvent" and spec.partitions == 1
    assert spec.physical(SETTINGS) == "prod.ddl.inbox.alice"
    assert inbox_topic("bob") == "ddl.inbox.bob"
    for bad in ("ddl.inbox", "ddl.inbox.a.b", "ddl.inbox./etc", "ddl.results.alice"):
        with pytest.raises(TopicConfigError):
            topic_spec(bad)
    with pytest.raises(TopicConfigError):
        template_spec("ddl.inbox").instance("a/b")


def test_clients_publish_to_ddl_or_to_their_inbox() -> None:
    assert ddl_topic(SETTINGS) == "ddl"
    alice = Settings(ddl_inbox=True, kafka_options={"sasl.username": "alice"})
    assert ddl_topic(alice) == "ddl.inbox.alice"
    with pytest.raises(TopicConfigError, match="MVS_KAFKA_SASL_USERNAME"):
        ddl_topic(Settings(ddl_inbox=True))
    assert Settings.from_env({"MVS_DDL_INBOX": "1"}).ddl_inbox and not Settings.from_env({}).ddl_inbox


def test_inbox_principal() -> None:
    from workers.coordinator.inbox import inbox_principal

    assert inbox_principal("ddl.inbox.alice") == "User:alice"
    assert inbox_principal("ddl.inbox.svc-etl_2") == "User:svc-etl_2"


def test_template_declarations_are_loaded_apart(tmp_path: Path) -> None:
    (tmp_path / "a.toml").write_text('name = "a"\npartitions = 1\n')
    (tmp_path / "t.toml").write_text('name = "t"\npartitions = 1\ntemplate = true\n')
    assert set(load_topics(tmp_path)) == {"a"}
    (tmp_path / "t.toml").write_text('name = "t"\npartitions = 1\ntemplate = "yes"\n')
    with pytest.raises(TopicConfigError, match="template must be true or false"):
        load_topics(tmp_path)


def test_coordinator_grants() -> None:
    allowed = _allowed("User:coord")
    for topic in ("prod.ddl", "prod.coordinator", "prod.catalog"):
        assert ("topic", topic, False, "READ") in allowed
    for topic in (
        "prod.catalog",
        "prod.manager",
        "prod.maintainer",
        "prod.ddl.results",
        "prod.dlq",
        "prod.ddl",
    ):
        assert ("topic", topic, False, "WRITE") in allowed
    assert ("topic", "prod.ddl.inbox.", True, "READ") in allowed
    assert ("transactional_id", "prod.coordinator", False, "WRITE") in allowed
    assert ("transactional_id", "prod.ddl-inbox.", True, "WRITE") in allowed
    assert forwarder_transactional_id(SETTINGS) == "prod.ddl-inbox.w1"
    assert {
        ("group", "prod.coordinator", False, "READ"),
        ("group", "prod.ddl-inbox", False, "READ"),
    } <= allowed
    assert ("cluster", "kafka-cluster", False, "IDEMPOTENT_WRITE") in allowed
    # Nothing a worker alone does: it never writes runs or heartbeats, nor reads commands.
    assert ("topic", "prod.runs", False, "WRITE") not in allowed
    assert ("topic", "prod.manager", False, "READ") not in allowed


def test_worker_grants() -> None:
    allowed = _allowed("User:wk")
    assert {("topic", f"prod.{t}", False, "READ") for t in ("manager", "maintainer", "catalog")} <= allowed
    assert {("topic", f"prod.{t}", False, "WRITE") for t in ("coordinator", "runs", "dlq")} <= allowed
    assert {
        ("group", "prod.workers", False, "READ"),
        ("group", "prod.workers.maintainer", False, "READ"),
    } <= allowed
    writes = {name for resource, name, _, op in allowed if resource == "topic" and op == "WRITE"}
    assert writes == {"prod.coordinator", "prod.runs", "prod.dlq"}  # never the catalog, commands or DDL


def test_ddl_producer_writes_only_its_inbox_and_operator_only_reads() -> None:
    alice = _allowed("User:alice")
    writes = {name for resource, name, _, op in alice if resource == "topic" and op == "WRITE"}
    assert writes == {"prod.ddl.inbox.alice"}
    assert ("topic", "prod.ddl.results", False, "READ") in alice
    ops = _allowed("User:ops")
    assert {op for _, _, _, op in ops} == {"READ", "DESCRIBE"}
    read = ("catalog", "runs", "ddl", "ddl.results", "coordinator")
    assert {("topic", f"prod.{t}", False, "READ") for t in read} <= ops
    assert {
        ("group", "prod.coordinator", False, "DESCRIBE"),
        ("group", "prod.workers", False, "DESCRIBE"),
    } <= ops
    assert ("group", "prod.reader.", True, "READ") in ops


def test_principals_are_checked() -> None:
    assert user_name("User:alice") == "alice"
    with pytest.raises(AclConfigError):
        Roles(ddl_producers=["User:al.ice"])  # a dot would make its inbox another template level
    with pytest.raises(AclConfigError):
        Roles(workers=["alice"])
    table = grants_table(
        [Grant("User:a", "topic", "prod.x", True, "READ"), Grant("User:a", "topic", "prod.x", True, "WRITE")]
    )
    assert "| User:a | topic | `prod.x` | prefixed | READ, WRITE |" in table


def test_users_declaration(tmp_path: Path) -> None:
    assert load_users(tmp_path) == dict(DEV_USERS)  # defaults written on first use
    (tmp_path / "users.json").write_text(json.dumps({"broker": "b", "admin": "a", "carol": "c"}))
    assert load_users(tmp_path)["carol"] == "c"
    for bad in ({"broker": "b"}, {"broker": "b", "admin": "a", "x y": "c"}, {"broker": "b", "admin": 'a"'}):
        with pytest.raises(SecurityConfigError):
            load_users(tmp_path / "other", bad)


def test_secure_properties(tmp_path: Path) -> None:
    props = secure_properties(tmp_path, 9093, 9094, {"broker": "b", "admin": "a", "alice": "s"})
    assert props["allow.everyone.if.no.acl.found"] == "false"
    assert props["super.users"] == "User:broker;User:admin"
    assert props["authorizer.class.name"].endswith("StandardAuthorizer")
    assert 'user_alice="s"' in props["listener.name.sasl_ssl.plain.sasl.jaas.config"]
    # Only the broker itself can log in on the controller listener.
    assert "alice" not in props["listener.name.controller.plain.sasl.jaas.config"]
    assert (tmp_path / "tls" / "ca.pem").read_text().startswith("-----BEGIN CERTIFICATE-----")
