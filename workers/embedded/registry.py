"""A real schema registry for tests and the demo: Apicurio Registry 3.0.9 (Java 17).

Runs the app ``infra/setup_registry.sh`` fetched from Maven Central into ``.cache/registry/app``.
Its Confluent-compatible API (what mvs's registry client speaks) is under ``/apis/ccompat/v7``.
Schemas are kept in a Kafka topic of the broker it is given (``apicurio.storage.kind=kafkasql``):
nothing on local disk, and a restarted registry has every schema and id back. Without a broker it
keeps them in memory. Nothing here talks HTTP beyond the readiness probe.

    python -m workers.embedded.registry run --bootstrap 127.0.0.1:19092
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from workers.config import CACHE_DIR, EMBEDDED_BOOTSTRAP
from workers.embedded.broker import free_port
from workers.embedded.processes import run_until_signal, terminate

REGISTRY_HOME = CACHE_DIR / "registry" / "app"
REGISTRY_JAR = REGISTRY_HOME / "apicurio-registry-app-3.0.9-runner.jar"
CCOMPAT_PATH = "/apis/ccompat/v7"
# The topic holding the registry's schemas when they are kept in Kafka (Apicurio's default name).
JOURNAL_TOPIC = "kafkasql-journal"


class RegistryError(RuntimeError):
    pass


@dataclass
class EmbeddedRegistry:
    data_dir: Path
    port: int = 0  # 0: a free port
    # Where the schemas are kept: a Kafka cluster (kafkasql storage), or None for memory only.
    bootstrap_servers: str | None = None
    heap: str = "384m"
    _process: subprocess.Popen[bytes] | None = None

    def __post_init__(self) -> None:
        if self.port == 0:
            self.port = free_port()

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def url(self) -> str:
        """What ``MVS_SCHEMA_REGISTRY_URL`` is set to: the Confluent-compatible API."""
        return self.base_url + CCOMPAT_PATH

    @property
    def log_file(self) -> Path:
        return self.data_dir / "registry.log"

    @property
    def storage(self) -> str:
        return "kafkasql" if self.bootstrap_servers else "mem"

    def _command(self) -> list[str]:
        if not REGISTRY_JAR.exists():
            raise RegistryError(f"schema registry missing ({REGISTRY_JAR}): run infra/setup_registry.sh")
        props = {
            "quarkus.http.host": "127.0.0.1",
            "quarkus.http.port": str(self.port),
            "apicurio.storage.kind": self.storage,
            "quarkus.log.level": "WARN",
            'quarkus.log.category."io.apicurio".level': "INFO",
        }
        if self.bootstrap_servers:
            props["apicurio.kafkasql.bootstrap.servers"] = self.bootstrap_servers
            props["apicurio.kafkasql.topic"] = JOURNAL_TOPIC
        flags = [f"-D{key}={value}" for key, value in props.items()]
        return ["java", f"-Xmx{self.heap}", "-XX:+UseSerialGC", *flags, "-jar", str(REGISTRY_JAR)]

    def ready(self) -> bool:
        """The Confluent-compatible API answers (storage bootstrapped, HTTP up)."""
        try:
            with urllib.request.urlopen(self.url + "/subjects", timeout=1.0) as answer:
                return int(answer.status) == 200
        except (OSError, urllib.error.URLError):
            return False

    def start(self, timeout_s: float = 120.0) -> EmbeddedRegistry:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        out = open(self.log_file, "ab")  # noqa: SIM115 - owned by the child process
        self._process = subprocess.Popen(
            self._command(), stdout=out, stderr=subprocess.STDOUT, start_new_session=True
        )
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self._process.poll() is not None:
                raise RegistryError(f"registry exited with {self._process.returncode}; see {self.log_file}")
            if self.ready():
                return self
            time.sleep(0.25)  # polling a JVM's start-up: there is nothing to wait on but the port
        self.stop()
        raise RegistryError(f"registry not ready within {timeout_s}s; see {self.log_file}")

    def stop(self, timeout_s: float = 30.0) -> None:
        process, self._process = self._process, None
        terminate(process, timeout_s)

    def __enter__(self) -> EmbeddedRegistry:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m workers.embedded.registry")
    parser.add_argument("command", choices=["run"])
    parser.add_argument("--data-dir", type=Path, default=CACHE_DIR / "registry-run")
    parser.add_argument("--port", type=int, default=8081)
    parser.add_argument(
        "--bootstrap",
        default=os.environ.get("MVS_BOOTSTRAP_SERVERS", EMBEDDED_BOOTSTRAP),
        help="Kafka cluster keeping the schemas ('' keeps them in memory)",
    )
    args = parser.parse_args(argv)
    registry = EmbeddedRegistry(args.data_dir, port=args.port, bootstrap_servers=args.bootstrap or None)
    registry.start()
    print(f"schema registry serving on {registry.url} (log: {registry.log_file})", flush=True)
    print(f"set MVS_SCHEMA_REGISTRY_URL={registry.url}", flush=True)
    run_until_signal(lambda: registry._process is not None and registry._process.poll() is None)
    registry.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
