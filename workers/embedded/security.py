"""The embedded broker with authentication and authorization (``security="sasl_ssl"``).

- Clients connect to a SASL_SSL listener: TLS with a CA generated into the data dir
  (``workers.embedded.tls``), then SASL/PLAIN with a user name and password.
- The KRaft controller listener stays on 127.0.0.1 and takes SASL/PLAIN as well (plaintext on the
  loopback): only the broker's own user is declared there, so no client can reach the controller.
- ``StandardAuthorizer`` with ``allow.everyone.if.no.acl.found=false``: nothing is allowed without
  an ACL, except to the super users ``User:broker`` (the broker itself) and ``User:admin`` (the
  operator who runs ``mvs topics apply`` and ``mvs acls apply``).

Why PLAIN and not SCRAM: a KRaft controller listener cannot use SCRAM (the credentials live in the
metadata log that the controller itself serves), so the broker needs PLAIN for that hop anyway; with
PLAIN on both listeners the whole user list is one declaration read at start, and TLS keeps the
passwords off the wire. SCRAM-SHA-512 on a real cluster needs no change in mvs: only the
``MVS_KAFKA_SASL_MECHANISM`` setting differs.

Users come from ``<data dir>/users.json`` (``{"name": "password", ...}``), written with
``DEV_USERS`` on first start when absent. Those defaults are for development and tests only.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from pathlib import Path

from workers.embedded.tls import BrokerTls, ensure_broker_tls

SECURITY_MODES = ("none", "sasl_ssl")
BROKER_USER = "broker"
ADMIN_USER = "admin"
SUPER_USERS = (BROKER_USER, ADMIN_USER)
MECHANISM = "PLAIN"
# Development defaults: one user per mvs role, and two DDL producers. Never use these in production.
DEV_USERS: Mapping[str, str] = {
    BROKER_USER: "broker-secret",
    ADMIN_USER: "admin-secret",
    "coordinator": "coordinator-secret",
    "worker": "worker-secret",
    "operator": "operator-secret",
    "alice": "alice-secret",
    "bob": "bob-secret",
}
# User names become topic names (a producer's DDL inbox) and JAAS values: keep them plain.
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]{0,99}$")
_PASSWORD = re.compile(r"^[A-Za-z0-9._~+/=-]{1,200}$")


class SecurityConfigError(ValueError):
    pass


def check_users(users: Mapping[str, str]) -> dict[str, str]:
    """The declaration, checked: plain names and passwords, and the super users present."""
    for name, password in users.items():
        if not isinstance(name, str) or not _NAME.match(name):
            raise SecurityConfigError(f"user name {name!r}: letters, digits, '_' and '-' only")
        if not isinstance(password, str) or not _PASSWORD.match(password):
            raise SecurityConfigError(f"password of {name!r}: 1-200 of letters, digits and ._~+/=-")
    missing = [name for name in SUPER_USERS if name not in users]
    if missing:
        raise SecurityConfigError(f"users must declare {missing} (the broker's own and the admin's)")
    return dict(users)


def load_users(data_dir: Path, users: Mapping[str, str] | None = None) -> dict[str, str]:
    """``users`` if given (and saved), else ``<data dir>/users.json``, else ``DEV_USERS`` (saved)."""
    path = data_dir / "users.json"
    if users is None and path.exists():
        try:
            return check_users(json.loads(path.read_text()))
        except json.JSONDecodeError as exc:
            raise SecurityConfigError(f"{path}: {exc}") from exc
    declared = check_users(DEV_USERS if users is None else users)
    path.write_text(json.dumps(declared, indent=2) + "\n")
    path.chmod(0o600)
    return declared


def _jaas(user: str, users: Mapping[str, str]) -> str:
    # The broker logs in as ``user`` (inter-broker and broker→controller) and accepts ``users``.
    accepted = " ".join(f'user_{name}="{password}"' for name, password in users.items())
    return (
        "org.apache.kafka.common.security.plain.PlainLoginModule required "
        f'username="{user}" password="{users[user]}" {accepted};'
    )


def secure_properties(
    data_dir: Path, port: int, controller_port: int, users: Mapping[str, str]
) -> dict[str, str]:
    """server.properties entries that replace the plaintext listeners of the embedded broker."""
    tls: BrokerTls = ensure_broker_tls(data_dir / "tls")
    broker_only = {BROKER_USER: users[BROKER_USER]}
    return {
        "listeners": f"SASL_SSL://127.0.0.1:{port},CONTROLLER://127.0.0.1:{controller_port}",
        "advertised.listeners": f"SASL_SSL://127.0.0.1:{port}",
        "listener.security.protocol.map": "SASL_SSL:SASL_SSL,CONTROLLER:SASL_PLAINTEXT",
        "inter.broker.listener.name": "SASL_SSL",
        "sasl.enabled.mechanisms": MECHANISM,
        "sasl.mechanism.inter.broker.protocol": MECHANISM,
        "sasl.mechanism.controller.protocol": MECHANISM,
        "listener.name.sasl_ssl.plain.sasl.jaas.config": _jaas(BROKER_USER, users),
        "listener.name.controller.plain.sasl.jaas.config": _jaas(BROKER_USER, broker_only),
        "ssl.keystore.type": "PKCS12",
        "ssl.keystore.location": str(tls.keystore),
        "ssl.keystore.password": tls.keystore_password,
        "ssl.key.password": tls.keystore_password,
        "ssl.truststore.type": "PEM",
        "ssl.truststore.location": str(tls.ca_pem),
        "ssl.client.auth": "none",
        "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
        "allow.everyone.if.no.acl.found": "false",
        "super.users": ";".join(f"User:{name}" for name in SUPER_USERS),
    }


def client_options(data_dir: Path, user: str, password: str) -> dict[str, str]:
    """Kafka client options for ``user`` against the secure embedded broker (what the
    ``MVS_KAFKA_*`` variables printed by ``mvs broker`` set)."""
    return {
        "security.protocol": "SASL_SSL",
        "sasl.mechanism": MECHANISM,
        "sasl.username": user,
        "sasl.password": password,
        "ssl.ca.location": str(data_dir / "tls" / "ca.pem"),
    }
