"""``mvs acls apply``: the minimal Kafka ACLs of each mvs role, and each DDL producer's inbox.

Which principal may do what is a pure function of the namespace and the principals
(``role_grants``), so it is tested without a broker and printed as the README's table;
``apply_acls`` creates the bindings (creating an ACL that exists is a no-op in Kafka) and the
inbox topics. Running it is an admin task, like ``mvs topics apply`` (both need a super user or
Alter/Create on the cluster).

Why each grant (read from the code, not guessed):
- every role restores or reads topics without a group through throwaway group ids
  ``<ns>.reader.<uuid>`` (``TypedConsumer(group_id=None)``): READ on that group prefix;
- every consumer dead-letters undecodable records to ``dlq``: WRITE on it;
- producers are idempotent (``enable.idempotence``): IDEMPOTENT_WRITE on the cluster (needed by
  brokers before 3.0; newer ones accept WRITE on any topic);
- the coordinator commits DDL offsets in its transaction (``transactional.id = <ns>.coordinator``,
  group ``<ns>.coordinator``); its inbox forwarder likewise (``<ns>.ddl-inbox.<worker id>``,
  group ``<ns>.ddl-inbox``);
- a worker's manager and maintainer consumers commit in groups ``<ns>.workers`` and
  ``<ns>.workers.maintainer``;
- ``mvs status`` describes the groups ``<ns>.coordinator`` and ``<ns>.workers``.
"""

from __future__ import annotations

import functools
import logging
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

# confluent_kafka.admin re-exports these without __all__, which mypy --strict rejects.
from confluent_kafka.admin._acl import AclBinding, AclOperation, AclPermissionType
from confluent_kafka.admin._resource import ResourcePatternType, ResourceType
from confluent_kafka.cimpl import NewTopic

from workers.config import Settings
from workers.kafka.admin import _await_ready, _create, _metadata, _result, _shared_admin
from workers.kafka.clients import lazy_admin
from workers.kafka.errors import BusError
from workers.kafka.retry import ADMIN_RETRY, METADATA_RETRY, RetryPolicy
from workers.topics import (
    INBOX_TEMPLATE,
    TopicConfigError,
    inbox_topic,
    replication_factor,
    template_spec,
    topic_config,
)

log = logging.getLogger(__name__)

FORWARDER_ROLE = "ddl-inbox"  # group <ns>.ddl-inbox, transactional ids <ns>.ddl-inbox.<worker id>
CLUSTER = "kafka-cluster"
_PRINCIPAL = re.compile(r"^User:([A-Za-z0-9_-]{1,100})$")


class AclConfigError(ValueError):
    pass


@dataclass(frozen=True, order=True)
class Grant:
    """One ALLOW binding: ``principal`` may ``operation`` on ``resource`` ``name`` (literal or prefix)."""

    principal: str
    resource: str  # topic | group | transactional_id | cluster
    name: str  # physical name, or prefix when ``prefixed``
    prefixed: bool
    operation: str  # READ, WRITE, DESCRIBE, IDEMPOTENT_WRITE

    def binding(self) -> AclBinding:
        restype = {
            "topic": ResourceType.TOPIC,
            "group": ResourceType.GROUP,
            "transactional_id": ResourceType.TRANSACTIONAL_ID,
            "cluster": ResourceType.BROKER,
        }[self.resource]
        pattern = ResourcePatternType.PREFIXED if self.prefixed else ResourcePatternType.LITERAL
        return AclBinding(
            restype,
            self.name,
            pattern,
            self.principal,
            "*",
            AclOperation[self.operation],
            AclPermissionType.ALLOW,
        )


@dataclass(frozen=True)
class Roles:
    """Principals (``User:<name>``) per mvs role; a role may have several or none."""

    coordinators: Sequence[str] = ()
    workers: Sequence[str] = ()
    ddl_producers: Sequence[str] = ()
    operators: Sequence[str] = ()

    def __post_init__(self) -> None:
        for principal in (*self.coordinators, *self.workers, *self.ddl_producers, *self.operators):
            if not principal.startswith("User:") or len(principal) <= len("User:"):
                raise AclConfigError(f"principal {principal!r} must look like User:<name>")
        for principal in self.ddl_producers:
            user_name(principal)  # its name becomes a topic name


def user_name(principal: str) -> str:
    """``User:alice`` → ``alice``, for principals that name an inbox topic."""
    match = _PRINCIPAL.match(principal)
    if match is None:
        raise AclConfigError(
            f"DDL producer {principal!r}: the user name names its inbox topic, so it may hold only "
            "letters, digits, '_' and '-'"
        )
    return match.group(1)


def inbox_prefix(settings: Settings) -> str:
    """Physical prefix of every inbox topic: ``<ns>.ddl.inbox.``."""
    return settings.topic(INBOX_TEMPLATE) + "."


def forwarder_group(settings: Settings) -> str:
    return settings.group(FORWARDER_ROLE)


def forwarder_transactional_id(settings: Settings) -> str:
    # One per process: several coordinators share the inboxes and must not fence each other; a
    # zombie is fenced by the group generation sent with its offsets (KIP-447).
    return f"{settings.group(FORWARDER_ROLE)}.{settings.worker_id}"


def _grants(
    principal: str, resource: str, name: str, operations: Iterable[str], *, prefixed: bool = False
) -> list[Grant]:
    return [Grant(principal, resource, name, prefixed, op) for op in operations]


def _reader(settings: Settings, principal: str) -> list[Grant]:
    """Reading without a group (restore, results, tail): throwaway group ids."""
    return _grants(principal, "group", settings.group("reader."), ["READ"], prefixed=True)


def _topics(
    settings: Settings, principal: str, logical: Iterable[str], operations: Iterable[str]
) -> list[Grant]:
    ops = list(operations)
    return [g for name in logical for g in _grants(principal, "topic", settings.topic(name), ops)]


def role_grants(settings: Settings, roles: Roles) -> list[Grant]:
    """Every grant of every role, sorted; the minimal set mvs runs with."""
    out: list[Grant] = []
    for p in roles.coordinators:
        out += _topics(settings, p, ["ddl", "coordinator", "catalog"], ["READ"])
        # coordinator: its own heartbeat (workers.coordinator.health), beside the workers'.
        out += _topics(
            settings,
            p,
            ["catalog", "manager", "maintainer", "ddl.results", "dlq", "freshness", "coordinator"],
            ["WRITE"],
        )
        out += _grants(p, "group", settings.group("coordinator"), ["READ"])
        out += _grants(p, "transactional_id", settings.group("coordinator"), ["WRITE"])
        out += _grants(p, "cluster", CLUSTER, ["IDEMPOTENT_WRITE"])
        out += _reader(settings, p)
        # The inbox forwarder: every inbox in, ddl out, in its own group and transactions.
        out += _grants(p, "topic", inbox_prefix(settings), ["READ"], prefixed=True)
        out += _topics(settings, p, ["ddl"], ["WRITE"])
        out += _grants(p, "group", forwarder_group(settings), ["READ"])
        out += _grants(p, "transactional_id", forwarder_group(settings) + ".", ["WRITE"], prefixed=True)
    for p in roles.workers:
        out += _topics(settings, p, ["manager", "maintainer", "catalog"], ["READ"])
        out += _topics(settings, p, ["coordinator", "runs", "dlq"], ["WRITE"])
        out += _grants(p, "group", settings.group("workers"), ["READ"])
        out += _grants(p, "group", settings.group("workers.maintainer"), ["READ"])
        # The history tables' sink (workers.worker.history_sink): runs and catalog in its own group.
        out += _topics(settings, p, ["runs"], ["READ"])
        out += _grants(p, "group", settings.group("history"), ["READ"])
        out += _grants(p, "cluster", CLUSTER, ["IDEMPOTENT_WRITE"])
        out += _reader(settings, p)
    for p in roles.ddl_producers:
        out += _grants(p, "topic", settings.topic(inbox_topic(user_name(p))), ["WRITE"])
        out += _topics(settings, p, ["ddl.results"], ["READ"])
        out += _grants(p, "cluster", CLUSTER, ["IDEMPOTENT_WRITE"])
        out += _reader(settings, p)
    for p in roles.operators:
        # coordinator: the workers' heartbeats, for the last loop error `mvs status` shows.
        out += _topics(
            settings, p, ["catalog", "runs", "ddl", "ddl.results", "coordinator", "freshness"], ["READ"]
        )
        out += _grants(p, "group", settings.group("coordinator"), ["DESCRIBE"])
        out += _grants(p, "group", settings.group("workers"), ["DESCRIBE"])
        out += _reader(settings, p)
    return sorted(set(out))


def grants_table(grants: Iterable[Grant]) -> str:
    """``principal | resource | pattern | operations``: one row per principal and resource."""
    rows: dict[tuple[str, str, str, str], list[str]] = {}
    for g in grants:
        rows.setdefault(
            (g.principal, g.resource, g.name, "prefixed" if g.prefixed else "literal"), []
        ).append(g.operation)
    lines = ["| principal | resource | name | pattern | operations |", "|---|---|---|---|---|"]
    lines += [f"| {p} | {r} | `{n}` | {k} | {', '.join(sorted(ops))} |" for (p, r, n, k), ops in rows.items()]
    return "\n".join(lines)


def list_inboxes(settings: Settings, *, retry: RetryPolicy = ADMIN_RETRY) -> list[str]:
    """Logical names of the inbox topics on the cluster that this principal may see."""
    prefix = inbox_prefix(settings)
    existing = retry.call(functools.partial(_metadata, _shared_admin(settings)))
    found = []
    for name in existing:
        if name.startswith(prefix):
            try:
                found.append(inbox_topic(name.removeprefix(prefix)))
            except TopicConfigError:
                log.warning("ignoring %s: not an inbox name mvs creates", name)
    return sorted(found)


def create_inboxes(
    settings: Settings,
    producers: Sequence[str],
    *,
    retry: RetryPolicy = ADMIN_RETRY,
    wait: RetryPolicy = METADATA_RETRY,
) -> list[str]:
    """Create the missing inbox topic of each DDL producer; returns the logical names created."""
    admin = lazy_admin(settings).get()
    spec = template_spec(INBOX_TEMPLATE)
    existing = retry.call(functools.partial(_metadata, admin))
    created = []
    for principal in producers:
        inbox = spec.instance(user_name(principal))
        physical = inbox.physical(settings)
        if physical in existing:
            continue
        rf, config = replication_factor(settings, inbox), topic_config(settings, inbox)
        new = NewTopic(physical, inbox.partitions, rf, config=config)
        if retry.call(functools.partial(_create, admin, new)):
            created.append(inbox.name)
    if created:
        expected = {settings.topic(name): spec.partitions for name in created}
        wait.call(functools.partial(_await_ready, admin, expected))
    return created


def apply_acls(settings: Settings, roles: Roles, *, retry: RetryPolicy = ADMIN_RETRY) -> list[Grant]:
    """Create the inboxes and every grant of ``roles_grants``; returns the grants."""
    create_inboxes(settings, roles.ddl_producers, retry=retry)
    grants = role_grants(settings, roles)
    if not grants:
        return []
    admin = lazy_admin(settings).get()

    def create() -> None:
        futures = admin.create_acls([g.binding() for g in grants], request_timeout=15.0)
        for binding, future in futures.items():
            _result(f"create ACL {binding}", future)

    try:
        retry.call(create)
    except BusError as exc:
        raise BusError(f"could not create ACLs (is this principal an admin?): {exc}") from exc
    return grants
