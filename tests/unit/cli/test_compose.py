"""docker-compose.yml without a Docker engine: valid against the Compose Specification's JSON schema
(the one docker compose validates with, fetched by infra/setup_compose_schema.sh), and everything it
names exists in mvs — each mvs service's command parses with the CLI, each MVS_/AWS_ variable is one
mvs reads, and each health check and published port is the port the command listens on. The image's
install step itself is run by tests/integration/test_image_install.py."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import jsonschema_rs
import pytest
import yaml

from workers.cli import build_parser
from workers.config import CACHE_DIR, REPO_ROOT

COMPOSE = REPO_ROOT / "docker-compose.yml"
HOST_NETWORK = REPO_ROOT / "infra" / "compose.host-network.yml"  # the container test's override
DEFAULT_OVERRIDE = REPO_ROOT / "docker-compose.override.yml"  # read by compose when given no -f
SCHEMA = CACHE_DIR / "compose-spec" / "compose-spec-v2.16.2.json"
DOCKERFILE = "infra/Dockerfile"


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    loaded = yaml.safe_load(COMPOSE.read_text())
    assert isinstance(loaded, dict)
    return loaded


def mvs_services(compose: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Services built from mvs's image (entrypoint ``mvs``)."""
    return {
        name: service
        for name, service in compose["services"].items()
        if isinstance(service.get("build"), dict) and service["build"].get("dockerfile") == DOCKERFILE
    }


def test_the_compose_file_follows_the_compose_specification(compose: dict[str, Any]) -> None:
    if not SCHEMA.exists():
        pytest.skip(f"{SCHEMA} missing: run infra/setup_compose_schema.sh (needs Go)")
    validator = jsonschema_rs.validator_for(json.loads(SCHEMA.read_text()))
    overrides = [yaml.safe_load(path.read_text()) for path in (HOST_NETWORK, DEFAULT_OVERRIDE)]
    for document in (compose, *overrides):
        found = validator.iter_errors(document)
        errors = [f"{'/'.join(map(str, e.instance_path))}: {e.message}" for e in found]
        assert not errors, errors
    # The schema itself rejects what compose rejects (so the check above can fail).
    assert not validator.is_valid({"services": {"x": {"image": "a", "stop_grace_period": ["bad"]}}})


def test_the_fleet_is_all_there(compose: dict[str, Any]) -> None:
    services = compose["services"]
    commands = {name: s.get("command", []) for name, s in mvs_services(compose).items()}
    roles = [c for c in commands.values() if "coordinator" in c]
    assert len(roles) == 2, "a coordinator and a standby"
    assert "worker" in commands["worker"] and "deploy" not in services["worker"], "scaled with --scale"
    assert {"kafka", "objectstore", "topics"} <= set(services)
    for name in ("coordinator", "coordinator-standby", "worker"):
        assert services[name].get("stop_signal") == "SIGTERM" and "stop_grace_period" in services[name]
        assert "healthcheck" in services[name] and services[name]["healthcheck"].get("disable") is not True


def test_the_host_network_override_keeps_every_service_on_loopback(compose: dict[str, Any]) -> None:
    text = HOST_NETWORK.read_text()
    services = yaml.safe_load(text)["services"]
    assert set(services) == set(compose["services"]), "every service is placed"
    for name, service in services.items():
        assert service.get("network_mode") in ("host", "none"), f"{name} would be on a bridge"
    addresses = set(re.findall(r"\b\d{1,3}(?:\.\d{1,3}){3}\b", text))
    assert addresses == {"127.0.0.1"}, addresses
    # Each listener its own port, from the environment (the test picks free ones).
    ports = re.findall(r"127\.0\.0\.1:\$\{(\w+):\?\}", text)
    assert {"KAFKA_PORT", "CONTROLLER_PORT", "S3_PORT", "API_PORT"} <= set(ports)
    assert "0.0.0.0" in " ".join(compose["services"]["api"]["command"])  # replaced here by 127.0.0.1
    assert "127.0.0.1" in services["api"]["command"]


def test_every_mvs_command_parses(compose: dict[str, Any]) -> None:
    parser = build_parser()
    for name, service in mvs_services(compose).items():
        command = service.get("command")
        if command is None:
            continue  # the cli service: the command comes from `docker compose run`
        args = parser.parse_args(command)  # exits (a failure) on an unknown command or option
        assert callable(args.func), name


def _sources() -> str:
    return "\n".join(p.read_text() for p in (REPO_ROOT / "workers").rglob("*.py"))


def test_every_variable_is_one_mvs_reads(compose: dict[str, Any]) -> None:
    sources = _sources()
    for name, service in mvs_services(compose).items():
        for variable in service.get("environment", {}):
            assert re.match(r"^(MVS|AWS)_[A-Z0-9_]+$", variable), (name, variable)
            assert f'"{variable}"' in sources, f"{name}: {variable} is read nowhere in workers/"


def _command_port(command: list[str], option: str) -> int | None:
    return int(command[command.index(option) + 1]) if option in command else None


def test_health_checks_and_ports_are_the_ports_the_commands_listen_on(compose: dict[str, Any]) -> None:
    overrides = yaml.safe_load(DEFAULT_OVERRIDE.read_text())["services"]
    assert overrides["api"]["ports"], "the status page is published"
    for name, service in mvs_services(compose).items():
        service = {**service, "ports": overrides.get(name, {}).get("ports", [])}
        command = service.get("command") or []
        listening = _command_port(command, "--metrics-port") or _command_port(command, "--port")
        check = " ".join(service.get("healthcheck", {}).get("test", []))
        for port in re.findall(r"127\.0\.0\.1:(\d+)", check):
            assert int(port) == listening, f"{name}: health check on {port}, command listens on {listening}"
        for published in service.get("ports", []):
            assert int(str(published).rsplit(":", 1)[-1]) == listening, (name, published)


def test_the_image_copies_what_its_install_step_needs() -> None:
    dockerfile = (REPO_ROOT / DOCKERFILE).read_text()
    copied = {part for line in re.findall(r"^COPY (.+) \S+$", dockerfile, re.M) for part in line.split()}
    # pyproject's package data and the files mvs loads at run time (topics/, schemas/, the jar poms).
    for needed in ("pyproject.toml", "README.md", "workers", "schemas", "topics", "infra"):
        assert needed in copied, needed
    assert Path(REPO_ROOT / "infra" / "fetch_jars.sh").exists() and "infra/fetch_jars.sh" in dockerfile
    assert 'ENTRYPOINT ["mvs"]' in dockerfile
