"""The Python client: publish DDL events and read the control plane back.

    from workers.client import MvsClient
    client = MvsClient(Settings.from_env())
    result = client.execute("CREATE MATERIALIZED VIEW v REFRESH COMPLETE EVERY 30 SECONDS AS SELECT ...")
    client.tasks()      # the catalog
    client.history("mv:v")

The CLI (`mvs`) is a thin shell over this class. Any Kafka producer that writes the DdlEvent
Avro schema to the DDL topic does the same as ``publish``.

Every call first probes the broker within its ``timeout_s`` (a broker down or silent, refused
credentials, a missing topic) and then keeps its Kafka calls to what is left; it fails with a typed
``MvsClientError`` carrying a seed-002 code: ``BrokerUnavailable`` / ``AuthenticationFailed`` /
``NotAuthorized`` (3001), ``TopicNotFound`` (1003), ``StatementError`` (1001), ``DdlTimeout`` (3001).
A broker that vanishes in the middle of a call can still hold it up to the bus package's own request
timeouts; the CLI adds a watchdog so a command never outlives its ``--timeout``.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TypeVar

from workers.catalog.errors import ErrorCode
from workers.config import DEFAULT_CLIENT_TIMEOUT_S, Settings
from workers.ddl.parser import parse_statement
from workers.kafka.probe import AuthenticationFailed as BusAuthenticationFailed
from workers.kafka.probe import BrokerUnreachable, TopicMissing, bounded, probe, producer_options
from workers.kafka.typed import BusError, Message, TypedConsumer, TypedProducer, latest_by_key, read_to_end
from workers.records import Record
from workers.task_view import with_newest_runs
from workers.topics import TopicConfigError, ddl_topic

T = TypeVar("T")
RECENT_HEARTBEATS = 2000  # enough to hold every live worker's newest heartbeat
RECENT_RUNS = 2000  # per partition: runs the catalog may not have heard of yet are among the newest
_AUTHORIZATION_CODES = frozenset(
    {"TOPIC_AUTHORIZATION_FAILED", "GROUP_AUTHORIZATION_FAILED", "CLUSTER_AUTHORIZATION_FAILED"}
)


class MvsClientError(Exception):
    """A client call failed; ``code`` is the seed-002 error code, ``str()`` one line for the user."""

    code: int = int(ErrorCode.BUS_UNAVAILABLE)

    def __init__(self, message: str, *, code: int | None = None) -> None:
        super().__init__(" ".join(message.split()))
        if code is not None:
            self.code = code


class BrokerUnavailable(MvsClientError):
    """No broker answered within the timeout."""


class AuthenticationFailed(MvsClientError):
    """The broker refused the SASL credentials or the TLS handshake."""


class NotAuthorized(MvsClientError):
    """The principal may not read (or write) a topic or describe a group the call needs."""


class TopicNotFound(MvsClientError):
    """A topic is missing: the namespace was never applied (``mvs topics apply``)."""

    code = int(ErrorCode.NOT_FOUND)


class StatementError(MvsClientError):
    """The statement is not valid DDL (nothing was published)."""

    code = int(ErrorCode.INVALID_CONFIG)


class DdlTimeout(MvsClientError, TimeoutError):
    """The event was published but no coordinator answered in time (it may still apply it)."""


def client_error(exc: BusError) -> MvsClientError:
    """The typed client error for a bus failure."""
    if isinstance(exc, BusAuthenticationFailed):
        return AuthenticationFailed(str(exc))
    if isinstance(exc, TopicMissing):
        return TopicNotFound(str(exc))
    if exc.code in _AUTHORIZATION_CODES:
        return NotAuthorized(str(exc))
    if isinstance(exc, BrokerUnreachable):
        return BrokerUnavailable(str(exc))
    return BrokerUnavailable(f"{exc}")


class Deadline:
    """The time left of one call."""

    def __init__(self, timeout_s: float) -> None:
        self.timeout_s = timeout_s
        self._end = time.monotonic() + timeout_s

    def remaining(self, floor_s: float = 0.1) -> float:
        return max(floor_s, self._end - time.monotonic())

    @property
    def passed(self) -> bool:
        return time.monotonic() >= self._end


@contextmanager
def _bus_errors() -> Iterator[None]:
    try:
        yield
    except BusError as exc:
        raise client_error(exc) from exc


def parse(sql: str, *, issued_by: str) -> Record:
    """The DdlEvent of one statement, or ``StatementError`` (whatever the parser raised)."""
    from workers.ddl.errors import DdlError

    try:
        return parse_statement(sql, issued_by=issued_by)
    except DdlError as exc:
        raise StatementError(str(exc)) from exc
    except RecursionError as exc:
        raise StatementError("statement is nested too deeply to parse") from exc
    except (ValueError, TypeError) as exc:  # a parser bug must not look like a bus failure
        raise StatementError(f"statement could not be parsed: {exc}") from exc


def task_id_of(name: str) -> str:
    """The task id a user means by ``name``: an MV's name (``v`` → ``mv:v``) or a task id itself."""
    return name if ":" in name else f"mv:{name}"


@dataclass(frozen=True)
class StatusSnapshot:
    """What ``mvs status`` and ``GET /mvs`` show: the catalog (brought up to the newest run records:
    ``workers.task_view``), the live roles (role name → the partitions it holds), each role's last
    loop error, the DDL records no coordinator has applied yet, the newest Delta version of every
    base table an MV reads (None: no table or unreadable), and what could not be read (``notes``)."""

    tasks: dict[str, Record]
    coordinators: dict[str, list[int]]
    workers: dict[str, list[int]]
    loop_errors: dict[str, str | None]
    versions: dict[str, int | None]
    notes: list[str]
    at_ms: int
    ddl_lag: int | None = None  # DDL records no coordinator has applied yet (None: unknown)

    def latest_version(self, table: str) -> int | None:
        return self.versions.get(table)


@dataclass(frozen=True)
class HistorySnapshot:
    """What ``mvs history`` and ``GET /mvs/{name}/history`` show: runs and DDL entries (None: that
    part could not be read, ``notes`` say why)."""

    task_id: str | None
    runs: list[Record] | None
    ddl: list[Record] | None
    runs_note: str | None = None
    ddl_note: str | None = None

    @property
    def notes(self) -> list[str]:
        return [note for note in (self.runs_note, self.ddl_note) if note]


class MvsClient:
    def __init__(
        self, settings: Settings, *, issued_by: str = "mvs-client", quiet_kafka_logs: bool = False
    ) -> None:
        self.settings = settings
        self.issued_by = issued_by
        self.quiet_kafka_logs = quiet_kafka_logs
        self._producer: TypedProducer | None = None
        self._producer_timeout_s: float | None = None

    def connect(
        self, deadline: Deadline, *, reads: Sequence[str] = (), writes: Sequence[str] = ()
    ) -> Settings:
        """Settings whose clients keep to ``deadline``, after checking that the broker answers, has
        the topics and lets us read ``reads`` and write ``writes`` (logical names): a down broker,
        refused credentials or a missing ACL surface here, typed, instead of as silent retries."""
        settings = bounded(self.settings, deadline.timeout_s, quiet=self.quiet_kafka_logs)
        with _bus_errors():
            probe(
                settings,
                deadline.remaining(),
                reads=[settings.topic(t) for t in reads],
                writes=[settings.topic(t) for t in writes],
            )
        return settings

    def _producer_for(self, settings: Settings, timeout_s: float) -> TypedProducer:
        if self._producer is None or self._producer_timeout_s != timeout_s:
            self.close()
            self._producer = TypedProducer(settings, config=producer_options(timeout_s))
            self._producer_timeout_s = timeout_s
        return self._producer

    def publish(self, event: Record, *, timeout_s: float = DEFAULT_CLIENT_TIMEOUT_S) -> str:
        """Publish one DdlEvent; returns its event id. With ``MVS_DDL_INBOX=1`` it goes to this
        principal's inbox, and the coordinator sets ``issued_by`` (README "Security")."""
        deadline = Deadline(timeout_s)
        settings = self.connect(deadline, writes=[self._ddl_topic()])
        self._send(settings, event, deadline)
        return str(event["event_id"])

    def _send(self, settings: Settings, event: Record, deadline: Deadline) -> None:
        producer = self._producer_for(settings, deadline.timeout_s)
        with _bus_errors():
            producer.send(self._ddl_topic(), event["name"], event)
            producer.flush(deadline.remaining())

    def _ddl_topic(self) -> str:
        try:
            return ddl_topic(self.settings)
        except TopicConfigError as exc:
            raise MvsClientError(str(exc), code=int(ErrorCode.INVALID_CONFIG)) from exc

    def execute(self, sql: str, *, wait: bool = True, timeout_s: float = 60.0) -> Record | None:
        """Parse and publish one DDL statement; with ``wait``, return the coordinator's DdlResult.
        Raises ``StatementError`` before touching the broker, and at most ``timeout_s`` later
        ``BrokerUnavailable`` / ``AuthenticationFailed`` / ``TopicNotFound`` / ``DdlTimeout``."""
        event = parse(sql, issued_by=self.issued_by)
        deadline = Deadline(timeout_s)
        settings = self.connect(deadline, writes=[self._ddl_topic()], reads=["ddl.results"] if wait else [])
        if not wait:
            self._send(settings, event, deadline)
            return None
        # Subscribe to the results before publishing, so the answer cannot slip past us.
        results = TypedConsumer(settings, group_id=None)
        try:
            with _bus_errors():
                results.assign("ddl.results", [0], from_beginning=False)
                results.poll(0)
                self._send(settings, event, deadline)
                while not deadline.passed:
                    message = results.poll(min(0.2, deadline.remaining()))
                    if (
                        message is not None
                        and message.value is not None
                        and message.value["event_id"] == event["event_id"]
                    ):
                        return message.value
        finally:
            results.close()
        raise DdlTimeout(
            f"no answer from a coordinator within {timeout_s:g}s (is `mvs coordinator` running? "
            "the statement was published and may still be applied)"
        )

    def _read(self, topic: str, deadline: Deadline, *, last: int | None = None) -> list[Message]:
        settings = self.connect(deadline, reads=[topic])
        with _bus_errors():
            return read_to_end(settings, topic, timeout_s=deadline.remaining(), last=last)

    def tasks(self, *, timeout_s: float = DEFAULT_CLIENT_TIMEOUT_S) -> dict[str, Record]:
        """The catalog: the live tasks (the last record per task id; a tombstone removes)."""
        messages = self._read("catalog", Deadline(timeout_s))
        return {key: m.value for key, m in latest_by_key(messages).items() if m.value is not None}

    def shown_tasks(
        self, *, timeout_s: float = DEFAULT_CLIENT_TIMEOUT_S
    ) -> tuple[dict[str, Record], str | None]:
        """The catalog as the views show it: brought up to the newest run records
        (``workers.task_view``), and a note when the runs could not be read (then it is the catalog)."""
        deadline = Deadline(timeout_s)
        tasks = self.tasks(timeout_s=deadline.remaining())
        try:  # read after the catalog: a run it has not heard of yet is among these
            recent = self._read("runs", Deadline(deadline.remaining()), last=RECENT_RUNS)
        except MvsClientError as exc:
            return tasks, f"runs: {exc}"
        return with_newest_runs(tasks, [m.value for m in recent if m.value is not None]), None

    def ddl_lag(self, *, timeout_s: float = DEFAULT_CLIENT_TIMEOUT_S) -> int:
        """DDL records published that no coordinator has applied yet: the DDL topic's end offset less
        the coordinator group's committed one (it commits each record with the effects it applied)."""
        deadline = Deadline(timeout_s)
        settings = self.connect(deadline, reads=["ddl"])
        with _bus_errors(), TypedConsumer(settings, group_id=self.settings.group("coordinator")) as consumer:
            low, high = consumer.end_offsets("ddl", [0])[0]
            committed = consumer.committed("ddl", [0], timeout_s=deadline.remaining())[0]
        return max(0, high - (low if committed is None else committed))

    def loop_errors(self, *, timeout_s: float = DEFAULT_CLIENT_TIMEOUT_S) -> dict[str, str | None]:
        """Role name → the last error its loop survived (None: none), from each worker's and each
        coordinator's newest heartbeat among the recent ones (both send one every few seconds)."""
        messages = self._read("coordinator", Deadline(timeout_s), last=RECENT_HEARTBEATS)
        return {key: (m.value or {}).get("loop_error") for key, m in latest_by_key(messages).items()}

    def history(
        self, task_id: str | None = None, limit: int = 50, *, timeout_s: float = DEFAULT_CLIENT_TIMEOUT_S
    ) -> list[Record]:
        """Run records, newest last; the latest record per run id wins (RUNNING → COMPLETED)."""
        runs: dict[str, Record] = {}
        for message in self._read("runs", Deadline(timeout_s)):
            record = message.value
            if record is not None and (task_id is None or record["task_id"] == task_id):
                runs[record["run_id"]] = record
        ordered = sorted(runs.values(), key=lambda r: (r["started_at"], r["ended_at"] or 0))
        return ordered[-limit:]

    def ddl_history(
        self, task_id: str | None = None, limit: int = 50, *, timeout_s: float = DEFAULT_CLIENT_TIMEOUT_S
    ) -> list[Record]:
        """Every DDL event with the coordinator's answer: the task's lifecycle, refusals included."""
        deadline = Deadline(timeout_s)
        answers = {m.value["event_id"]: m.value for m in self._read("ddl.results", deadline) if m.value}
        return self._ddl_entries(self._read("ddl", deadline), answers, task_id, limit)

    @staticmethod
    def _ddl_entries(
        events: list[Message], answers: dict[str, Record], task_id: str | None, limit: int
    ) -> list[Record]:
        entries = []
        for message in events:
            event = message.value
            answer = answers.get(event["event_id"]) if event else None
            if event is None or (task_id is not None and (answer or {}).get("task_id") != task_id):
                continue
            entries.append(
                {
                    "at": event["issued_at"],
                    "action": event["action"],
                    "name": event["name"],
                    "sql": event["sql"],
                    "issued_by": event["issued_by"],
                    "answer": answer,
                }
            )
        return entries[-limit:]

    def status_snapshot(self, *, timeout_s: float = DEFAULT_CLIENT_TIMEOUT_S) -> StatusSnapshot:
        """The catalog (which must be readable), then what can be read of the rest: a group this
        principal may not describe, or an unreadable warehouse, is a note instead of a failure."""
        from workers.kafka.admin import group_owners
        from workers.warehouse import latest_version

        deadline = Deadline(timeout_s)
        tasks, runs_note = self.shown_tasks(timeout_s=deadline.remaining())
        notes: list[str] = [runs_note] if runs_note else []
        checked = self.connect(Deadline(deadline.remaining()))
        owners: list[dict[str, list[int]]] = []
        for role in ("coordinator", "workers"):
            try:
                group = self.settings.group(role)
                owners.append(group_owners(checked, group, strict=True, timeout_s=deadline.remaining()))
            except BusError as exc:
                notes.append(f"roles: {exc}")
                owners.append({})
        versions: dict[str, int | None] = {}
        reachable = True
        for table in sorted({b for t in tasks.values() if t.get("mv") for b in t["mv"]["base_tables"]}):
            versions[table] = None
            if not reachable:
                continue  # one failed look says it: a status answers now, not after a wait per table
            try:
                versions[table] = latest_version(self.settings, table, quick=True)
            except (OSError, NotImplementedError) as exc:  # NotImplementedError: a remote warehouse
                reachable = False
                notes.append(f"lag: cannot read the warehouse: {exc}")
        loop_errors: dict[str, str | None] = {}
        if owners[0] or owners[1]:
            try:
                loop_errors = self.loop_errors(timeout_s=deadline.remaining())
            except MvsClientError as exc:
                notes.append(f"loop errors: {exc}")
        ddl_lag: int | None = None
        try:
            ddl_lag = self.ddl_lag(timeout_s=deadline.remaining())
        except MvsClientError as exc:
            notes.append(f"ddl lag: {exc}")
        at_ms = time.time_ns() // 1_000_000
        return StatusSnapshot(tasks, owners[0], owners[1], loop_errors, versions, notes, at_ms, ddl_lag)

    def history_snapshot(
        self, task_id: str | None, limit: int, *, timeout_s: float = DEFAULT_CLIENT_TIMEOUT_S
    ) -> HistorySnapshot:
        """Runs, then the DDL log; a part this principal may not read (or a missing topic) is a note."""
        deadline = Deadline(timeout_s)
        runs: list[Record] | None = None
        ddl: list[Record] | None = None
        notes: dict[str, str] = {}
        try:
            runs = self.history(task_id, limit=limit, timeout_s=deadline.remaining())
        except (NotAuthorized, TopicNotFound) as exc:
            notes["runs"] = f"runs: {exc}"
        try:
            ddl = self.ddl_history(task_id, limit=limit, timeout_s=deadline.remaining())
        except (NotAuthorized, TopicNotFound) as exc:
            notes["ddl"] = f"ddl: {exc}"
        return HistorySnapshot(task_id, runs, ddl, notes.get("runs"), notes.get("ddl"))

    def close(self) -> None:
        if self._producer is not None:
            producer, self._producer = self._producer, None
            producer.close(timeout_s=self._producer_timeout_s or DEFAULT_CLIENT_TIMEOUT_S)


def attempt(call: Callable[[], T]) -> tuple[T | None, MvsClientError | None]:
    """``call()``'s result, or the client error it raised (for views that show what they can)."""
    try:
        return call(), None
    except MvsClientError as exc:
        return None, exc
