"""Session-wide real parts: one Kafka broker (KRaft, from the official jars) and one Spark session.

Each test gets its own namespace (topic and group prefix), so tests never see each other's records.
``MVS_BOOTSTRAP_SERVERS`` points the suite at an existing cluster instead of the embedded broker.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck
from hypothesis import settings as hypothesis_settings

from workers.config import Settings
from workers.embedded.broker import EmbeddedKafka, free_port, one_broker_settings

pytest_plugins = [
    "tests.support.image_build",  # the container test's images, built from the start
    "tests.support.file_times",  # MVS_FILE_TIMES=<path>: each file's wall and CPU seconds
]

# Property tests: a CI-sized run by default (a few seconds); HYPOTHESIS_PROFILE=long runs thousands
# of examples per property (a fuzzing session outside CI).
# CI explores the same examples every run (a property test must not turn a run red by luck);
# the long profile explores new ones.
hypothesis_settings.register_profile("ci", max_examples=100, deadline=None, derandomize=True)
hypothesis_settings.register_profile(
    "long", max_examples=5000, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
hypothesis_settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))

# Every role process's Spark driver compiles with C1 only: its JVM lives a minute or two and runs tiny
# jobs, where C2's compiler threads cost two cores more CPU than they give back (measured: a start and
# first Delta job 17.6 s → 13.5 s). The suite's own driver drops it (tests/integration/conftest.py).
C1_ONLY = "-XX:TieredStopAtLevel=1"
# Every Spark driver of the suite (roles and the suite's own) collects with the serial collector: small
# heaps on a shared 2-core machine, where G1's concurrent threads cost CPU the pauses do not (measured:
# test_key_filter.py 242 → 226 CPU-s, the two runs side by side).
SERIAL_GC = "-XX:+UseSerialGC"
os.environ.setdefault("MVS_SPARK_JAVA_OPTIONS", f"{C1_ONLY} {SERIAL_GC}")


@pytest.fixture(scope="session")
def kafka_bootstrap(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    external = os.environ.get("MVS_BOOTSTRAP_SERVERS")
    if external:
        yield external
        return
    port = free_port()
    # Tests beside it hold both cores with Spark jobs (test_scheduling's 30 s join): under Kafka's 9 s
    # session its controller fenced its own broker (catalog partitions "not leader" for minutes, two CI
    # runs in session 31). No test kills this broker, so a long session costs nothing.
    broker = EmbeddedKafka(
        tmp_path_factory.mktemp("kafka"),
        port=port,
        controller_port=free_port(),
        broker_session_timeout_ms=60_000,
    )
    with broker:
        yield broker.bootstrap_servers


@pytest.fixture
def settings(kafka_bootstrap: str, tmp_path: Path) -> Settings:
    """Settings for one test: the session broker, a fresh namespace and a fresh warehouse."""
    return one_broker_settings(kafka_bootstrap, "t", tmp_path)


# The longest files first (LPT): xdist hands files out in collection order (``--no-loadscope-reorder``
# in addopts), so the two processes finish together instead of one running a long file alone at the
# end. Ranked by each file's wall seconds in the last clean .ci/run (MVS_FILE_TIMES, session 22: the
# two processes ended 57 s apart); a file not listed keeps its collected place. To re-rank from a
# whole run: MVS_FILE_TIMES=<path> (tests/support/file_times.py).
LONGEST_FIRST = (
    "tests/integration/test_tpch.py",  # 561 s
    "tests/integration/jobs/test_fast_tree.py",  # 518 s (one CI example of three since)
    # 841 s with two CI examples more, before the HAVING / formulas tests were split off (session 27:
    # 214 s and 195 s of test time alone on a quiet machine, about 2x that in a full run)
    "tests/integration/jobs/test_fast_having_formulas.py",
    "tests/integration/jobs/test_fast_properties.py",
    "tests/integration/test_fleet.py",  # 418 s
    "tests/integration/test_containers.py",  # 285 s; its images build in the background until then
    "tests/integration/jobs/test_fast_state.py",  # 270 s
    "tests/integration/jobs/test_fast_joins.py",  # 205 s
    "tests/integration/test_spark_cluster.py",  # 189 s
    "tests/integration/test_separate_hosts.py",  # 140 s
    "tests/integration/jobs/test_jobs_incremental.py",  # 129 s
    "tests/integration/kafka/test_kafka_cluster.py",  # 127 s
    "tests/integration/test_broker_outage.py",  # 127 s
    "tests/integration/jobs/test_fast_top_n.py",  # 120 s
    "tests/integration/jobs/test_rs_changes.py",  # 110 s
    "tests/integration/test_spark_outage.py",  # 108 s
    "tests/integration/jobs/test_key_filter.py",  # 105 s
    "tests/integration/jobs/test_fast_plans.py",  # 100 s
    "tests/integration/jobs/test_fast_refresh.py",  # 99 s
    "tests/integration/test_objectstore_outage.py",  # 98 s
    "tests/integration/jobs/test_query_guard.py",  # 86 s
    "tests/integration/test_walking_skeleton.py",  # 83 s
    "tests/integration/jobs/test_fast_chain.py",  # 67 s
    "tests/integration/jobs/test_change_reads.py",  # 66 s
    "tests/integration/test_api_fuzz.py",  # 66 s
    "tests/integration/test_client_failures.py",  # 61 s
    "tests/integration/test_security.py",  # 55 s
    "tests/integration/jobs/test_rs_commit.py",  # 50 s
    "tests/integration/test_scheduling.py",  # 45 s
    "tests/integration/test_ownership.py",  # 44 s
    "tests/integration/test_chaos_inputs.py",  # 43 s
)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    rank = {path: i for i, path in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.nodeid.split("::", 1)[0], len(LONGEST_FIRST)))
