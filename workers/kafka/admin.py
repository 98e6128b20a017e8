"""``mvs topics apply``: create the declared topics that are missing and report drift.

Drift (a partition count, replication factor or declared config that differs on the broker)
is reported, never fixed: changing a partition count would move keys between partitions,
i.e. tasks between owners and catalog partitions.
"""

from __future__ import annotations

import functools
import logging
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from confluent_kafka import IsolationLevel, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient

# confluent_kafka.admin re-exports these without __all__, which mypy --strict rejects.
from confluent_kafka.admin._config import AlterConfigOpType, ConfigEntry, ConfigResource
from confluent_kafka.admin._listoffsets import OffsetSpec
from confluent_kafka.admin._resource import ResourceType
from confluent_kafka.cimpl import NewTopic

from workers.config import Settings
from workers.kafka.clients import heartbeat_interval_ms, lazy_admin
from workers.kafka.errors import BusError
from workers.kafka.retry import ADMIN_RETRY, METADATA_RETRY, RetryPolicy
from workers.topics import TopicSpec, replication_factor, topic_config, topics

log = logging.getLogger(__name__)

REQUEST_TIMEOUT_S = 15.0


@dataclass(frozen=True)
class Drift:
    topic: str  # logical
    item: str  # "partitions", "replication_factor" or a topic config name
    declared: str
    actual: str | None

    def __str__(self) -> str:
        return f"{self.topic}: {self.item} is {self.actual} on the broker but declared {self.declared}"


@dataclass(frozen=True)
class TopicsReport:
    created: tuple[str, ...] = ()
    drift: tuple[Drift, ...] = ()
    unchanged: tuple[str, ...] = ()

    @property
    def nothing_to_do(self) -> bool:
        return not self.created and not self.drift

    def lines(self) -> list[str]:
        out = [f"created {name}" for name in self.created]
        out += [f"drift   {d}" for d in self.drift]
        return out or [f"nothing to do ({len(self.unchanged)} topics as declared)"]

    def __str__(self) -> str:
        return "\n".join(self.lines())


@dataclass(frozen=True)
class TopicStatus:
    topic: str
    physical: str
    exists: bool
    partitions: int | None
    declared_partitions: int
    # partition -> (earliest, latest committed) offsets
    offsets: Mapping[int, tuple[int, int]] = field(default_factory=dict)
    drift: tuple[Drift, ...] = ()

    @property
    def records(self) -> int:
        """Offsets spanned (records still retained, counting compacted-away ones and markers)."""
        return sum(high - low for low, high in self.offsets.values())


def _result(what: str, future: Any, timeout_s: float = REQUEST_TIMEOUT_S) -> Any:
    try:
        return future.result(timeout=timeout_s)
    except KafkaException as exc:
        raise BusError.from_kafka(what, exc) from exc


def _metadata(admin: AdminClient) -> dict[str, Any]:
    try:
        return dict(admin.list_topics(timeout=REQUEST_TIMEOUT_S).topics)
    except KafkaException as exc:
        raise BusError.from_kafka("list topics", exc) from exc


def _create(admin: AdminClient, topic: NewTopic) -> bool:
    """True if this call created it, False if it already existed (someone else won a race)."""
    future = admin.create_topics(
        [topic], operation_timeout=REQUEST_TIMEOUT_S, request_timeout=REQUEST_TIMEOUT_S
    )
    try:
        _result(f"create {topic.topic}", future[topic.topic])
    except BusError as exc:
        if exc.code == "TOPIC_ALREADY_EXISTS":
            return False
        if exc.code == "INVALID_REPLICATION_FACTOR":  # topics/ declares 3: a smaller cluster must say so
            raise BusError(
                f"{exc} (topics/ declares {topic.replication_factor} replicas: on fewer brokers set "
                "MVS_REPLICATION_FACTOR)",
                code=exc.code,
                misconfigured=True,
            ) from exc
        raise
    return True


def _await_ready(admin: AdminClient, expected: Mapping[str, int]) -> None:
    """Raise a retriable error until every topic has all its partitions with a leader."""
    metadata = _metadata(admin)
    for name, partitions in expected.items():
        topic = metadata.get(name)
        if topic is None or topic.error is not None or len(topic.partitions) != partitions:
            raise BusError(f"topic {name} not in the metadata yet", retriable=True)
        if any(p.leader < 0 for p in topic.partitions.values()):
            raise BusError(f"topic {name} not ready yet", retriable=True)


def _drift(spec: TopicSpec, settings: Settings, metadata: Any, configs: Mapping[str, Any]) -> list[Drift]:
    found = []
    if len(metadata.partitions) != spec.partitions:
        found.append(Drift(spec.name, "partitions", str(spec.partitions), str(len(metadata.partitions))))
    replicas = {len(p.replicas) for p in metadata.partitions.values()}
    declared_rf = replication_factor(settings, spec)
    if replicas and replicas != {declared_rf}:
        actual = ",".join(map(str, sorted(replicas)))
        found.append(Drift(spec.name, "replication_factor", str(declared_rf), actual))
    for key, value in topic_config(settings, spec).items():
        entry = configs.get(key)
        value_now = None if entry is None else entry.value
        if value_now != value:
            found.append(Drift(spec.name, key, value, value_now))
    return found


def _configs(admin: AdminClient, physical: str) -> dict[str, Any]:
    resource = ConfigResource(ResourceType.TOPIC, physical)
    futures = admin.describe_configs([resource], request_timeout=REQUEST_TIMEOUT_S)
    (future,) = futures.values()
    return dict(_result(f"describe configs of {physical}", future))


def apply_topics(
    settings: Settings,
    *,
    retry: RetryPolicy = ADMIN_RETRY,
    wait: RetryPolicy = METADATA_RETRY,
    admin: AdminClient | None = None,
) -> TopicsReport:
    """Create missing topics (and wait until they have leaders); report drift of the others."""
    admin = admin or lazy_admin(settings).get()
    specs = topics()
    existing = retry.call(functools.partial(_metadata, admin))
    created, drift, unchanged = [], [], []
    for spec in specs.values():
        physical = settings.topic(spec.name)
        if physical not in existing:
            rf = replication_factor(settings, spec)
            new = NewTopic(physical, spec.partitions, rf, config=topic_config(settings, spec))
            if retry.call(functools.partial(_create, admin, new)):
                created.append(spec.name)
                continue
            existing = retry.call(functools.partial(_metadata, admin))  # lost a creation race: compare
        configs = retry.call(functools.partial(_configs, admin, physical))
        found = _drift(spec, settings, existing[physical], configs)
        drift.extend(found)
        if not found:
            unchanged.append(spec.name)
    if created:
        expected = {settings.topic(name): specs[name].partitions for name in created}
        wait.call(functools.partial(_await_ready, admin, expected))
    return TopicsReport(tuple(created), tuple(drift), tuple(unchanged))


def partition_leader(settings: Settings, logical: str, partition: int) -> int:
    """Broker id leading ``partition`` of topic ``logical`` (-1 while it has no leader)."""
    metadata = ADMIN_RETRY.call(functools.partial(_metadata, lazy_admin(settings).get()))
    return int(metadata[settings.topic(logical)].partitions[partition].leader)


def under_replicated(settings: Settings, *, retry: RetryPolicy = ADMIN_RETRY) -> dict[str, list[int]]:
    """Partitions of mvs's topics whose in-sync replicas are fewer than their replicas (a broker down,
    or back and still catching up), by logical topic; {} when every replica is in sync."""
    admin = lazy_admin(settings).get()
    metadata = retry.call(functools.partial(_metadata, admin))
    lagging: dict[str, list[int]] = {}
    for spec in topics().values():
        meta = metadata.get(settings.topic(spec.name))
        for number, partition in sorted(meta.partitions.items()) if meta is not None else []:
            if len(partition.isrs) < len(partition.replicas):
                lagging.setdefault(spec.name, []).append(number)
    return lagging


def _offsets(admin: AdminClient, partitions: list[TopicPartition], spec: Any) -> dict[int, int]:
    if not partitions:
        return {}
    futures = admin.list_offsets(
        {tp: spec for tp in partitions},
        isolation_level=IsolationLevel.READ_COMMITTED,
        request_timeout=REQUEST_TIMEOUT_S,
    )
    return {tp.partition: _result(f"offsets of {tp.topic}", f).offset for tp, f in futures.items()}


def describe(settings: Settings, *, retry: RetryPolicy = ADMIN_RETRY) -> list[TopicStatus]:
    """Per declared topic: whether it exists, its partitions, offsets and drift (``mvs status``)."""
    admin = lazy_admin(settings).get()
    metadata = retry.call(functools.partial(_metadata, admin))
    out = []
    for spec in topics().values():
        physical = settings.topic(spec.name)
        meta = metadata.get(physical)
        if meta is None:
            out.append(TopicStatus(spec.name, physical, False, None, spec.partitions))
            continue
        tps = [TopicPartition(physical, p) for p in sorted(meta.partitions)]
        low = retry.call(functools.partial(_offsets, admin, tps, OffsetSpec.earliest()))  # type: ignore[no-untyped-call]
        high = retry.call(functools.partial(_offsets, admin, tps, OffsetSpec.latest()))  # type: ignore[no-untyped-call]
        configs = retry.call(functools.partial(_configs, admin, physical))
        out.append(
            TopicStatus(
                spec.name,
                physical,
                True,
                len(meta.partitions),
                spec.partitions,
                {p: (low[p], high[p]) for p in sorted(meta.partitions)},
                tuple(_drift(spec, settings, meta, configs)),
            )
        )
    return out


def configure_group(settings: Settings, group_id: str, *, retry: RetryPolicy = ADMIN_RETRY) -> None:
    """With ``group.protocol=consumer`` the session timeout is a broker-side group config:
    set it (and the heartbeat interval) from ``Settings`` so failover is as fast as with the
    classic protocol. A no-op for the classic protocol, whose clients set it themselves, and with
    ``session_timeout_ms=0`` (the broker's group defaults stand).

    A broker may refuse values below its ``group.consumer.min.*`` settings: then its defaults stand
    (failover takes as long as they say) and a warning says so — the role still starts."""
    if settings.group_protocol != "consumer" or settings.session_timeout_ms <= 0:
        return
    session = settings.session_timeout_ms
    admin = lazy_admin(settings).get()
    # One request per setting: a refused heartbeat interval must not cost the session timeout.
    for name, value in (
        ("consumer.session.timeout.ms", session),
        ("consumer.heartbeat.interval.ms", heartbeat_interval_ms(session, floor_ms=500)),
    ):
        entry = ConfigEntry(name, str(value), incremental_operation=AlterConfigOpType.SET)
        resource = ConfigResource(ResourceType.GROUP, group_id, incremental_configs=[entry])

        def alter(resource: ConfigResource = resource) -> None:
            (future,) = admin.incremental_alter_configs(
                [resource], request_timeout=REQUEST_TIMEOUT_S
            ).values()
            _result(f"configure group {group_id}", future)

        try:
            retry.call(alter)
        except BusError as exc:
            log.warning("group %s keeps the broker's %s: %s", group_id, name, exc)


_shared_admins: dict[tuple[str, ...], AdminClient] = {}
_shared_admins_lock = threading.Lock()


def _shared_admin(settings: Settings) -> AdminClient:
    """One admin client per cluster for the process: callers that poll (a test waiting on a group)
    would otherwise open and tear down broker connections on every call."""
    key = (settings.bootstrap_servers, *sorted(f"{k}={v}" for k, v in settings.kafka_options.items()))
    with _shared_admins_lock:
        if key not in _shared_admins:
            _shared_admins[key] = lazy_admin(settings).get()
        return _shared_admins[key]


def _group_members(settings: Settings, group_id: str, timeout_s: float) -> dict[str, list[tuple[str, int]]]:
    admin = _shared_admin(settings)
    request = admin.describe_consumer_groups([group_id], request_timeout=timeout_s)
    (future,) = request.values()
    try:
        description = future.result(timeout=timeout_s + 1.0)
    except KafkaException as exc:
        error = BusError.from_kafka(f"describe group {group_id}", exc)
        if error.code == "GROUP_AUTHORIZATION_FAILED":
            raise BusError(f"not authorized to describe group {group_id}", code=error.code) from exc
        raise error from exc
    except TimeoutError as exc:  # concurrent.futures raises the builtin since Python 3.11
        raise BusError(f"describe group {group_id}: no answer within {timeout_s:g}s", retriable=True) from exc
    return {
        member.client_id: [(tp.topic, tp.partition) for tp in member.assignment.topic_partitions]
        for member in description.members
    }


def group_members(
    settings: Settings, group_id: str, *, timeout_s: float = REQUEST_TIMEOUT_S
) -> dict[str, list[tuple[str, int]]]:
    """Members of a consumer group, by client id, with their (physical topic, partition)s — what
    ``kafka-consumer-groups --describe --members`` shows. Empty while the group is rebalancing or
    cannot be described (``group_owners(..., strict=True)`` says why instead)."""
    try:
        return _group_members(settings, group_id, timeout_s)
    except BusError:
        return {}


def group_owners(
    settings: Settings, group_id: str, *, strict: bool = False, timeout_s: float = REQUEST_TIMEOUT_S
) -> dict[str, list[int]]:
    """Role name (its ``worker_id``) → the partitions it holds in ``group_id``; empty while the group
    rebalances. Client ids are ``<namespace>.consumer.<worker_id>``. ``strict``: a group that cannot
    be described (not authorized, no answer) raises ``BusError`` instead of looking empty."""
    prefix = f"{settings.namespace}.consumer."
    members = (
        _group_members(settings, group_id, timeout_s)
        if strict
        else group_members(settings, group_id, timeout_s=timeout_s)
    )
    return {
        client_id.removeprefix(prefix): sorted(p for _, p in partitions)
        for client_id, partitions in members.items()
    }
