"""The schema registry seen from the bus: schema ids for producers, writer schemas for consumers.

Speaks the Confluent Schema Registry API (``confluent_kafka.schema_registry``; Apicurio serves it
under ``/apis/ccompat/v7``) when ``Settings.schema_registry_url`` is set. The codec frames and
encodes; this module only finds ids and schemas, and caches both for the life of the process:
one registry request per (subject, schema) and per id, never per record. So a registry that goes
away mid-run stops nobody whose ids are known; a lookup that cannot be answered is retried
(``REGISTRY_RETRY``) and then raised as a retriable ``BusError`` naming the registry, and the
caller keeps its record (a producer's ``send`` queued nothing, a consumer reads it again).

Subjects follow the topic-name strategy: ``<physical topic>-value`` (keys are plain UTF-8 strings).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import TypeVar

from confluent_kafka.schema_registry import Schema, SchemaRegistryClient
from confluent_kafka.schema_registry.error import SchemaRegistryError

from workers.codec import DecodeError
from workers.config import Settings
from workers.kafka.errors import BusError
from workers.kafka.retry import RetryPolicy, kafka_policy

log = logging.getLogger(__name__)
T = TypeVar("T")
AVRO = "AVRO"
# One request to the registry: a registry that does not answer in this long is away.
REQUEST_TIMEOUT_S = 5
# A registry restarting or briefly unreachable: 0.2 s, doubling, capped at 2 s, 5 attempts (~3 s).
REGISTRY_RETRY = kafka_policy("schema.registry", attempts=5, initial_s=0.2, max_s=2.0)
# Error codes of the Confluent API (Apicurio's ccompat answers the same).
INCOMPATIBLE = 409
NOT_FOUND_CODES = frozenset({40401, 40402, 40403})


def value_subject(physical_topic: str) -> str:
    """The subject of a topic's values (Confluent's TopicNameStrategy)."""
    return f"{physical_topic}-value"


class SchemaRegistry:
    """A registry's ids and schemas, cached for the process (``registry_for``). Thread-safe."""

    def __init__(
        self, url: str, *, retry: RetryPolicy = REGISTRY_RETRY, client: SchemaRegistryClient | None = None
    ) -> None:
        self.url = url
        self.retry = retry
        # No retries inside the client: REGISTRY_RETRY is the one policy, and it logs each attempt.
        self._client = client or SchemaRegistryClient(
            {"url": url, "timeout": REQUEST_TIMEOUT_S, "max.retries": 0}
        )
        self._ids: dict[tuple[str, str], int] = {}
        self._schemas: dict[int, str] = {}
        self._lock = threading.Lock()

    # -- the hot paths (dict lookups once warm) -----------------------------------------

    def id_for(self, subject: str, schema_json: str) -> int:
        """The id of ``schema_json`` under ``subject``, registering it the first time (idempotent:
        an identical schema keeps its id; the subject's compatibility rule decides a new one)."""
        key = (subject, schema_json)
        found = self._ids.get(key)
        if found is None:
            found = self._call(
                f"register a schema under {subject}",
                lambda: self._client.register_schema(subject, Schema(schema_json, AVRO)),
            )
            with self._lock:
                self._ids[key] = found
                self._schemas.setdefault(found, schema_json)
        return found

    def schema_for(self, schema_id: int) -> str:
        """The writer schema (JSON text) of ``schema_id``; ``DecodeError`` if the registry has none."""
        found = self._schemas.get(schema_id)
        if found is None:
            try:
                found = self._call(
                    f"schema id {schema_id}", lambda: self._client.get_schema(schema_id).schema_str
                )
            except BusError as exc:
                if exc.code in {str(code) for code in NOT_FOUND_CODES}:
                    raise DecodeError(f"schema id {schema_id} is unknown to the registry {self.url}") from exc
                raise
            if found is None:
                raise DecodeError(f"schema id {schema_id} has no schema text in the registry {self.url}")
            with self._lock:
                self._schemas[schema_id] = found
        return found

    # -- administration (``mvs schemas apply``) ------------------------------------------

    def subjects(self) -> list[str]:
        return list(self._call("list subjects", self._client.get_subjects))

    def set_compatibility(self, subject: str, level: str) -> None:
        self._call(f"set {subject} compatibility", lambda: self._client.set_compatibility(subject, level))

    def registered(self, subject: str) -> str | None:
        """The latest schema registered under ``subject``; None if the subject has none."""
        try:
            latest = self._call(f"latest of {subject}", lambda: self._client.get_latest_version(subject))
        except BusError as exc:
            if exc.code in {str(code) for code in NOT_FOUND_CODES}:
                return None
            raise
        return latest.schema.schema_str if latest.schema is not None else None

    # -- errors ----------------------------------------------------------------------------

    def _call(self, what: str, fn: Callable[[], T]) -> T:
        def attempt() -> T:
            try:
                return fn()
            except SchemaRegistryError as exc:
                status = int(exc.http_status_code or 0)
                message = f"schema registry {self.url}: {what}: {exc.error_message}"
                # 5xx: the registry is up but cannot answer now (its storage is away, it is starting).
                raise BusError(
                    message, code=str(exc.error_code), retriable=status >= 500 or status <= 0
                ) from exc
            except Exception as exc:  # httpx2's connect/read errors, timeouts, OSError: away
                problem = f"{type(exc).__name__}: {exc}"
                unavailable = f"schema registry {self.url} unavailable ({what}): {problem}"
                raise BusError(unavailable, code="REGISTRY_UNAVAILABLE", retriable=True) from exc

        return self.retry.call(attempt)


_registries: dict[str, SchemaRegistry] = {}
_registries_lock = threading.Lock()


def registry_for(settings: Settings) -> SchemaRegistry | None:
    """The process's client of ``settings.schema_registry_url`` (None without one): every producer
    and consumer of the process shares its caches."""
    url = settings.schema_registry_url
    if not url:
        return None
    with _registries_lock:
        registry = _registries.get(url)
        if registry is None:
            registry = _registries[url] = SchemaRegistry(url)
        return registry
