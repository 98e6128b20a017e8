"""Topic declarations: ``topics/<logical name>.toml``, loaded once into ``TopicSpec``.

Physical names come from ``Settings.topic(logical)`` (``<namespace>.<logical>``). The keyed
topics that decide ownership must share one partition count (checked here), because a task
id hashes (murmur2) to the same partition number of each.

A declaration with ``template = true`` is a family of topics, one per instance:
``ddl.inbox`` declares ``ddl.inbox.<user>`` (a DDL producer's inbox, see
``workers.coordinator.inbox``). ``mvs topics apply`` does not create templates (``mvs acls apply``
creates the instances); ``topic_spec("ddl.inbox.alice")`` answers the template's spec under the
instance's name.
"""

from __future__ import annotations

import functools
import re
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from types import MappingProxyType
from typing import Any

from workers.config import REPO_ROOT, Settings

TOPICS_DIR = REPO_ROOT / "topics"
# Keyed by task id; partition p of each belongs to the worker that owns manager partition p.
OWNERSHIP_TOPICS = ("catalog", "manager", "maintainer")
# The instance part of a templated topic: a legal Kafka topic name part without dots (one level).
_INSTANCE = re.compile(r"^[A-Za-z0-9_-]{1,100}$")


class TopicConfigError(ValueError):
    """A topic declaration is missing, malformed or inconsistent."""


@dataclass(frozen=True)
class TopicSpec:
    name: str  # logical
    partitions: int
    replication_factor: int
    value_schema: str | None  # full Avro name; None = raw bytes (the dlq)
    purpose: str
    config: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))
    template: bool = False  # a family of topics <name>.<instance>, not a topic itself

    def instance(self, instance: str) -> TopicSpec:
        """The spec of one member of a template: ``ddl.inbox`` → ``ddl.inbox.alice``."""
        if not self.template:
            raise TopicConfigError(f"topic {self.name!r} is not a template")
        if not _INSTANCE.match(instance):
            raise TopicConfigError(f"{instance!r} cannot name a {self.name} topic: letters, digits, _ and -")
        return replace(self, name=f"{self.name}.{instance}", template=False)

    def physical(self, settings: Settings) -> str:
        return settings.topic(self.name)


def replication_factor(settings: Settings, spec: TopicSpec) -> int:
    """The deployment's ``Settings.replication_factor`` when set, else 1 for the embedded broker (one
    node), else the declaration's."""
    if settings.replication_factor:
        return settings.replication_factor
    return 1 if settings.embedded else spec.replication_factor


def topic_config(settings: Settings, spec: TopicSpec) -> dict[str, str]:
    """The declared config with ``min.insync.replicas`` kept below the replication factor, so one
    replica down still takes acks=all writes (and a single broker takes any)."""
    config = dict(spec.config)
    if "min.insync.replicas" in config:
        cap = max(1, replication_factor(settings, spec) - 1)
        config["min.insync.replicas"] = str(min(int(config["min.insync.replicas"]), cap))
    return config


def _config_value(value: object) -> str:
    # Kafka topic configs are strings; TOML may hold ints or booleans for convenience.
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float, str)):
        return str(value)
    raise TopicConfigError(f"topic config value {value!r} is not a scalar")


def _parse(path: Path, raw: Mapping[str, Any]) -> TopicSpec:
    logical = path.name.removesuffix(".toml")
    known = {"name", "partitions", "replication_factor", "value_schema", "purpose", "config", "template"}
    unknown = set(raw) - known
    if unknown:
        raise TopicConfigError(f"{path.name}: unknown keys {sorted(unknown)}")
    if raw.get("name") != logical:
        got = raw.get("name")
        raise TopicConfigError(f"{path.name}: name must be {logical!r} (the file name), got {got!r}")
    partitions, replication = raw.get("partitions"), raw.get("replication_factor", 1)
    if not isinstance(partitions, int) or partitions < 1:
        raise TopicConfigError(f"{path.name}: partitions must be a positive integer")
    if not isinstance(replication, int) or replication < 1:
        raise TopicConfigError(f"{path.name}: replication_factor must be a positive integer")
    schema = raw.get("value_schema")
    if schema is not None and (not isinstance(schema, str) or "." not in schema):
        raise TopicConfigError(f"{path.name}: value_schema must be a full Avro name like io.mvs.DdlEvent")
    config = raw.get("config", {})
    if not isinstance(config, dict):
        raise TopicConfigError(f"{path.name}: [config] must be a table")
    template = raw.get("template", False)
    if not isinstance(template, bool):
        raise TopicConfigError(f"{path.name}: template must be true or false")
    return TopicSpec(
        name=logical,
        partitions=partitions,
        replication_factor=replication,
        value_schema=schema,
        purpose=str(raw.get("purpose", "")),
        config=MappingProxyType({str(k): _config_value(v) for k, v in config.items()}),
        template=template,
    )


def load_declarations(directory: Path = TOPICS_DIR) -> dict[str, TopicSpec]:
    """Every declaration in ``directory`` by logical name, templates included (uncached)."""
    specs: dict[str, TopicSpec] = {}
    for path in sorted(directory.glob("*.toml")):
        try:
            raw = tomllib.loads(path.read_text())
        except tomllib.TOMLDecodeError as exc:
            raise TopicConfigError(f"{path.name}: {exc}") from exc
        spec = _parse(path, raw)
        specs[spec.name] = spec
    if not specs:
        raise TopicConfigError(f"no topic declarations in {directory}")
    counts = {specs[name].partitions for name in OWNERSHIP_TOPICS if name in specs}
    if len(counts) > 1:
        raise TopicConfigError(f"{', '.join(OWNERSHIP_TOPICS)} must have the same partition count")
    return specs


def load_topics(directory: Path = TOPICS_DIR) -> dict[str, TopicSpec]:
    """Every topic declared in ``directory`` by logical name, templates left out (uncached)."""
    return {name: spec for name, spec in load_declarations(directory).items() if not spec.template}


@functools.cache
def _declarations() -> Mapping[str, TopicSpec]:
    return MappingProxyType(load_declarations())


@functools.cache
def topics() -> Mapping[str, TopicSpec]:
    """The topics declared in ``topics/`` (not the templates), loaded once per process."""
    return MappingProxyType({name: spec for name, spec in _declarations().items() if not spec.template})


def template_spec(name: str) -> TopicSpec:
    """A template declared in ``topics/`` (``ddl.inbox``)."""
    spec = _declarations().get(name)
    if spec is None or not spec.template:
        raise TopicConfigError(f"no topic template {name!r} declared in topics/")
    return spec


def topic_spec(logical: str) -> TopicSpec:
    """A declared topic, or a member of a declared template (``ddl.inbox.alice``)."""
    found = topics().get(logical)
    if found is not None:
        return found
    template, _, instance = logical.rpartition(".")
    spec = _declarations().get(template)
    if spec is not None and spec.template and _INSTANCE.match(instance):
        return spec.instance(instance)
    known = sorted(topics())
    raise TopicConfigError(f"no topic {logical!r} declared in topics/ (known: {known})")


INBOX_TEMPLATE = "ddl.inbox"


def inbox_topic(user: str) -> str:
    """Logical name of a DDL producer's inbox: ``alice`` → ``ddl.inbox.alice``."""
    return template_spec(INBOX_TEMPLATE).instance(user).name


def ddl_topic(settings: Settings) -> str:
    """Where a client publishes DDL: ``ddl``, or with ``ddl_inbox`` its SASL user's inbox."""
    if not settings.ddl_inbox:
        return "ddl"
    user = settings.kafka_options.get("sasl.username")
    if not user:
        raise TopicConfigError("MVS_DDL_INBOX=1 needs MVS_KAFKA_SASL_USERNAME: the inbox is the user's")
    return inbox_topic(user)


def logical_name(settings: Settings, physical: str) -> str:
    """Inverse of ``Settings.topic``: ``mvs.ddl.results`` → ``ddl.results``."""
    prefix = f"{settings.namespace}."
    if not physical.startswith(prefix):
        raise TopicConfigError(f"topic {physical!r} is not in namespace {settings.namespace!r}")
    return physical[len(prefix) :]
