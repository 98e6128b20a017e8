"""Settings shared by every role: where Kafka, Spark and the warehouse are.

Everything comes from the environment so the same code runs embedded (one machine),
in docker compose, or against an existing cluster:

- ``MVS_BOOTSTRAP_SERVERS``: an existing Kafka cluster; unset means the embedded broker.
- ``MVS_KAFKA_<OPTION>``: passed through to every Kafka client, e.g.
  ``MVS_KAFKA_SECURITY_PROTOCOL=SASL_SSL`` becomes ``security.protocol=SASL_SSL``.
- ``MVS_NAMESPACE``: prefix of every topic and consumer group (default ``mvs``).
- ``MVS_WAREHOUSE``: folder or URI holding the Delta tables (default ``./warehouse``); on an object
  store e.g. ``s3://bucket/prefix`` (``StorageSettings`` below says how it is reached).
- ``MVS_SPARK_MASTER``: Spark master URL (default ``local[2]``).
- ``MVS_SPARK_JAVA_OPTIONS``: extra JVM options of the Spark driver, e.g. ``-Xmx4g`` or
  ``-XX:TieredStopAtLevel=1`` (quick JIT only: less CPU for short-lived processes such as tests).
- ``MVS_GROUP_PROTOCOL``: ``classic`` (default, cooperative-sticky) or ``consumer`` (KIP-848).
- ``MVS_SESSION_TIMEOUT_MS``: consumer-group session timeout, i.e. how long a dead worker keeps
  its tasks (default 6000; 0 leaves Kafka's defaults: 45 s, client-side for ``classic``,
  the broker's group config for ``consumer``).
- ``MVS_HEARTBEAT_TIMEOUT_S``: a task whose owner sent no heartbeat for this long is restarted
  elsewhere (default 25; keep it well above the 10 s full-heartbeat period).
- ``MVS_WORKER_ID``: this process's name in heartbeats and run history (default host-pid-random;
  must be unique per process: a new owner is recognised by a new id).
- ``MVS_DDL_INBOX``: ``1`` with authentication: clients publish DDL to their own inbox topic
  ``<ns>.ddl.inbox.<sasl user>`` and ``mvs coordinator`` forwards every inbox to ``<ns>.ddl`` with
  ``issued_by`` = the inbox's principal (README "Security"); default ``0``: straight to ``<ns>.ddl``.
- ``MVS_OWNER_RULE``: ``1`` turns the owner rule on: only the principal that created an MV (or MV
  log), or an admin, may alter, pause, resume, cancel or drop it (``workers.catalog.owners``).
- ``MVS_ADMIN_PRINCIPALS``: comma-separated principals exempt from the owner rule, e.g.
  ``User:admin,User:ops``.
- ``MVS_ALLOWED_FUNCTIONS``: comma-separated function names an MV query may call beyond the built-in
  allow-list of ``workers.ddl.allowlist`` (e.g. a UDF the operator registered and trusts).
- ``MVS_API_HOST`` / ``MVS_API_PORT``: where ``mvs serve`` listens (default ``127.0.0.1:8083``,
  Kafka Connect's port; ``0.0.0.0`` to serve other machines).
- ``MVS_SCHEMA_REGISTRY_URL``: a Confluent-compatible schema registry (e.g. Apicurio's
  ``http://host:8080/apis/ccompat/v7``): records are written in the Confluent wire format, subjects
  ``<topic>-value``; unset: Avro single-object encoding. Readers read both either way (the
  Confluent form only with a registry).
- ``MVS_API_TIMEOUT_S``: how long one REST API request waits for the bus before answering 503
  (a DDL request: for the coordinator's answer, then 504; default 10).
"""

from __future__ import annotations

import os
import re
import socket
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
CACHE_DIR = REPO_ROOT / ".cache"
EMBEDDED_BOOTSTRAP = "127.0.0.1:19092"
KAFKA_OPTION_PREFIX = "MVS_KAFKA_"
# How long a client command (`mvs …`, MvsClient calls) waits for the bus unless told otherwise.
DEFAULT_CLIENT_TIMEOUT_S = 30.0


def _kafka_options_from_env(env: Mapping[str, str]) -> dict[str, str]:
    return {
        key[len(KAFKA_OPTION_PREFIX) :].lower().replace("_", "."): value
        for key, value in env.items()
        if key.startswith(KAFKA_OPTION_PREFIX)
    }


# A JVM memory size as Spark reads ``spark.driver.memory`` (``4g``, ``512m``; a bare number: MiB).
_MEMORY_SIZE = re.compile(r"^[1-9][0-9]*[kmgt]?$", re.IGNORECASE)


def _driver_memory_from_env(env: Mapping[str, str]) -> str:
    """``MVS_SPARK_DRIVER_MEMORY``, checked here: a wrong size would stop Spark's launcher with an error
    that does not name it."""
    value = env.get("MVS_SPARK_DRIVER_MEMORY", "").strip()
    if value and not _MEMORY_SIZE.match(value):
        raise ValueError(f"MVS_SPARK_DRIVER_MEMORY={value!r}: a JVM memory size such as 4g or 512m")
    return value


def _flag(env: Mapping[str, str], name: str) -> bool:
    return env.get(name, "").strip().lower() in ("1", "true", "yes", "on")


def allowed_functions_from_env(env: Mapping[str, str] | None = None) -> tuple[str, ...]:
    """``MVS_ALLOWED_FUNCTIONS`` as lower-case names (empty entries dropped)."""
    names = _comma_list(os.environ if env is None else env, "MVS_ALLOWED_FUNCTIONS")
    return tuple(sorted({name.lower() for name in names}))


def _comma_list(env: Mapping[str, str], name: str) -> list[str]:
    return [item.strip() for item in env.get(name, "").split(",") if item.strip()]


# -- object-store warehouse ------------------------------------------------------------------------
# ``s3://`` and ``s3n://`` warehouses are addressed as ``s3a://`` (Hadoop's S3A file system) so that
# every Spark path to a table is the same string (Delta's per-path log cache and its in-JVM S3 commit
# lock key on it); ``gs://``, ``abfss://`` and the rest stay as written.
SPARK_S3A_SCHEMES = ("s3", "s3n")
STORAGE_OPTION_PREFIX = "MVS_STORAGE_"


def spark_location(uri: str) -> str:
    """``uri`` as Spark addresses it: ``s3://`` / ``s3n://`` become ``s3a://``, others unchanged."""
    scheme, sep, rest = uri.partition("://")
    return f"s3a://{rest}" if sep and scheme.lower() in SPARK_S3A_SCHEMES else uri


@dataclass(frozen=True)
class StorageSettings:
    """How an object-store warehouse is reached, from the environment:

    - ``MVS_S3_ENDPOINT``: an S3-compatible server's URL (``http://host:9000``); path-style requests,
      plain HTTP allowed when the URL says ``http``. Unset: AWS S3 itself.
    - ``AWS_ACCESS_KEY_ID`` / ``AWS_SECRET_ACCESS_KEY`` / ``AWS_SESSION_TOKEN`` / ``AWS_REGION``
      (or ``AWS_DEFAULT_REGION``): given explicitly to Spark's S3A and to the no-JVM log readers.
      Unset: each uses its own default chain (instance profile, ``~/.aws``…).
    - ``MVS_STORAGE_<OPTION>``: any other option of the no-JVM readers (delta-rs / object_store keys,
      e.g. ``MVS_STORAGE_AZURE_STORAGE_ACCOUNT_NAME``, ``MVS_STORAGE_GOOGLE_SERVICE_ACCOUNT``); Spark
      reads its own Hadoop options from ``spark-defaults.conf`` (README "Object-store warehouse").

    Secrets are kept out of ``repr`` (so out of logs and tracebacks that print settings); no record
    or topic carries settings.
    """

    endpoint: str | None = None
    region: str | None = None
    access_key_id: str | None = field(default=None, repr=False)
    secret_access_key: str | None = field(default=None, repr=False)
    session_token: str | None = field(default=None, repr=False)
    options: Mapping[str, str] = field(default_factory=dict, repr=False)

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> StorageSettings:
        return cls(
            endpoint=env.get("MVS_S3_ENDPOINT") or None,
            region=env.get("AWS_REGION") or env.get("AWS_DEFAULT_REGION") or None,
            access_key_id=env.get("AWS_ACCESS_KEY_ID") or None,
            secret_access_key=env.get("AWS_SECRET_ACCESS_KEY") or None,
            session_token=env.get("AWS_SESSION_TOKEN") or None,
            options={
                key[len(STORAGE_OPTION_PREFIX) :].lower(): value
                for key, value in env.items()
                if key.startswith(STORAGE_OPTION_PREFIX)
            },
        )

    def environment(self) -> dict[str, str]:
        """The environment variables ``from_env`` reads these settings from (for a child process)."""
        variables = self._named(
            "MVS_S3_ENDPOINT", "AWS_REGION", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN"
        )
        return {**variables, **{STORAGE_OPTION_PREFIX + k.upper(): v for k, v in self.options.items()}}

    def _region(self) -> str | None:
        # An S3-compatible server ignores the region but the AWS SDKs insist on one.
        return self.region or ("us-east-1" if self.endpoint else None)

    def _named(self, endpoint: str, region: str, key: str, secret: str, token: str) -> dict[str, str]:
        """The set connection values under one client's option names."""
        pairs = (
            (endpoint, self.endpoint),
            (region, self._region()),
            (key, self.access_key_id),
            (secret, self.secret_access_key),
            (token, self.session_token),
        )
        return {name: value for name, value in pairs if value}

    def delta_rs_options(self) -> dict[str, str]:
        """Storage options of the no-JVM readers (delta-rs, object_store key names)."""
        options = self._named(
            "aws_endpoint_url",
            "aws_region",
            "aws_access_key_id",
            "aws_secret_access_key",
            "aws_session_token",
        )
        if self.endpoint:
            options["aws_virtual_hosted_style_request"] = "false"
            options["aws_allow_http"] = str(self.endpoint.lower().startswith("http://")).lower()
        return {**options, **self.options}

    def hadoop_options(self, bucket: str | None = None) -> dict[str, str]:
        """Hadoop S3A options (``fs.s3a.*``) for Spark; set on the live Hadoop configuration, never
        in Spark's conf (which the UI and event logs show). With ``bucket``, scoped to that bucket
        (``fs.s3a.bucket.<bucket>.*``, S3A's per-bucket overrides): one process can then reach
        warehouses in two buckets on two endpoints."""
        options = self._s3a_options()
        if bucket is None:
            return options
        return {f"fs.s3a.bucket.{bucket}.{key[len('fs.s3a.') :]}": value for key, value in options.items()}

    def _s3a_options(self) -> dict[str, str]:
        options = self._named(
            "fs.s3a.endpoint",
            "fs.s3a.endpoint.region",
            "fs.s3a.access.key",
            "fs.s3a.secret.key",
            "fs.s3a.session.token",
        )
        if self.endpoint:
            options["fs.s3a.path.style.access"] = "true"
            options["fs.s3a.connection.ssl.enabled"] = str(self.endpoint.lower().startswith("https")).lower()
        return options


# -- end of object-store warehouse ------------------------------------------------------------------


def default_worker_id() -> str:
    return f"{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:6]}"


@dataclass(frozen=True)
class Settings:
    namespace: str = "mvs"
    bootstrap_servers: str = EMBEDDED_BOOTSTRAP
    embedded: bool = True
    kafka_options: Mapping[str, str] = field(default_factory=dict)
    warehouse: str = str(REPO_ROOT / "warehouse")
    spark_master: str = "local[2]"
    spark_java_options: str = ""
    # The driver JVM's heap (``spark.driver.memory``, e.g. ``8g``); "": sized from the machine for a
    # local master (workers.jobs.spark.memory), Spark's or the cluster's default otherwise.
    spark_driver_memory: str = ""
    worker_id: str = field(default_factory=default_worker_id)
    # Manager → coordinator heartbeat period while something changed (seed 002: ≤ 1 s).
    heartbeat_interval_s: float = 1.0
    # A task whose owner sent no heartbeat for this long is restarted (Warning, 4002); managers send a
    # full snapshot at least every 10 s, so this must stay well above that.
    heartbeat_timeout_s: float = 25.0
    # Consumer-group session timeout: how long a dead worker keeps its tasks.
    session_timeout_ms: int = 6000
    # A role whose loop has not polled for this long leaves its group, so a hung worker's tasks (or a
    # hung coordinator's DDL partition) move to a live one; librdkafka's default is 300 s. Not set
    # when session_timeout_ms is 0 (Kafka's defaults everywhere).
    max_poll_interval_ms: int = 30000
    # Group protocol: "classic" (cooperative-sticky) or "consumer" (KIP-848).
    group_protocol: str = "classic"
    # Bounded executor: concurrent runs per worker process.
    max_concurrent_runs: int = 2
    run_timeout_s: float = 600.0
    # DDL through per-principal inboxes (MVS_DDL_INBOX=1): see workers.coordinator.inbox.
    ddl_inbox: bool = False
    # The owner rule (coordinator): only a task's creator or an admin principal may change it.
    owner_rule: bool = False
    admin_principals: frozenset[str] = frozenset()
    # Functions an MV query may call beyond the built-in allow-list (lower case), from the operator.
    allowed_functions: tuple[str, ...] = ()
    # The REST API (`mvs serve`): where it listens, and how long a request waits for the bus.
    api_host: str = "127.0.0.1"
    api_port: int = 8083
    api_timeout_s: float = 10.0
    # Replication of every mvs topic, overriding topics/ (3, min.insync.replicas 2): 1 for a single
    # broker (MVS_REPLICATION_FACTOR=1; the embedded broker is one node, so embedded means 1).
    replication_factor: int | None = None
    # A Confluent-compatible schema registry: records in the Confluent wire format (workers.kafka.registry).
    schema_registry_url: str | None = None
    # How an object-store warehouse is reached (endpoint, credentials): see StorageSettings.
    storage: StorageSettings = field(default_factory=StorageSettings)

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None, **overrides: object) -> Settings:
        env = os.environ if env is None else env
        bootstrap = env.get("MVS_BOOTSTRAP_SERVERS")
        settings = cls(
            namespace=env.get("MVS_NAMESPACE", "mvs"),
            bootstrap_servers=bootstrap or EMBEDDED_BOOTSTRAP,
            embedded=not bootstrap,
            kafka_options=_kafka_options_from_env(env),
            warehouse=spark_location(env.get("MVS_WAREHOUSE", str(REPO_ROOT / "warehouse"))),
            spark_master=env.get("MVS_SPARK_MASTER", "local[2]"),
            spark_java_options=env.get("MVS_SPARK_JAVA_OPTIONS", ""),
            spark_driver_memory=_driver_memory_from_env(env),
            group_protocol=env.get("MVS_GROUP_PROTOCOL", "classic"),
            session_timeout_ms=int(env.get("MVS_SESSION_TIMEOUT_MS", str(cls.session_timeout_ms))),
            max_poll_interval_ms=int(env.get("MVS_MAX_POLL_INTERVAL_MS", str(cls.max_poll_interval_ms))),
            heartbeat_timeout_s=float(env.get("MVS_HEARTBEAT_TIMEOUT_S", str(cls.heartbeat_timeout_s))),
            worker_id=env.get("MVS_WORKER_ID") or default_worker_id(),
            ddl_inbox=_flag(env, "MVS_DDL_INBOX"),
            owner_rule=_flag(env, "MVS_OWNER_RULE"),
            admin_principals=frozenset(_comma_list(env, "MVS_ADMIN_PRINCIPALS")),
            allowed_functions=allowed_functions_from_env(env),
            api_host=env.get("MVS_API_HOST", cls.api_host),
            api_port=int(env.get("MVS_API_PORT", str(cls.api_port))),
            api_timeout_s=float(env.get("MVS_API_TIMEOUT_S", str(cls.api_timeout_s))),
            replication_factor=int(env.get("MVS_REPLICATION_FACTOR") or 0) or None,
            schema_registry_url=env.get("MVS_SCHEMA_REGISTRY_URL") or None,
            storage=StorageSettings.from_env(env),
        )
        return replace(settings, **overrides)  # type: ignore[arg-type]

    def topic(self, logical_name: str) -> str:
        """Physical topic name of a topic declared in ``topics/`` (e.g. ``ddl`` → ``mvs.ddl``)."""
        return f"{self.namespace}.{logical_name}"

    def group(self, role: str) -> str:
        return f"{self.namespace}.{role}"

    def kafka_config(self) -> dict[str, str]:
        """Connection settings for every Kafka client (role-specific options are added by the client)."""
        return {"bootstrap.servers": self.bootstrap_servers, **self.kafka_options}
