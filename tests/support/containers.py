"""The container test's harness: the project's Docker daemon and images (infra/setup_containers.sh,
infra/dockerd.sh), and one Compose project of docker-compose.yml on the host network
(infra/compose.host-network.yml), each service on a free 127.0.0.1 port."""

from __future__ import annotations

import json
import os
import subprocess
import tempfile
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import yaml

from tests.support.fleet import step
from tests.support.image_build import ImageBuild
from workers.config import REPO_ROOT, Settings
from workers.embedded.broker import free_port

COMPOSE_FILES = (REPO_ROOT / "docker-compose.yml", REPO_ROOT / "infra" / "compose.host-network.yml")
# Debian's client, the daemon's own version, before any other on PATH.
DOCKER = "/usr/bin/docker" if os.path.exists("/usr/bin/docker") else "docker"
PORTS = (
    "KAFKA_PORT",
    "CONTROLLER_PORT",
    "S3_PORT",
    "API_PORT",
    "COORDINATOR_METRICS_PORT",
    "STANDBY_METRICS_PORT",
)


def run(command: Sequence[str], *, env: dict[str, str] | None = None, timeout_s: float = 600) -> str:
    """``command``'s stdout; its stderr in the failure when it exits non-zero."""
    done = subprocess.run(
        list(command), cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=timeout_s
    )
    assert done.returncode == 0, f"{' '.join(command)} exited {done.returncode}:\n{done.stdout}{done.stderr}"
    return done.stdout


def _compose_command() -> list[str]:
    """Compose v2 (the ``docker compose`` plugin) where the client has it, else Debian's docker-compose."""
    plugin = subprocess.run([DOCKER, "compose", "version"], capture_output=True)
    return [DOCKER, "compose"] if plugin.returncode == 0 else ["docker-compose"]


class LogFollower:
    """``docker logs --follow`` into a file: what a container said until it was removed."""

    def __init__(self, command: list[str], env: dict[str, str]) -> None:
        self._file = tempfile.TemporaryFile()  # noqa: SIM115 - the follower writes it until read()
        self._process = subprocess.Popen(command, env=env, stdout=self._file, stderr=subprocess.STDOUT)

    def read(self, timeout_s: float = 60) -> str:
        """Everything, once the container has stopped (the follow ends with it)."""
        self._process.wait(timeout_s)
        self._file.seek(0)
        text = self._file.read().decode(errors="replace")
        self._file.close()
        return text


@dataclass(frozen=True)
class Container:
    id: str
    name: str
    service: str
    number: int
    running: bool


@dataclass
class ComposeFleet:
    """One Compose project: ``compose(...)`` runs docker compose on it, ``docker(...)`` the client."""

    host: str  # DOCKER_HOST of the project's daemon
    project: str = field(default_factory=lambda: f"mvstest{uuid.uuid4().hex[:8]}")
    ports: dict[str, int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        taken: list[int] = []
        for name in PORTS:
            taken.append(free_port(avoid=taken))
            self.ports[name] = taken[-1]
        self._compose = _compose_command()

    @property
    def env(self) -> dict[str, str]:
        # The test's own MVS_ settings stay out of the compose file's variables.
        env = {k: v for k, v in os.environ.items() if not k.startswith("MVS_")}
        return {**env, "DOCKER_HOST": self.host, **{k: str(v) for k, v in self.ports.items()}}

    def docker(self, *args: str, timeout_s: float = 300) -> str:
        return run([DOCKER, *args], env=self.env, timeout_s=timeout_s)

    def compose(self, *args: str, timeout_s: float = 600) -> str:
        files = [part for path in COMPOSE_FILES for part in ("-f", str(path))]
        return run([*self._compose, "-p", self.project, *files, *args], env=self.env, timeout_s=timeout_s)

    def sql(self, statement: str) -> str:
        """``docker compose run --rm cli sql …``: the user's way to publish DDL (``--no-deps``: the
        fleet is up; without it compose runs the one-shot ``topics`` and ``bucket`` again first)."""
        return self.compose("run", "--rm", "--no-deps", "cli", "sql", statement, timeout_s=180)

    def containers(self, service: str | None = None) -> list[Container]:
        label = f"label=com.docker.compose.project={self.project}"
        ids = self.docker("ps", "-aq", "--filter", label).split()
        if not ids:
            return []
        found = []
        for item in json.loads(self.docker("inspect", *ids)):
            labels = item["Config"]["Labels"]
            found.append(
                Container(
                    id=item["Id"],
                    name=item["Name"].lstrip("/"),
                    service=labels["com.docker.compose.service"],
                    number=int(labels.get("com.docker.compose.container-number", "1")),
                    running=item["State"]["Running"],
                )
            )
        return sorted((c for c in found if service in (None, c.service)), key=lambda c: (c.service, c.number))

    def logs(self, container: Container) -> str:
        done = subprocess.run(
            [DOCKER, "logs", container.id], env=self.env, capture_output=True, text=True, timeout=60
        )
        return done.stdout + done.stderr

    def follow_logs(self, container: Container) -> LogFollower:
        return LogFollower([DOCKER, "logs", "--follow", container.id], self.env)

    def watch_exit(self, container: Container) -> subprocess.Popen[str]:
        """``docker wait``: prints the container's exit code when it stops, even if it is then removed."""
        command = [DOCKER, "wait", container.id]
        return subprocess.Popen(command, env=self.env, stdout=subprocess.PIPE, text=True)

    def exit_code(self, container: Container) -> int:
        return int(self.docker("inspect", "--format", "{{.State.ExitCode}}", container.id).strip())

    def leftovers(self) -> dict[str, list[str]]:
        """Containers, networks and volumes of the project still there."""
        label = f"label=com.docker.compose.project={self.project}"
        return {
            kind: self.docker(*command, "--filter", label).split()
            for kind, command in (
                ("containers", ("ps", "-aq")),
                ("networks", ("network", "ls", "-q")),
                ("volumes", ("volume", "ls", "-q")),
            )
        }

    def settings(self) -> Settings:
        """What a client on the host uses: the compose file's mvs environment, with the host-network
        override's addresses."""
        compose = yaml.safe_load(COMPOSE_FILES[0].read_text())
        env: dict[str, Any] = dict(compose["x-mvs"]["environment"])
        env["MVS_BOOTSTRAP_SERVERS"] = f"127.0.0.1:{self.ports['KAFKA_PORT']}"
        env["MVS_S3_ENDPOINT"] = f"http://127.0.0.1:{self.ports['S3_PORT']}"
        return Settings.from_env({k: str(v) for k, v in env.items()})


def project_engine(build_timeout_s: float) -> Iterator[str]:
    """The project's daemon with the images built (infra/setup_containers.sh, started in the background
    when the session collected this test; see tests/support/image_build.py): its DOCKER_HOST. Stops
    the daemon at the end if the build started it."""
    build = ImageBuild.of_session()
    build.start()  # a no-op when the session already has
    try:
        for line in build.wait(build_timeout_s).splitlines():
            step(f"setup_containers: {line}")
        yield run(["bash", "infra/dockerd.sh", "host"]).strip()
    finally:
        build.end()
