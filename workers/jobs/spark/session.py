"""One SparkSession per process, configured for Delta and for many small, quick jobs.

Runs of different tasks share the session from several threads: PySpark's pinned-thread mode
(the default) gives every Python thread its own JVM thread, so job groups and other local
properties set by one run never leak into another.
"""

from __future__ import annotations

import functools
import logging
import os
import sys
import threading
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from pyspark.sql import SparkSession

from workers import warehouse
from workers.config import CACHE_DIR, Settings, spark_location
from workers.jobs.spark import class_archive, memory

log = logging.getLogger(__name__)

DELTA_JARS_DIR = CACHE_DIR / "jars" / "delta"
# Hadoop's S3A file system and the AWS SDK bundle (infra/fetch_jars.sh, profile s3a): optional, only
# an s3:// warehouse needs them.
S3A_JARS_DIR = CACHE_DIR / "jars" / "s3a"

_lock = threading.Lock()
_session: SparkSession | None = None


def delta_jars(jars_dir: Path = DELTA_JARS_DIR) -> list[str]:
    """The Delta jars fetched by infra/fetch_jars.sh; nothing is downloaded at run time."""
    jars = sorted(str(p) for p in jars_dir.glob("*.jar"))
    if not any("delta-spark" in Path(j).name for j in jars):
        raise RuntimeError(
            f"Delta Lake jars not found in {jars_dir}: run infra/setup.sh "
            "(or infra/fetch_jars.sh) once to fetch them from Maven Central"
        )
    return jars


def _spark_warehouse_dir(settings: Settings) -> str:
    # Managed (catalog) tables are not used — every table is addressed by path — but Spark
    # still wants a warehouse dir; keep it inside ours instead of the current directory.
    return f"{spark_location(settings.warehouse).rstrip('/')}/_spark_warehouse"


# -- object-store warehouse (S3A) ------------------------------------------------------------------
def s3a_jars(jars_dir: Path = S3A_JARS_DIR) -> list[str]:
    """hadoop-aws and its AWS SDK bundle if fetched (``[]`` otherwise: local warehouses need neither)."""
    return sorted(str(p) for p in jars_dir.glob("*.jar"))


def jars_conf(master: str) -> dict[str, str]:
    """Delta's jars in ``spark.jars``; S3A's there too for a cluster (executors need them), and on
    the driver's class path for a local master: spark.jars copies every jar into each executor's
    work folder, and the SDK bundle alone is 558 MB (local executors are the driver)."""
    jars, s3a = delta_jars(), s3a_jars()
    if s3a and master.startswith("local"):
        return {"spark.jars": ",".join(jars), "spark.driver.extraClassPath": os.pathsep.join(s3a)}
    return {"spark.jars": ",".join(jars + s3a)}


# Options applied per bucket: S3A builds one file system per bucket and keeps it for the JVM's life.
_storage_applied: dict[str, tuple[tuple[str, str], ...]] = {}


def _apply_storage(session: SparkSession, settings: Settings) -> None:
    """Endpoint, region and credentials of ``settings.storage`` as ``fs.s3a.*`` options of the live
    Hadoop configuration (every Delta read and write takes its Hadoop conf from there). Not in Spark's
    conf: the UI and event logs show that. Options take effect for a bucket's first use in the JVM
    (Hadoop caches one file system per bucket), so they are scoped to the warehouse's bucket: another
    bucket on another endpoint gets its own. The same bucket cannot change endpoint in one process."""
    bucket = s3a_bucket(settings.warehouse)
    options = settings.storage.hadoop_options(bucket)
    applied, key = tuple(sorted(options.items())), bucket or ""
    if not options or _storage_applied.get(key) == applied:
        return
    if key in _storage_applied:
        log.warning("bucket %s is already open with other storage options: the first ones stay", bucket)
        return
    # py4j logs every command it sends at DEBUG: these carry the credentials.
    py4j_logger = logging.getLogger("py4j")
    level = py4j_logger.level
    py4j_logger.setLevel(max(level, logging.INFO))
    try:
        hadoop_conf = session.sparkContext._jsc.hadoopConfiguration()  # noqa: SLF001 - not in PySpark's API
        for key, value in options.items():
            hadoop_conf.set(key, value)
    finally:
        py4j_logger.setLevel(level)
    _storage_applied[key] = applied


def s3a_bucket(warehouse: str) -> str | None:
    """The bucket of an ``s3a://`` (or ``s3://``) warehouse; None for any other."""
    scheme, sep, rest = spark_location(warehouse).partition("://")
    return rest.split("/", 1)[0] if sep and scheme == "s3a" else None


# -- end of object-store warehouse -----------------------------------------------------------------


def _build(settings: Settings) -> SparkSession:
    jars = jars_conf(settings.spark_master)
    conf: dict[str, str] = {
        **jars,
        "spark.sql.extensions": "io.delta.sql.DeltaSparkSessionExtension",
        "spark.sql.catalog.spark_catalog": "org.apache.spark.sql.delta.catalog.DeltaCatalog",
        "spark.sql.warehouse.dir": _spark_warehouse_dir(settings),
        "spark.sql.session.timeZone": "UTC",
        # Small tables, many runs: few shuffle partitions and small Delta state reconstruction
        # (the default of 50 snapshot partitions dominates the cost of every tiny read; 1 instead
        # of 2 took ~0.1 s off a tiny complete refresh: each partition of each snapshot load is a
        # task that generates its code again).
        "spark.sql.shuffle.partitions": "4",
        "spark.default.parallelism": "4",
        "spark.databricks.delta.snapshotPartitions": "1",
        # Spark compiles each new generated-code text once (Janino, ~5-50 ms each) and keeps 100 by
        # default: a worker refreshing several MVs evicted every COMPLETE run's code before its next
        # run (TPC-H SF 1, 5 MVs and their twins: 8-47 compiles, up to 0.7 s, per COMPLETE run; 0
        # with 2,000 kept). A kept class is tens of KB.
        "spark.sql.codegen.cache.maxEntries": "2000",
        # VACUUM with short retention is a legitimate maintenance choice here.
        "spark.databricks.delta.retentionDurationCheck.enabled": "false",
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
        # PySpark's DataFrame debugging records the Python call site of every Column and DataFrame
        # call in the JVM (a conf read and two more gateway calls each): a FAST run builds thousands
        # of column expressions, and this took ~40 % of a one-row refresh. Errors users see come
        # from their SQL text, not from mvs's own call sites.
        "spark.python.sql.dataFrameDebugging.enabled": "false",
        # Delta's plans are wide; without this every first write logs a truncation warning.
        "spark.sql.debug.maxToStringFields": "200",
        # MV queries are code from outside (workers.jobs.spark.guard checks them too; these make the
        # escapes impossible in Spark itself; ``run_session`` adds the per-session ones):
        # no ${...} substitution: Spark parses exactly the text the user wrote (and no conf leaks in);
        "spark.sql.variable.substitute": "false",
        # no SQL scripting (procedural blocks, EXECUTE IMMEDIATE of built strings);
        "spark.sql.scripting.enabled": "false",
        # no Hive: no Hive UDFs, SerDes or persistent functions loading jars from a metastore.
        "spark.sql.catalogImplementation": "in-memory",
    }
    heap = memory.driver_memory(settings.spark_driver_memory, settings.spark_master, memory.machine_memory())
    if heap is not None:  # read by Spark's launcher: it takes effect for a JVM not started yet
        conf["spark.driver.memory"] = heap
    if settings.spark_master.startswith("local"):
        # Everything in this process: loopback only (no hostname-resolution surprises on laptops
        # and containers), and Python UDF workers run this interpreter (the venv). A cluster
        # master needs a reachable driver address and its own Python, so both stay unset there.
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
        conf["spark.driver.host"] = "127.0.0.1"
        conf["spark.driver.bindAddress"] = "127.0.0.1"
        conf["spark.pyspark.python"] = sys.executable
        conf["spark.pyspark.driver.python"] = sys.executable
    # The class archive fits a local driver's class path only (a cluster's driver has another).
    archive = class_archive.java_option(jars) if settings.spark_master.startswith("local") else ""
    java_options = " ".join(option for option in (archive, settings.spark_java_options) if option)
    if java_options:
        conf["spark.driver.extraJavaOptions"] = java_options
    builder = SparkSession.builder.master(settings.spark_master).appName("mvs")
    for key, value in conf.items():
        builder = builder.config(key, value)
    session = builder.getOrCreate()
    session.sparkContext.setLogLevel("WARN")
    return session


def get_spark(settings: Settings) -> SparkSession:
    """The process-wide SparkSession, created on first use (thread-safe).

    Later calls return the same session whatever their settings: master and jars are fixed
    at JVM start, and tables are addressed by path, so another warehouse works unchanged.
    A session whose JVM has exited (killed, out of memory) is replaced by a new one: the runs that
    were using it fail and are retried, and the process rides out the loss by itself.
    """
    global _session
    with _lock:
        if _session is not None and (code := jvm_exit_code()) is not None:
            log.warning("Spark's JVM exited (code %s): starting a new Spark session", code)
            _forget_jvm()
        if _session is None:
            _session = _build(settings)
        _apply_storage(_session, settings)
        return _session


def jvm_exit_code() -> int | None:
    """The exit code of this process's Spark JVM once it has exited; None while it runs (or when
    PySpark did not launch it, e.g. under spark-submit, where the JVM outlives no Python)."""
    from pyspark import SparkContext

    process = getattr(SparkContext._gateway, "proc", None)  # noqa: SLF001 - not exposed in PySpark
    return process.poll() if process is not None else None


# Called after a lost JVM is forgotten: module caches holding its objects drop them.
_jvm_lost_hooks: list[Callable[[], None]] = []


def on_jvm_lost(hook: Callable[[], None]) -> None:
    """Run ``hook`` whenever a session whose JVM exited is forgotten (before the new one starts)."""
    _jvm_lost_hooks.append(hook)


def _forget_jvm() -> None:
    """Drop PySpark's handles on a JVM that exited, so the next builder launches a new one. PySpark
    keeps them in class attributes and offers no reset; these are the ones its launcher checks."""
    global _session
    from pyspark import SparkContext

    try:
        if SparkContext._gateway is not None:  # noqa: SLF001
            SparkContext._gateway.shutdown()  # noqa: SLF001 - its Python side: sockets, callback server
    except Exception:  # the JVM side is gone; what closes, closes
        log.debug("closing the lost JVM's gateway", exc_info=True)
    SparkContext._gateway = None  # noqa: SLF001
    SparkContext._jvm = None  # noqa: SLF001
    SparkContext._active_spark_context = None  # noqa: SLF001
    SparkSession._instantiatedSession = None  # noqa: SLF001
    SparkSession._activeSession = None  # noqa: SLF001
    _session = None
    _storage_applied.clear()
    for hook in _jvm_lost_hooks:
        hook()


# Set on every run session, where MV queries run: no ``parquet.`/path``` tables (a query reads the
# views the run registered, never files by path). Not process-wide: the workers' own maintenance SQL
# (``ALTER TABLE delta.`<path>` …`` in workers.jobs.changes.mvlog) addresses tables by path.
#
# A ``limit(n)`` collect (``held.hold``) scans every partition in one job instead of one partition,
# then 4, then 16… (a job each): a run's small frames span a few files, and jobs are its fixed cost.
RUN_CONF = {
    "spark.sql.runSQLOnFiles": "false",
    "spark.sql.limit.initialNumPartitions": "1000000",
    # A read of a table's files by list (``workers.jobs.delta.files``) checks its paths on the driver
    # up to this many, not in a listing job.
    "spark.sql.sources.parallelPartitionDiscovery.threshold": "1000",
}


# Adaptive query execution runs every shuffle stage of a query as a Spark job of its own, Delta's
# snapshot loads included (a state reconstruction is 3 jobs with it, 1 without): a run session that
# wants few jobs turns it off (``run_session(adaptive=False)``). Results do not depend on it.
ADAPTIVE = "spark.sql.adaptive.enabled"

# Spark compiles generated Java (Janino) for every new plan, and a run's plans are new each time: its
# literals (key IN lists, versions) are inlined in the code, so the compile cache misses. On small
# tables that compile costs more than interpreting the rows (measured with ``bench.fast_vs_complete``'s
# shapes, 100-row changes of a 100k-row base: FAST p50 6.9 → 4.6 s aggregate, 4.4 → 3.0 s projection);
# on big ones it does not (``INTERPRET_LIMIT_BYTES``). Spark runs its own test suites in
# this mode too: results do not depend on it. Whole-stage codegen alone off gained nothing: the
# per-expression factories are where the time went.
INTERPRETED = {"spark.sql.codegen.wholeStage": "false", "spark.sql.codegen.factoryMode": "NO_CODEGEN"}

# Up to this many bytes in a FAST run's MV and bases, it interprets. Compiling is a fixed cost per run;
# interpreting costs per row, and a run may read a base (a join's other side, groups recomputed) or
# rewrite MV files whole. Measured with ``bench.fast_vs_complete``: at 100k base rows (~1 MB)
# interpreted runs took a third less time; at 5M (~30 MB) the same within noise; at 50M (~300 MB)
# rewrite merges of 1.25M-row MV files took 1.3-1.7x as long (aggregates, which read little, gained).
INTERPRET_LIMIT_BYTES = 64 << 20


# Past this many change rows a run compiles even over small tables: interpreting costs per row, and
# the compile is paid once per plan (the 10M-row benchmark's aggregate, 110,000 change rows, 10,000
# groups: FAST p50 1,184 ms interpreted, 1,023 ms compiled, same process).
COMPILE_CHANGE_ROWS = 20_000


def compile_for(session: SparkSession, change_rows: int) -> None:
    """Let a run session that interprets (``run_session(codegen=False)``) compile from now on when it
    has more than ``COMPILE_CHANGE_ROWS`` change rows to work on."""
    if change_rows > COMPILE_CHANGE_ROWS:
        for key in INTERPRETED:
            session.conf.unset(key)


# A table's Delta checksum at a version (``warehouse.table_summary`` bound to a warehouse).
Checksum = Callable[[str, int], Mapping[str, Any] | None]


def run_checksums(settings: Settings) -> Checksum:
    """Checksum files read once each for one run (its interpret-or-compile rule, schema check and
    deletion-vector choice all read the MV's). Per run only: a re-created table restarts its versions."""
    return functools.cache(functools.partial(warehouse.table_summary, settings))


def small_tables(settings: Settings, versions: dict[str, int], checksum: Checksum | None = None) -> bool:
    """Whether the tables at these versions (a run's MV and pinned bases) hold at most
    ``INTERPRET_LIMIT_BYTES`` in all, by Delta's per-version checksum files (no Spark; ``checksum``
    reads them: ``run_checksums``). A table without one counts as large."""
    read = checksum or functools.partial(warehouse.table_summary, settings)
    total = 0
    for name, version in versions.items():
        size = (read(name, version) or {}).get("tableSizeBytes")
        if not isinstance(size, int):
            return False
        total += size
    return total <= INTERPRET_LIMIT_BYTES


def run_session(spark: SparkSession, *, adaptive: bool = True, codegen: bool = True) -> SparkSession:
    """A session of one run's own: a clone of ``spark`` (same SQL conf and registered functions, e.g.
    operator-allowed UDFs) whose temp views and conf changes stay private. It shares the SparkContext,
    so the run's job group and cancellation work unchanged; it needs no closing (the JVM session is
    collected with its last reference; the run drops the views it made). ``adaptive=False`` turns off
    adaptive query execution in it (see ``ADAPTIVE``), ``codegen=False`` code generation (see
    ``INTERPRETED``)."""
    jvm_session = spark._jsparkSession.cloneSession()  # noqa: SLF001 - not exposed in PySpark
    session = SparkSession(spark.sparkContext, jvm_session)
    for key, value in RUN_CONF.items():
        session.conf.set(key, value)
    if not adaptive:
        session.conf.set(ADAPTIVE, "false")
    if not codegen:
        for key, value in INTERPRETED.items():
            session.conf.set(key, value)
    return session


@contextmanager
def confs(session: SparkSession, values: Mapping[str, str]) -> Iterator[None]:
    """``values`` set on ``session``'s SQL conf meanwhile, the previous values (or none) restored."""
    before = {key: session.conf.get(key, None) for key in values}
    for key, value in values.items():
        session.conf.set(key, value)
    try:
        yield
    finally:
        for key, old in before.items():
            if old is None:
                session.conf.unset(key)
            else:
                session.conf.set(key, old)


def active_spark() -> SparkSession | None:
    """The process session if one was started (never starts one)."""
    return _session


def stop_spark() -> None:
    """Stop the process session (and its JVM context); the next get_spark starts a new one."""
    global _session
    with _lock:
        if _session is not None:
            _session.stop()
            _session = None
            _storage_applied.clear()
