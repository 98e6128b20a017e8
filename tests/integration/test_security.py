"""Security end to end: a SASL_SSL broker with the standard authorizer, the minimal ACLs per role,
and DDL through per-principal inboxes — a coordinator, its inbox forwarder and a worker each run as
their own principal (in this process, sharing the session's Spark), all real.

The module starts its own secure broker on free ports (the session broker stays plaintext).
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import pytest

from tests.integration.cluster import wait_until
from tests.integration.sales import BY_REGION, SCHEMA, mv_rows, query_rows, rows
from workers.client import MvsClient
from workers.config import Settings
from workers.coordinator.inbox import InboxForwarder
from workers.coordinator.service import Coordinator
from workers.ddl.parser import parse_statement
from workers.embedded.broker import BrokerError, EmbeddedKafka, free_port
from workers.kafka.acls import Roles, apply_acls
from workers.kafka.admin import apply_topics, group_owners
from workers.kafka.typed import BusError, TypedProducer, read_to_end
from workers.role import LoopRole
from workers.warehouse import latest_version
from workers.worker.manager import Manager

ROLES = Roles(
    coordinators=["User:coordinator"],
    workers=["User:worker"],
    ddl_producers=["User:alice", "User:bob"],
    operators=["User:operator"],
)
# A producer that cannot deliver gives up after this (librdkafka's default is 5 minutes).
FAIL_FAST = {"message.timeout.ms": "5000"}


@dataclass
class Secured:
    broker: EmbeddedKafka
    base: Settings
    _threads: list[tuple[threading.Event, threading.Thread]] = field(default_factory=list)

    def as_user(self, user: str, **options: str) -> Settings:
        return replace(
            self.base,
            kafka_options={**self.broker.client_options(user), **options},
            worker_id=f"{user}-{uuid.uuid4().hex[:6]}",
        )

    def run(self, role: LoopRole) -> None:
        stop = threading.Event()
        thread = threading.Thread(target=role.run, args=(stop,), name=type(role).__name__, daemon=True)
        thread.start()
        self._threads.append((stop, thread))

    def stop(self) -> None:
        for stop, _ in self._threads:
            stop.set()
        for _, thread in self._threads:
            thread.join(60)

    def broker_log(self) -> str:
        return self.broker.log_file.read_text(errors="replace")


def _start_secure_broker(tmp_path_factory: pytest.TempPathFactory, attempts: int = 3) -> EmbeddedKafka:
    """A port from ``free_port`` may be taken (by any process's outgoing connection) before the JVM
    binds it: then the broker exits at start, and a fresh pair of ports is tried."""
    for attempt in range(1, attempts + 1):
        broker = EmbeddedKafka(
            tmp_path_factory.mktemp("secure-kafka"),
            port=free_port(),
            controller_port=free_port(),
            security="sasl_ssl",
        )
        try:
            return broker.start()
        except BrokerError:
            if attempt == attempts:
                raise
    raise AssertionError("unreachable")


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory, spark: Any) -> Iterator[Secured]:
    from workers.demo_tables import create_table

    broker = _start_secure_broker(tmp_path_factory)
    base = Settings(
        bootstrap_servers=broker.bootstrap_servers,
        embedded=False,
        replication_factor=1,  # one broker
        namespace=f"s{uuid.uuid4().hex[:8]}",
        warehouse=str(Path(tmp_path_factory.mktemp("secure-warehouse"))),
        session_timeout_ms=3000,
        ddl_inbox=True,
        owner_rule=True,  # only an MV's creator (or an admin) may change it
        admin_principals=frozenset({"User:admin"}),
    )
    secured = Secured(broker, base)
    try:
        admin = secured.as_user("admin")
        apply_topics(admin)
        apply_acls(admin, ROLES)
        create_table(spark, base, "sales", rows(0, 12), SCHEMA)
        coordinator = secured.as_user("coordinator")
        secured.run(Coordinator(coordinator))
        secured.run(InboxForwarder(coordinator, discover_every_s=1.0))
        secured.run(Manager(secured.as_user("worker")))
        yield secured
    finally:
        secured.stop()
        broker.stop()


def _refreshed(client: MvsClient, settings: Settings, task_id: str) -> bool:
    task = client.tasks().get(task_id)
    return bool(task and task["checkpoint"].get("sales") == latest_version(settings, "sales"))


def test_alice_creates_through_her_inbox_and_history_names_her_not_her_claim(
    secured: Secured, spark: Any
) -> None:
    # Her client claims to be the admin; the inbox she can write says who she is.
    alice = MvsClient(secured.as_user("alice"), issued_by="User:admin")
    operator = MvsClient(secured.as_user("operator"))
    try:
        result = alice.execute(
            f"CREATE MATERIALIZED VIEW by_region REFRESH COMPLETE EVERY 1 HOUR AS {BY_REGION}", timeout_s=90
        )
        assert result is not None and result["accepted"], result
        wait_until(
            lambda: _refreshed(operator, secured.base, "mv:by_region"), what="refresh by the worker principal"
        )
        assert mv_rows(spark, secured.base, "by_region") == query_rows(spark, secured.base, BY_REGION)
        history = operator.ddl_history("mv:by_region")
        assert [(e["action"], e["issued_by"]) for e in history] == [("CREATE_MV", "User:alice")]
        assert history[0]["answer"]["accepted"]
        # What she sent is still in her inbox, with the claim the forwarder overrode.
        sent = [m.value for m in read_to_end(secured.as_user("admin"), "ddl.inbox.alice") if m.value]
        assert [e["issued_by"] for e in sent if e["event_id"] == result["event_id"]] == ["User:admin"]
        assert [r["state"] for r in operator.history("mv:by_region")][-1] == "COMPLETED"
    finally:
        alice.close()
        operator.close()


def test_each_producer_is_named_by_its_own_inbox(secured: Secured) -> None:
    bob = MvsClient(secured.as_user("bob"), issued_by="User:alice")
    try:
        result = bob.execute("DROP MATERIALIZED VIEW no_such_view", timeout_s=90)
        assert result is not None and result["error"]["code"] == 1003
    finally:
        bob.close()
    entries = MvsClient(secured.as_user("operator")).ddl_history()
    assert [e["issued_by"] for e in entries if e["name"] == "no_such_view"] == ["User:bob"]


def test_only_the_creator_may_change_her_mv_whatever_the_others_claim(secured: Secured) -> None:
    alice = MvsClient(secured.as_user("alice"))
    bob = MvsClient(secured.as_user("bob"), issued_by="User:alice")  # his claim is overridden
    try:
        created = alice.execute(
            f"CREATE MATERIALIZED VIEW alices REFRESH COMPLETE ON DEMAND AS {BY_REGION}", timeout_s=90
        )
        assert created is not None and created["accepted"], created
        for statement in ("DROP MATERIALIZED VIEW alices", "ALTER MATERIALIZED VIEW alices PAUSE"):
            refused = bob.execute(statement, timeout_s=90)
            assert refused is not None and not refused["accepted"], (statement, refused)
            assert refused["error"]["code"] == 1001 and "permission denied" in refused["error"]["message"]
        operator = MvsClient(secured.as_user("operator"))
        assert "mv:alices" in operator.tasks()
        operator.close()
        dropped = alice.execute("DROP MATERIALIZED VIEW alices", timeout_s=90)
        assert dropped is not None and dropped["accepted"], dropped
    finally:
        alice.close()
        bob.close()


def _refused(
    secured: Secured, settings: Settings, topic: str, errors: Any = BusError, match: str | None = None
) -> None:
    """One DROP sent as ``settings`` to ``topic`` fails to deliver, and nothing of it landed there."""
    event = parse_statement("DROP MATERIALIZED VIEW by_region", issued_by="User:alice")
    producer = TypedProducer(replace(settings, kafka_options={**settings.kafka_options, **FAIL_FAST}))
    try:
        with pytest.raises(errors, match=match):
            producer.send(topic, event["name"], event)
            producer.flush()
    finally:
        producer.close(timeout_s=0)
    landed = read_to_end(secured.as_user("admin"), topic)
    assert event["event_id"] not in {m.value["event_id"] for m in landed if m.value}


@pytest.mark.parametrize(
    ("user", "topic"),
    [("bob", "ddl.inbox.alice"), ("bob", "ddl"), ("alice", "ddl"), ("worker", "ddl")],
)
def test_only_the_inbox_owner_and_the_coordinator_may_write_ddl(
    secured: Secured, user: str, topic: str
) -> None:
    _refused(secured, secured.as_user(user), topic, match="TOPIC_AUTHORIZATION_FAILED")


def test_read_only_operator_cannot_produce_at_all(secured: Secured) -> None:
    # No WRITE anywhere and no IDEMPOTENT_WRITE: the broker refuses the idempotent producer an id,
    # which librdkafka makes a fatal producer error (a BusError from flush).
    _refused(secured, secured.as_user("operator"), "ddl")


def test_read_only_operator_sees_catalog_runs_and_groups(secured: Secured) -> None:
    operator_settings = secured.as_user("operator")
    operator = MvsClient(operator_settings)
    assert isinstance(operator.tasks(), dict)
    assert isinstance(operator.history(), list)
    owners = wait_until(
        lambda: group_owners(operator_settings, operator_settings.group("coordinator")),
        what="coordinator group",
    )
    assert len(owners) == 1  # the group was described: one active coordinator holds the DDL partition


def _use_in_cli(monkeypatch: pytest.MonkeyPatch, settings: Settings) -> None:
    """The environment that makes ``Settings.from_env()`` (what ``mvs`` reads) equal ``settings``."""
    env = {
        "MVS_BOOTSTRAP_SERVERS": settings.bootstrap_servers,
        "MVS_NAMESPACE": settings.namespace,
        "MVS_WAREHOUSE": settings.warehouse,
        **{"MVS_KAFKA_" + k.upper().replace(".", "_"): v for k, v in settings.kafka_options.items()},
    }
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    assert Settings.from_env().kafka_options == settings.kafka_options


def test_mvs_status_and_history_work_with_read_only_rights(
    secured: Secured, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from workers.cli import main

    operator = secured.as_user("operator")
    _use_in_cli(monkeypatch, operator)
    wait_until(
        lambda: group_owners(operator, operator.group("coordinator")), what="a settled coordinator group"
    )
    assert main(["status"]) == 0
    assert main(["history"]) == 0
    out = capsys.readouterr().out
    assert "coordinator" in out  # the live roles part of mvs status: the groups were described


def test_a_ddl_producer_cannot_grant_herself_more(
    secured: Secured, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from workers.cli import main

    _use_in_cli(monkeypatch, secured.as_user("alice"))
    assert main(["acls", "apply", "--ddl-producer", "User:alice", "--coordinator", "User:alice"]) == 1
    assert "ERROR 3001" in capsys.readouterr().err
    _refused(secured, secured.as_user("alice"), "ddl", match="TOPIC_AUTHORIZATION_FAILED")


def test_wrong_password_is_refused_by_the_broker(secured: Secured) -> None:
    _refused(secured, secured.as_user("alice", **{"sasl.password": "not-hers"}), "ddl.inbox.alice")
    wait_until(lambda: "Invalid username or password" in secured.broker_log(), what="the broker's refusal")


def test_plaintext_client_cannot_talk_to_the_tls_listener(secured: Secured) -> None:
    _refused(secured, secured.base, "ddl")
    wait_until(lambda: "SSL handshake failed" in secured.broker_log(), what="the broker's refusal")
