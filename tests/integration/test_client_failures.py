"""Issue 8, class 5: every `mvs` client command, as a real process, ends within its timeout whatever
the broker does, with one line on stderr (`ERROR <code>: ...`), a non-zero exit code and no traceback.

The subprocess timeout is a hang guard (N + 30 s), not a speed assertion."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from collections.abc import Iterator, Mapping
from pathlib import Path

import pytest

from workers.client import BrokerUnavailable, MvsClient
from workers.config import REPO_ROOT, Settings
from workers.embedded.broker import free_port
from workers.kafka.admin import apply_topics

TIMEOUT_S = 3
HANG_GUARD_S = TIMEOUT_S + 30
CLIENT_COMMANDS = [
    ["sql", "DROP MATERIALIZED VIEW nothing"],
    ["status"],
    ["history"],
    ["topics", "apply"],
    ["tail", "ddl"],
]
SASL = {
    "MVS_KAFKA_SECURITY_PROTOCOL": "SASL_PLAINTEXT",
    "MVS_KAFKA_SASL_MECHANISM": "PLAIN",
    "MVS_KAFKA_SASL_USERNAME": "someone",
    "MVS_KAFKA_SASL_PASSWORD": "wrong",
}


def mvs(
    args: list[str],
    bootstrap: str,
    *,
    namespace: str = "mvs",
    extra: Mapping[str, str] | None = None,
    timeout_s: int = TIMEOUT_S,
) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MVS_")}
    env.update({"MVS_BOOTSTRAP_SERVERS": bootstrap, "MVS_NAMESPACE": namespace, **(extra or {})})
    return subprocess.run(
        [sys.executable, "-m", "workers.cli", *args, "--timeout", str(timeout_s)],
        env=env,
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=HANG_GUARD_S,
    )


def one_error_line(done: subprocess.CompletedProcess[str]) -> str:
    assert done.returncode != 0, done
    assert "Traceback" not in done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    return lines[0]


@pytest.fixture
def closed_port() -> str:
    return f"127.0.0.1:{free_port()}"  # bound once, released: nothing listens there


@pytest.fixture
def silent_broker() -> Iterator[str]:
    """Accepts TCP connections (the kernel completes them) and never answers a request."""
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(64)
        yield f"127.0.0.1:{listener.getsockname()[1]}"


@pytest.mark.parametrize("command", CLIENT_COMMANDS, ids=lambda c: c[0])
def test_a_closed_port_is_broker_unreachable(command: list[str], closed_port: str) -> None:
    line = one_error_line(mvs(command, closed_port))
    assert line.startswith(f"ERROR 3001: broker unreachable at {closed_port}"), line


@pytest.mark.parametrize(
    "command", [["sql", "DROP MATERIALIZED VIEW nothing"], ["status"]], ids=lambda c: c[0]
)
def test_a_broker_that_never_answers_is_broker_unreachable(command: list[str], silent_broker: str) -> None:
    line = one_error_line(mvs(command, silent_broker))
    assert line.startswith(f"ERROR 3001: broker unreachable at {silent_broker}"), line


@pytest.mark.parametrize("command", CLIENT_COMMANDS, ids=lambda c: c[0])
def test_wrong_credentials_are_an_authentication_failure(command: list[str], kafka_bootstrap: str) -> None:
    line = one_error_line(mvs(command, kafka_bootstrap, extra=SASL))
    assert line.startswith(f"ERROR 3001: authentication failed at {kafka_bootstrap}"), line
    assert "MVS_KAFKA_SASL_" in line


def test_tls_against_a_plaintext_listener_is_a_handshake_failure(kafka_bootstrap: str) -> None:
    # The refusal ends the probe at its first slice (1 s); the longer deadline is for a loaded
    # machine, where librdkafka's thread may report it late (CI, session 27: 3 s ran out first).
    tls = {"MVS_KAFKA_SECURITY_PROTOCOL": "SSL"}
    line = one_error_line(mvs(["status"], kafka_bootstrap, extra=tls, timeout_s=HANG_GUARD_S - 10))
    assert line.startswith(f"ERROR 3001: TLS handshake failed at {kafka_bootstrap}"), line


def test_a_namespace_never_applied_names_the_missing_topic(kafka_bootstrap: str, settings: Settings) -> None:
    for command in (["status"], ["sql", "DROP MATERIALIZED VIEW nothing"]):
        line = one_error_line(mvs(command, kafka_bootstrap, namespace=settings.namespace))
        assert line.startswith(f"ERROR 1003: topic {settings.namespace}."), line
        assert "mvs topics apply" in line
    # history shows what it can and notes what is missing, one line per part
    done = mvs(["history"], kafka_bootstrap, namespace=settings.namespace)
    assert done.returncode == 0 and "Traceback" not in done.stderr, done
    assert f"runs: topic {settings.namespace}.runs does not exist" in done.stdout


def test_no_coordinator_is_a_timeout_after_publishing(kafka_bootstrap: str, settings: Settings) -> None:
    apply_topics(settings)
    line = one_error_line(
        mvs(["sql", "DROP MATERIALIZED VIEW nothing"], kafka_bootstrap, namespace=settings.namespace)
    )
    assert line.startswith(f"ERROR 3001: no answer from a coordinator within {TIMEOUT_S}s"), line


def test_the_python_client_raises_a_typed_error(closed_port: str, tmp_path: Path) -> None:
    client = MvsClient(Settings(bootstrap_servers=closed_port, embedded=False, warehouse=str(tmp_path)))
    with pytest.raises(BrokerUnavailable) as raised:
        client.tasks(timeout_s=1.0)
    assert raised.value.code == 3001 and closed_port in str(raised.value)


HANGING_COMMAND = """
import sys
from confluent_kafka import Consumer
from workers.cli import command_line as cli

def hangs(settings, args):  # a librdkafka call no deadline bounds: blocks for 120 s
    consumer = Consumer({"bootstrap.servers": sys.argv[1], "group.id": "g", "log_level": "0"})
    consumer.subscribe(["t"])
    consumer.poll(120)
    return 0

cli.cmd_sql = hangs
sys.exit(cli.main(["sql", "DROP MATERIALIZED VIEW v", "--timeout", sys.argv[2]]))
"""


def test_the_watchdog_ends_a_command_stuck_inside_librdkafka(closed_port: str) -> None:
    """The process exits (its stuck daemon thread does not hold it) with the one line."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("MVS_")}
    env["MVS_BOOTSTRAP_SERVERS"] = closed_port
    done = subprocess.run(
        [sys.executable, "-c", HANGING_COMMAND, closed_port, str(TIMEOUT_S)],
        env=env,
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=HANG_GUARD_S,
    )
    line = one_error_line(done)
    assert line == f"ERROR 3001: broker unreachable at {closed_port} (no answer within {TIMEOUT_S}s)", line
