"""A throwaway certificate authority and broker certificate for the embedded broker's TLS listener.

Generated once into ``<data dir>/tls`` with the system's ``openssl`` (Debian's, present wherever the
JDK is): a CA (its certificate as PEM is what clients pass as ``ssl.ca.location``), and a broker
key + certificate signed by it for ``127.0.0.1`` and ``localhost``, packed as a PKCS#12 keystore the
JVM reads. For development and tests only: the keys are not encrypted at rest beyond the keystore
password, and the CA key stays in the data dir.
"""

from __future__ import annotations

import secrets
import subprocess
from dataclasses import dataclass
from pathlib import Path

DAYS = 825  # the longest validity clients accept without complaint


class TlsError(RuntimeError):
    pass


@dataclass(frozen=True)
class BrokerTls:
    ca_pem: Path  # clients: ssl.ca.location; the broker: its truststore (type PEM)
    keystore: Path  # PKCS#12: the broker's key and certificate chain
    keystore_password: str


def _openssl(*args: str, cwd: Path) -> None:
    try:
        subprocess.run(["openssl", *args], cwd=cwd, capture_output=True, check=True, text=True)
    except FileNotFoundError as exc:
        raise TlsError("openssl is not installed: it generates the embedded broker's certificates") from exc
    except subprocess.CalledProcessError as exc:
        raise TlsError(f"openssl {args[0]} failed: {exc.stderr.strip()}") from exc


def ensure_broker_tls(directory: Path) -> BrokerTls:
    """The CA and broker keystore in ``directory``, generated on first use and reused afterwards
    (clients keep trusting the same CA across broker restarts)."""
    directory.mkdir(parents=True, exist_ok=True)
    password_file = directory / "keystore.password"
    tls = BrokerTls(directory / "ca.pem", directory / "broker.p12", "")
    if tls.ca_pem.exists() and tls.keystore.exists() and password_file.exists():
        return BrokerTls(tls.ca_pem, tls.keystore, password_file.read_text().strip())
    password = secrets.token_hex(16)
    password_file.write_text(password + "\n")
    password_file.chmod(0o600)
    subj = "/O=mvs embedded broker"
    _openssl(
        "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "ca.key", "-out", "ca.pem",
        "-days", str(DAYS), "-subj", f"{subj}/CN=mvs development CA",
        "-addext", "basicConstraints=critical,CA:TRUE", "-addext", "keyUsage=critical,keyCertSign,cRLSign",
        cwd=directory,
    )  # fmt: skip
    _openssl(
        "req", "-newkey", "rsa:2048", "-nodes", "-keyout", "broker.key", "-out", "broker.csr",
        "-subj", f"{subj}/CN=localhost",
        cwd=directory,
    )  # fmt: skip
    (directory / "broker.ext").write_text(
        "subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth,clientAuth\n"
    )
    _openssl(
        "x509", "-req", "-in", "broker.csr", "-CA", "ca.pem", "-CAkey", "ca.key", "-CAcreateserial",
        "-out", "broker.pem", "-days", str(DAYS), "-sha256", "-extfile", "broker.ext",
        cwd=directory,
    )  # fmt: skip
    _openssl(
        "pkcs12", "-export", "-in", "broker.pem", "-inkey", "broker.key", "-certfile", "ca.pem",
        "-name", "broker", "-out", "broker.p12", "-passout", f"file:{password_file.name}",
        cwd=directory,
    )  # fmt: skip
    for private in ("ca.key", "broker.key"):
        (directory / private).chmod(0o600)
    return BrokerTls(tls.ca_pem, tls.keystore, password)
