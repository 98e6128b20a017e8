"""Real mvs processes for the fleet tests and the failover benchmark.

Each role runs as ``python -m workers.cli coordinator|worker`` in its own session (process
group), so its Spark JVM — a child of the Python process — shares its fate: ``kill()`` is a
machine dying (SIGKILL to the whole group), ``freeze()``/``thaw()`` stop and continue the whole
group (a worker that hangs, then wakes up), ``terminate()`` is an orderly SIGTERM to the Python
process only, which shuts its JVM down itself.

``Tail`` follows a topic from the test process, so conditions on run records and heartbeats are
checked as records arrive instead of re-reading topics.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from workers.config import REPO_ROOT, Settings
from workers.kafka.admin import apply_topics
from workers.kafka.typed import Message, TypedConsumer
from workers.records import Record
from workers.topics import topic_spec


def role_env(settings: Settings, name: str, extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment a role process reads its Settings from (``Settings.from_env``)."""
    # The test's own MVS_ settings are not inherited (the roles get exactly ``settings``), but for the
    # log level a person debugging a test asks for.
    env = {k: v for k, v in os.environ.items() if not k.startswith("MVS_") or k == "MVS_LOG_LEVEL"}
    env.update(
        {
            "MVS_BOOTSTRAP_SERVERS": settings.bootstrap_servers,
            "MVS_WAREHOUSE": settings.warehouse,
            "MVS_NAMESPACE": settings.namespace,
            "MVS_SESSION_TIMEOUT_MS": str(settings.session_timeout_ms),
            "MVS_MAX_POLL_INTERVAL_MS": str(settings.max_poll_interval_ms),
            "MVS_HEARTBEAT_TIMEOUT_S": str(settings.heartbeat_timeout_s),
            "MVS_GROUP_PROTOCOL": settings.group_protocol,
            "MVS_SPARK_JAVA_OPTIONS": settings.spark_java_options,
            "MVS_WORKER_ID": name,
            # The history tables' sink costs every worker JVM a Delta write per flush; its own test
            # (test_history_tables.py) runs it, the fleet tests do not pay for it.
            "MVS_HISTORY_TABLES": "0",
            "PYTHONUNBUFFERED": "1",
        }
    )
    env.update(settings.storage.environment())
    if settings.schema_registry_url:
        env["MVS_SCHEMA_REGISTRY_URL"] = settings.schema_registry_url
    if settings.replication_factor:
        env["MVS_REPLICATION_FACTOR"] = str(settings.replication_factor)
    for key, value in settings.kafka_options.items():
        env["MVS_KAFKA_" + key.upper().replace(".", "_")] = value
    env.update(extra or {})
    return env


@dataclass
class Role:
    """One running role process."""

    name: str
    kind: str  # coordinator | worker
    process: subprocess.Popen[bytes]
    log_path: Path
    started_at: float = field(default_factory=time.monotonic)

    @property
    def pid(self) -> int:
        return self.process.pid

    @property
    def alive(self) -> bool:
        return self.process.poll() is None

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def _group_signal(self, sig: signal.Signals) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.pid, sig)  # the process is its group's leader (start_new_session)

    def kill(self) -> None:
        """SIGKILL the process and its JVM at once: no revoke, no goodbye."""
        self._group_signal(signal.SIGKILL)
        self.process.wait(30)

    def freeze(self) -> None:
        self._group_signal(signal.SIGSTOP)

    def thaw(self) -> None:
        self._group_signal(signal.SIGCONT)

    def sigterm(self) -> None:
        """Ask the role to stop (its orderly shutdown); ``process.wait()`` for the exit."""
        self.process.send_signal(signal.SIGTERM)

    def terminate(self, timeout_s: float = 60.0) -> int:
        """SIGTERM the Python process (the role's orderly shutdown) and wait for it to exit."""
        self.process.send_signal(signal.SIGTERM)
        try:
            return self.process.wait(timeout_s)
        finally:
            self._group_signal(signal.SIGKILL)  # a JVM left behind, if any

    def close(self) -> None:
        """Whatever state it is in (even frozen): gone."""
        if self.alive:
            self._group_signal(signal.SIGKILL)
            self.thaw()
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.process.wait(30)
        else:
            self._group_signal(signal.SIGKILL)


class Fleet:
    """Role processes of one namespace; ``close()`` kills every one it started."""

    def __init__(
        self, settings: Settings, log_dir: Path, *, env: Mapping[str, str] | None = None, verbose: bool = True
    ) -> None:
        self.settings = settings
        self.log_dir = log_dir
        self.env = dict(env or {})
        self.verbose = verbose
        self.roles: list[Role] = []
        log_dir.mkdir(parents=True, exist_ok=True)
        apply_topics(settings)

    def start(self, kind: str, name: str, *args: str, prefix: Sequence[str] = ()) -> Role:
        """Start a role; ``prefix`` wraps its command (``ip netns exec <ns>``: another host)."""
        log_path = self.log_dir / f"{name}.log"
        cli = [sys.executable, "-m", "workers.cli", *(["-v"] if self.verbose else []), kind, *args]
        command = [*prefix, *cli]
        with open(log_path, "ab") as out:
            process = subprocess.Popen(
                command,
                cwd=REPO_ROOT,
                env=role_env(self.settings, name, self.env),
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )
        role = Role(name, kind, process, log_path)
        self.roles.append(role)
        return role

    def coordinator(self, name: str = "coordinator") -> Role:
        return self.start("coordinator", name)

    def worker(self, name: str, *, prefix: Sequence[str] = ()) -> Role:
        return self.start("worker", name, prefix=prefix)

    def role(self, name: str) -> Role:
        return next(r for r in self.roles if r.name == name)

    def close(self) -> None:
        for role in self.roles:
            role.close()

    def logs(self) -> str:
        """Every role's log, for a failing test's report."""
        return "\n".join(f"===== {r.name} (pid {r.pid}) =====\n{r.log()[-20000:]}" for r in self.roles)


class Tail:
    """Follows one topic from its beginning; ``poll()`` appends what has arrived to ``records``."""

    def __init__(self, settings: Settings, topic: str) -> None:
        self.topic = topic
        self.records: list[Record] = []
        self.messages: list[Message] = []
        self._consumer = TypedConsumer(settings, dead_letters=False)
        self._consumer.assign(topic, list(range(topic_spec(topic).partitions)), from_beginning=True)

    def poll(self, budget_s: float = 0.2) -> list[Record]:
        """Drain whatever is available within ``budget_s``; returns the new records."""
        new: list[Record] = []
        deadline = time.monotonic() + budget_s
        while True:
            message = self._consumer.poll(max(0.0, min(0.05, deadline - time.monotonic())))
            if message is not None:
                self.messages.append(message)
                if message.value is not None:
                    self.records.append(message.value)
                    new.append(message.value)
                continue
            if time.monotonic() >= deadline:
                return new

    def __iter__(self) -> Iterator[Record]:
        return iter(self.records)

    def close(self) -> None:
        self._consumer.close()
