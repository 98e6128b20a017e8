"""The container test's Kafka health check (infra/compose.host-network.yml) is healthy exactly when a
broker answers: run as the container runs it (bash, the port interpolated as compose does) against the
session's real broker, a port nobody listens on, and a listener that accepts but never answers. The
``topics`` service waits for it (``service_healthy``), so it must not pass before the broker serves."""

from __future__ import annotations

import socket
import subprocess
from collections.abc import Iterator

import pytest
import yaml

from workers.config import REPO_ROOT
from workers.embedded.broker import free_port

pytestmark = pytest.mark.integration

HOST_NETWORK = REPO_ROOT / "infra" / "compose.host-network.yml"
COMPOSE = REPO_ROOT / "docker-compose.yml"


def probe(port: int) -> int:
    """The health check's exit code against 127.0.0.1:``port``."""
    check = yaml.safe_load(HOST_NETWORK.read_text())["services"]["kafka"]["healthcheck"]["test"]
    assert check[0] == "CMD", check
    command = [part.replace("${KAFKA_PORT:?}", str(port)).replace("$$", "$") for part in check[1:]]
    return subprocess.run(command, capture_output=True, timeout=30).returncode


@pytest.fixture
def silent_listener() -> Iterator[int]:
    """A port that accepts connections and never answers (a broker still starting up, at worst)."""
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        yield server.getsockname()[1]


def test_the_topics_service_waits_for_the_kafka_health_check() -> None:
    topics = yaml.safe_load(COMPOSE.read_text())["services"]["topics"]
    assert topics["depends_on"] == {"kafka": {"condition": "service_healthy"}}


def test_the_kafka_health_check_passes_on_a_serving_broker(kafka_bootstrap: str) -> None:
    assert probe(int(kafka_bootstrap.split(",")[0].rsplit(":", 1)[1])) == 0


def test_the_kafka_health_check_fails_where_nothing_listens() -> None:
    assert probe(free_port()) != 0


def test_the_kafka_health_check_fails_on_a_listener_that_does_not_answer(silent_listener: int) -> None:
    assert probe(silent_listener) != 0
