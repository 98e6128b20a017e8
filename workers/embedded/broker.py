"""The embedded default: one real Apache Kafka broker (KRaft, combined broker+controller).

Runs the official broker jars that ``infra/fetch_jars.sh`` fetched from Maven Central
into ``.cache/jars/kafka``. Nothing here talks the Kafka protocol: it formats storage,
starts the JVM, waits until the broker says it has started and its port accepts
connections, and stops it with SIGTERM (a clean controlled shutdown).

``security="sasl_ssl"`` (``MVS_EMBEDDED_SECURITY=sasl_ssl`` for ``mvs broker``) starts it with a
TLS + SASL listener and the standard authorizer instead (``workers.embedded.security``).

    python -m workers.embedded.broker run      # foreground, Ctrl-C stops it
"""

from __future__ import annotations

import argparse
import os
import random
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from workers.config import CACHE_DIR, EMBEDDED_BOOTSTRAP, Settings
from workers.embedded.processes import run_until_signal, terminate
from workers.embedded.security import SECURITY_MODES, client_options, load_users, secure_properties

KAFKA_JARS = CACHE_DIR / "jars" / "kafka"
STARTED_LINE = "Kafka Server started"

_LOG4J2 = """\
<Configuration status="WARN">
  <Appenders>
    <File name="file" fileName="{log}"><PatternLayout pattern="[%d] %p %m (%c)%n"/></File>
  </Appenders>
  <Loggers>
    <Logger name="kafka" level="INFO"/><Logger name="org.apache.kafka" level="INFO"/>
    <Root level="WARN"><AppenderRef ref="file"/></Root>
  </Loggers>
</Configuration>
"""


class BrokerError(RuntimeError):
    pass


def free_port(avoid: Collection[int] = ()) -> int:
    """A port nothing is bound to, not in ``avoid``, below Linux's ephemeral range (32768+): a port
    from that range can become an outgoing connection's source port between this choice and the
    server's bind (1 start of a 3-broker cluster in 8 failed with "Address already in use")."""
    while True:
        port = random.randint(20000, 32767)
        if port in avoid:
            continue
        with socket.socket() as sock:
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:
                continue
        return port


def _port_open(port: int, host: str = "127.0.0.1") -> bool:
    with socket.socket() as sock:
        sock.settimeout(0.2)
        return sock.connect_ex((host, port)) == 0


@dataclass
class EmbeddedKafka:
    data_dir: Path
    port: int = 19092
    controller_port: int = 19093
    heap: str = "512m"
    # "none" (plaintext, no authorization) or "sasl_ssl" (see workers.embedded.security).
    security: str = "none"
    # sasl_ssl: user name → password; None reads <data dir>/users.json (DEV_USERS when absent).
    users: Mapping[str, str] | None = None
    # A node of a multi-broker cluster (``workers.embedded.kafka_cluster``): its id, the controller
    # quorum ("1@host:port,2@host:port,..."; None = this node alone), the cluster id every node is
    # formatted with, and the replication of Kafka's internal topics (offsets, transactions).
    node_id: int = 1
    voters: str | None = None
    cluster_id: str | None = None
    internal_replication: int = 1
    # The address clients reach it at (listeners and advertised listeners; plaintext only): another
    # network namespace's bridge address in the separate-hosts test.
    host: str = "127.0.0.1"
    # How long the controller waits for a broker's heartbeat before fencing it (None: Kafka's 9 s).
    # Longer keeps a lone broker serving while a Spark job starves its JVM of both cores, at a price:
    # restarted after kill -9, it cannot register again until its old session has run out.
    broker_session_timeout_ms: int | None = None
    _process: subprocess.Popen[bytes] | None = None

    def __post_init__(self) -> None:
        if self.security not in SECURITY_MODES:
            raise BrokerError(f"security must be one of {SECURITY_MODES}, got {self.security!r}")

    @property
    def bootstrap_servers(self) -> str:
        return f"{self.host}:{self.port}"

    @property
    def log_file(self) -> Path:
        return self.data_dir / "broker.log"

    def _classpath(self) -> str:
        if not (KAFKA_JARS / ".complete").exists():
            raise BrokerError(
                f"Kafka jars missing in {KAFKA_JARS}: run infra/setup.sh (or infra/fetch_jars.sh)"
            )
        return str(KAFKA_JARS / "*")

    @property
    def ca_location(self) -> Path:
        """The CA clients trust (``ssl.ca.location``) when ``security="sasl_ssl"``."""
        return self.data_dir / "tls" / "ca.pem"

    def client_options(self, user: str) -> dict[str, str]:
        """Kafka client options to connect as ``user`` (declared in the users); {} without security."""
        if self.security == "none":
            return {}
        return client_options(self.data_dir, user, load_users(self.data_dir, self.users)[user])

    def _write_config(self) -> Path:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        replication, min_isr = str(self.internal_replication), str(max(1, self.internal_replication - 1))
        props = {
            "process.roles": "broker,controller",
            "node.id": str(self.node_id),
            "controller.quorum.voters": self.voters or f"{self.node_id}@127.0.0.1:{self.controller_port}",
            "listeners": f"PLAINTEXT://{self.host}:{self.port},CONTROLLER://127.0.0.1:{self.controller_port}",
            "advertised.listeners": f"PLAINTEXT://{self.host}:{self.port}",
            "controller.listener.names": "CONTROLLER",
            "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
            "log.dirs": str(self.data_dir / "data"),
            "num.partitions": "1",
            "offsets.topic.replication.factor": replication,
            "offsets.topic.num.partitions": "10",
            "transaction.state.log.replication.factor": replication,
            "transaction.state.log.min.isr": min_isr,
            "transaction.state.log.num.partitions": "4",
            "share.coordinator.state.topic.replication.factor": replication,
            "share.coordinator.state.topic.min.isr": min_isr,
            # No reason to delay the first rebalance of a group: tests and the demo start at once.
            "group.initial.rebalance.delay.ms": "0",
            # Let tests and the demo use short session timeouts for fast failover.
            "group.min.session.timeout.ms": "1000",
            "group.consumer.min.session.timeout.ms": "1000",
            "group.consumer.min.heartbeat.interval.ms": "500",
            "log.cleaner.backoff.ms": "1000",
        }
        if self.broker_session_timeout_ms is not None:
            props["broker.session.timeout.ms"] = str(self.broker_session_timeout_ms)
        if self.security == "sasl_ssl":
            users = load_users(self.data_dir, self.users)
            props.update(secure_properties(self.data_dir, self.port, self.controller_port, users))
        path = self.data_dir / "server.properties"
        path.write_text("".join(f"{k}={v}\n" for k, v in props.items()))
        if self.security != "none":
            path.chmod(0o600)  # it holds the users' passwords (JAAS) and the keystore password
        (self.data_dir / "log4j2.xml").write_text(_LOG4J2.format(log=self.log_file))
        return path

    def _java(self, main: str, *args: str) -> list[str]:
        log4j = f"-Dlog4j2.configurationFile={self.data_dir / 'log4j2.xml'}"
        # C1 only: a dev broker starts quicker and spends less of a small machine's CPU compiling.
        return [
            "java",
            f"-Xmx{self.heap}",
            "-XX:+UseG1GC",
            "-XX:TieredStopAtLevel=1",
            log4j,
            "-cp",
            self._classpath(),
            main,
            *args,
        ]

    def new_cluster_id(self) -> str:
        """A fresh KRaft cluster id (Kafka's own ``random-uuid``)."""
        result = subprocess.run(
            self._java("kafka.tools.StorageTool", "random-uuid"), capture_output=True, text=True, check=True
        )
        return result.stdout.strip().splitlines()[-1]

    def start(self, timeout_s: float = 60.0) -> EmbeddedKafka:
        self.launch()
        self.wait_started(timeout_s)
        return self

    def launch(self) -> None:
        """Format the storage (first start) and start the JVM, without waiting: the nodes of a
        cluster start together, since none says it started before a quorum of controllers is up."""
        if _port_open(self.port, self.host):
            raise BrokerError(f"port {self.port} is already in use; is a broker already running?")
        config = self._write_config()
        if not (self.data_dir / "data" / "meta.properties").exists():
            cluster_id = self.cluster_id or self.new_cluster_id()
            subprocess.run(
                self._java("kafka.tools.StorageTool", "format", "-t", cluster_id, "-c", str(config)),
                capture_output=True,
                check=True,
            )
        out = open(self.data_dir / "broker.out", "ab")  # noqa: SIM115 - owned by the child process
        self._process = subprocess.Popen(
            self._java("kafka.Kafka", str(config)),
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )

    def wait_started(self, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            assert self._process is not None
            if self._process.poll() is not None:
                raise BrokerError(f"broker exited with {self._process.returncode}; see {self.log_file}")
            started = self.log_file.exists() and STARTED_LINE in self.log_file.read_text(errors="replace")
            if started and _port_open(self.port, self.host):
                return
            time.sleep(0.1)
        self.stop()
        raise BrokerError(f"broker did not start within {timeout_s}s; see {self.log_file}")

    def stop(self, timeout_s: float = 30.0) -> None:
        process, self._process = self._process, None
        terminate(process, timeout_s)

    def kill(self) -> None:
        """SIGKILL the broker's process group (kill -9: no controlled shutdown, no flush)."""
        process, self._process = self._process, None
        if process is None or process.poll() is not None:
            return
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()

    def __enter__(self) -> EmbeddedKafka:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def one_broker_settings(bootstrap_servers: str, prefix: str, root: Path, **overrides: Any) -> Settings:
    """Settings (from the environment) for roles on a one-node broker started here, as tests and
    benchmarks use it: replication 1, a fresh namespace ``<prefix><random>``, the warehouse under
    ``root`` and a 3 s group session so a dead member is noticed quickly; ``overrides`` win."""
    fields: dict[str, Any] = {
        "bootstrap_servers": bootstrap_servers,
        "embedded": False,
        "replication_factor": 1,
        "namespace": f"{prefix}{uuid.uuid4().hex[:8]}",
        "warehouse": str(root / "warehouse"),
        "session_timeout_ms": 3000,
    }
    return Settings.from_env(**{**fields, **overrides})


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m workers.embedded.broker")
    parser.add_argument("command", choices=["run"])
    parser.add_argument("--data-dir", type=Path, default=CACHE_DIR / "kafka")
    parser.add_argument("--port", type=int, default=int(EMBEDDED_BOOTSTRAP.rsplit(":", 1)[1]))
    parser.add_argument(
        "--security", choices=SECURITY_MODES, default=os.environ.get("MVS_EMBEDDED_SECURITY", "none")
    )
    args = parser.parse_args(argv)
    broker = EmbeddedKafka(
        args.data_dir, port=args.port, controller_port=args.port + 1, security=args.security
    ).start()
    print(f"kafka broker serving on {broker.bootstrap_servers} (log: {broker.log_file})", flush=True)
    if broker.security != "none":
        print(
            f"SASL_SSL: users in {args.data_dir / 'users.json'}; clients set "
            "MVS_KAFKA_SECURITY_PROTOCOL=SASL_SSL "
            f"MVS_KAFKA_SASL_MECHANISM=PLAIN MVS_KAFKA_SASL_USERNAME=... MVS_KAFKA_SASL_PASSWORD=... "
            f"MVS_KAFKA_SSL_CA_LOCATION={broker.ca_location}",
            flush=True,
        )
    run_until_signal(lambda: broker._process is not None and broker._process.poll() is None)
    broker.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
