"""Fail fast and say why: is the cluster reachable, does it accept our credentials, are the topics there?

librdkafka retries a refused connection or a failed SASL/TLS handshake silently and forever; a client
command (``mvs sql``, ``mvs status``) must instead give up within its timeout with one clear line. So
before a client command reads or writes, ``probe`` asks for the cluster metadata with an ``error_cb``
that records what librdkafka would otherwise only log, and turns it into a typed ``BusError``:
``BrokerUnreachable``, ``AuthenticationFailed`` (SASL or TLS refused: a permanent condition, reported at
once) or ``TopicMissing``. ``client_options`` are the librdkafka settings that keep the client's own
producer and consumers within the same deadline.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

from confluent_kafka import KafkaError, KafkaException, TopicCollection
from confluent_kafka.admin import AdminClient

# confluent_kafka.admin re-exports it without __all__, which mypy --strict rejects.
from confluent_kafka.admin._acl import AclOperation

from workers.config import Settings
from workers.kafka.clients import admin_config
from workers.kafka.errors import BusError

# A metadata request is retried in slices this long, so a handshake failure reported meanwhile by the
# error callback ends the probe at once instead of at the deadline.
_SLICE_S = 1.0
# The access check is best effort: its request may go to a broker that just died (one of three), and
# must not spend the command's whole deadline there — the operation itself still reports a denial.
_ACCESS_CHECK_S = 5.0
_SECURITY_HINT = "check MVS_KAFKA_SASL_* / MVS_KAFKA_SECURITY_PROTOCOL"
_TLS_HINT = "check MVS_KAFKA_SECURITY_PROTOCOL / MVS_KAFKA_SSL_*"


class BrokerUnreachable(BusError):
    """No broker answered within the deadline (refused, unreachable, or accepting but silent)."""


class AuthenticationFailed(BusError):
    """The broker refused our SASL credentials or the TLS handshake: retrying will not help."""


class TopicMissing(BusError):
    """A topic the command needs is not in the metadata (never applied, or not visible to us)."""


def client_options(settings: Settings, timeout_s: float, *, quiet: bool = True) -> dict[str, str]:
    """librdkafka settings for a client command's consumers and admin client: connection attempts
    bounded by the command's timeout and, unless ``quiet`` is off, no librdkafka log lines on
    stderr (the command reports the problem itself, in one line). Explicit ``MVS_KAFKA_*`` win."""
    ms = str(max(1000, int(timeout_s * 1000)))
    options = {"socket.connection.setup.timeout.ms": ms}
    if quiet:
        options["log_level"] = "0"
    return {**options, **settings.kafka_options}


def producer_options(timeout_s: float) -> dict[str, str]:
    """A client's producer: a record not delivered within the remaining time fails (instead of
    librdkafka's default of 300 s), so ``flush`` reports it before the command's deadline."""
    ms = str(max(1000, int(timeout_s * 1000)))
    return {"message.timeout.ms": ms, "socket.connection.setup.timeout.ms": ms}


def bounded(settings: Settings, timeout_s: float, *, quiet: bool = True) -> Settings:
    """``settings`` whose Kafka clients all carry ``client_options``."""
    return replace(settings, kafka_options=client_options(settings, timeout_s, quiet=quiet))


def _handshake_failure(errors: Sequence[KafkaError], where: str) -> AuthenticationFailed | None:
    for error in errors:
        text = error.str()
        if error.code() == KafkaError._AUTHENTICATION:
            return AuthenticationFailed(
                f"authentication failed at {where} ({_SECURITY_HINT}): {_detail(text)}",
                code=error.name(),
            )
        if error.code() == KafkaError._SSL or "SSL handshake failed" in text:
            return AuthenticationFailed(
                f"TLS handshake failed at {where} ({_TLS_HINT}): {_detail(text)}", code=error.name()
            )
    return None


def _reason(errors: Sequence[KafkaError]) -> str:
    """The last error that says what went wrong: "1/1 brokers are down" follows every failed
    connection and names no cause, so it is the reason only when nothing else was reported."""
    for error in reversed(errors):
        if error.code() != KafkaError._ALL_BROKERS_DOWN:
            return _detail(error.str())
    return _detail(errors[-1].str()) if errors else ""


def _detail(text: str) -> str:
    """librdkafka's message without the ``<proto>://host:port/bootstrap: `` prefix, on one line."""
    head, sep, rest = text.partition("/bootstrap: ")
    return " ".join((rest if sep else text).split())[:300]


def _check_access(admin: AdminClient, needs: Mapping[str, AclOperation], deadline: float) -> None:
    """Raise ``BusError(code=TOPIC_AUTHORIZATION_FAILED)`` for a topic the broker says we may not
    read (or write) as needed. Best effort: where the broker does not say (or does not answer in
    time), the operation itself reports what goes wrong."""
    if not needs:
        return
    remaining = max(0.1, min(_ACCESS_CHECK_S, deadline - time.monotonic()))
    futures = admin.describe_topics(
        TopicCollection(list(needs)), include_authorized_operations=True, request_timeout=remaining
    )
    for topic, future in futures.items():
        try:
            operations = future.result(timeout=remaining + 1.0).authorized_operations
        except KafkaException as exc:
            error = BusError.from_kafka(f"describe topic {topic}", exc)
            if error.code == "TOPIC_AUTHORIZATION_FAILED":
                raise BusError(f"not authorized to describe topic {topic}", code=error.code) from exc
            continue
        except TimeoutError:
            continue
        need = needs[topic]
        if operations is not None and need not in operations and AclOperation.ALL not in operations:
            verb = need.name.lower()
            raise BusError(
                f"not authorized to {verb} topic {topic} (the principal needs {need.name} on it)",
                code="TOPIC_AUTHORIZATION_FAILED",
            )


def probe(
    settings: Settings,
    timeout_s: float,
    *,
    topics: Sequence[str] = (),
    reads: Sequence[str] = (),
    writes: Sequence[str] = (),
    admin_options: Mapping[str, str] | None = None,
) -> frozenset[str]:
    """Within ``timeout_s``: reach a broker, authenticate, check that the physical ``topics`` (and
    ``reads``, ``writes``) exist and that the broker lets us read ``reads`` and write ``writes``.
    Returns the physical topic names the cluster shows us; raises ``AuthenticationFailed`` (at
    once), ``BrokerUnreachable`` (at the deadline), ``TopicMissing`` or a ``BusError`` with code
    ``TOPIC_AUTHORIZATION_FAILED``."""
    where = settings.bootstrap_servers
    errors: list[KafkaError] = []
    lock = threading.Lock()

    def on_error(error: KafkaError) -> None:
        with lock:
            errors.append(error)

    config: dict[str, Any] = {
        **admin_config(settings),
        **client_options(settings, timeout_s),
        **(admin_options or {}),
        "error_cb": on_error,  # librdkafka's config dict takes callbacks too (its stubs say not)
    }
    admin = AdminClient(config)
    deadline = time.monotonic() + timeout_s
    last: str = "no answer"
    while True:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            admin.poll(0)  # a handshake failure reported as the last slice ended still counts
            with lock:
                seen = list(errors)
            failed = _handshake_failure(seen, where)
            if failed is not None:
                raise failed
            reason = _reason(seen) or last
            raise BrokerUnreachable(
                f"broker unreachable at {where} (no answer within {timeout_s:.3g}s: {reason})",
                code="_ALL_BROKERS_DOWN",
                retriable=True,
            )
        try:
            metadata = admin.list_topics(timeout=min(_SLICE_S, remaining))
        except KafkaException as exc:
            error = exc.args[0] if exc.args and isinstance(exc.args[0], KafkaError) else None
            last = error.str() if error is not None else str(exc)
            admin.poll(0)  # serve the error callbacks of this attempt
            with lock:
                failed = _handshake_failure(errors, where)
            if failed is not None:
                raise failed from exc
            continue
        break
    present = frozenset(metadata.topics)
    for topic in dict.fromkeys([*topics, *reads, *writes]):
        meta = metadata.topics.get(topic)
        if meta is None:
            raise TopicMissing(
                f"topic {topic} does not exist or is not visible to this principal "
                f"(run `mvs topics apply` for namespace {settings.namespace}, or grant DESCRIBE)",
                code="UNKNOWN_TOPIC_OR_PART",
            )
        if meta.error is not None:
            raise BusError.from_kafka(f"topic {topic}", meta.error)
    needs = {topic: AclOperation.READ for topic in reads}
    needs.update({topic: AclOperation.WRITE for topic in writes})
    _check_access(admin, needs, deadline)
    return present
