"""Issue 11, item 2: a Spark cluster — ``MVS_SPARK_MASTER=spark://…`` against a real standalone master
and worker started from PySpark's own distribution (``workers.embedded.spark_cluster``).

A real ``mvs worker`` process is the driver; its executors run on the cluster's worker (one core), and
the Delta jars reach them through ``spark.jars``. A COMPLETE and a FAST refresh keep their MVs equal
to their queries. Then a refresh that would run for minutes is cancelled from mvs while its task is
running on the executor: the executor kills that task for the run's job group (interruptOnCancel), no
other task of it starts, and the executor is free again: the next refresh runs on the same single core.

A run is RUNNING (its record published) before its first Spark job: it pins the base versions, reads the
MV's watermark and plans first. A cancel sent then stops the run at its next step without any task ever
reaching the executor — correct, but it proves nothing about executors. So the test waits until the
executor's own log shows the run's scan task started and not ended, and only then cancels.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.integration.cluster import wait_until
from tests.integration.executor_tasks import ExecutorTask, executor_tasks
from tests.integration.fleet import Harness, step
from tests.integration.processes import Fleet
from tests.integration.sales import SCHEMA, mv_rows, query_rows, rows
from workers.config import Settings
from workers.demo_tables import append, create_table
from workers.embedded.spark_cluster import SparkStandalone
from workers.warehouse import latest_version, table_path

pytestmark = pytest.mark.integration

BY_REGION = "SELECT region, sum(amount) AS total, count(*) AS orders FROM sales GROUP BY region"
BIG = "SELECT id, region, amount FROM sales WHERE amount > 15"
# Minutes of work: 90,000 generated rows per row of spin (400,000 rows), counted in the stage that scans
# spin. A task notices a kill between two batches of rows it reads (4,096 rows: a second or so of work
# here), so the kill lands within seconds; nothing else in the test reads spin.
SPIN_ROWS = 400_000
ENDLESS = (
    "SELECT count(*) AS n FROM (SELECT explode(sequence(1, 300)) AS j FROM "
    "(SELECT explode(sequence(1, 300)) AS i FROM spin) x) y"
)


@pytest.fixture(scope="module")
def standalone(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SparkStandalone]:
    with SparkStandalone(tmp_path_factory.mktemp("spark-cluster"), workers=1, cores=1) as cluster:
        yield cluster


def current(h: Harness, name: str, query: str) -> bool:
    task = h.task(f"mv:{name}")
    if not task or task["checkpoint"].get("sales") != latest_version(h.settings, "sales"):
        return False
    return mv_rows(h.spark, h.settings, name) == query_rows(h.spark, h.settings, query)


def spinning(standalone: SparkStandalone) -> list[ExecutorTask]:
    """Tasks scanning spin that have not ended: the slow refresh's, on the executor."""
    tasks = executor_tasks(standalone.executor_log_files())
    return [t for t in tasks if t.reads_table("spin") and t.ended is None]


def test_refreshes_run_on_the_cluster_and_a_cancel_reaches_its_executors(
    standalone: SparkStandalone, kafka_bootstrap: str, spark: Any, tmp_path: Path
) -> None:
    settings = Settings.from_env(
        bootstrap_servers=kafka_bootstrap,
        embedded=False,
        replication_factor=1,
        namespace=f"sc{uuid.uuid4().hex[:8]}",
        warehouse=str(tmp_path / "warehouse"),
        session_timeout_ms=3000,
    )
    fleet = Fleet(settings, tmp_path / "logs", env={"MVS_SPARK_MASTER": standalone.master_url})
    h = Harness(settings, fleet, spark)
    try:
        fleet.coordinator("c1")
        worker = h.new_worker()
        create_table(spark, settings, "sales", rows(0, 12), SCHEMA)
        spark.range(SPIN_ROWS).write.format("delta").save(table_path(settings, "spin"))
        h.wait_warm(worker)
        apps = standalone.status().get("activeapps", [])
        assert isinstance(apps, list) and [a.get("name") for a in apps] == ["mvs"], (
            apps
        )  # the worker's driver
        step("spark cluster: the worker's driver is an application of the master")

        h.ok("CREATE MATERIALIZED VIEW LOG ON sales")
        h.ok(f"CREATE MATERIALIZED VIEW by_region REFRESH COMPLETE EVERY 2 SECONDS AS {BY_REGION}")
        h.ok(f"CREATE MATERIALIZED VIEW big_sales REFRESH FAST ON CHANGE AS {BIG}")
        for round_no in range(2):
            for name, query in (("by_region", BY_REGION), ("big_sales", BIG)):
                wait_until(lambda n=name, q=query: current(h, n, q), timeout_s=180, what=f"{name} current")
            append(spark, settings, "sales", rows(100 + 10 * round_no, 5))
        fast = [r for r in h.runs_of("mv:big_sales") if r["state"] == "COMPLETED"]
        assert any(r["message"].startswith("incremental:") for r in fast), [r["message"] for r in fast]
        step("spark cluster: COMPLETE and FAST refreshes ran on the executors")

        h.ok(f"CREATE MATERIALIZED VIEW slow REFRESH COMPLETE ON DEMAND AS {ENDLESS}")
        running = h.wait_run("mv:slow", states={"RUNNING"})
        (task,) = wait_until(
            lambda: spinning(standalone),
            timeout_s=120,
            what="the slow refresh's task running on the executor",
        )
        step(f"spark cluster: the slow refresh's task (TID {task.tid}) running on the executor")
        h.ok("CANCEL REFRESH MATERIALIZED VIEW slow")
        ended = h.wait_run("mv:slow", states={"CANCELED", "COMPLETED", "ERROR"}, run_id=running["run_id"])
        assert ended["state"] == "CANCELED", ended
        # The executor killed that very task, for the run's job group (mvs-<run id>), and started no
        # other task of the run (the rest of its stage was cancelled with it).
        (killed,) = wait_until(
            lambda: [
                t for t in executor_tasks(standalone.executor_log_files()) if t.tid == task.tid and t.ended
            ],
            timeout_s=30,
            what=f"the executor to end task {task.tid}",
        )
        assert killed.ended == "killed", killed
        assert f"cancelled job group mvs-{running['run_id']}" in killed.reason, killed.reason
        spin_tasks = [t.tid for t in executor_tasks(standalone.executor_log_files()) if t.reads_table("spin")]
        assert spin_tasks == [task.tid], spin_tasks
        step("spark cluster: the cancel killed the slow refresh's task on the executor")
        append(spark, settings, "sales", rows(200, 5))  # the single core is free again: the next run runs
        wait_until(
            lambda: current(h, "by_region", BY_REGION), timeout_s=120, what="by_region after the cancel"
        )
    except BaseException:
        print(fleet.logs())
        print(standalone.executor_logs()[-20000:])
        raise
    finally:
        fleet.close()
        h.close()
