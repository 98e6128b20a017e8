"""A FAST run interprets its plans on small tables and compiles them on big ones or for many change rows
(real Spark + Delta): the choice reads Delta's checksum files, and results do not depend on it.
Sessions track no Python call sites."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from workers import demo_tables as tables
from workers import warehouse
from workers.config import Settings
from workers.jobs.spark import session

pytestmark = pytest.mark.integration

SCHEMA = "id long, region string, amount double"


def test_runs_interpret_only_while_the_mv_and_its_bases_are_small(
    spark: Any, local_settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    s = local_settings
    rows = [{"id": i, "region": f"r{i % 3}", "amount": i / 7} for i in range(50)]
    tables.create_table(spark, s, "sales", rows, SCHEMA)
    tables.create_table(spark, s, "mv", rows[:5], SCHEMA)
    assert session.small_tables(s, {"sales": 0, "mv": 0})

    size = sum(int((warehouse.read_checksum(s, name, 0) or {})["tableSizeBytes"]) for name in ("sales", "mv"))
    monkeypatch.setattr(session, "INTERPRET_LIMIT_BYTES", size - 1)  # one byte too many
    assert not session.small_tables(s, {"sales": 0, "mv": 0})
    monkeypatch.setattr(session, "INTERPRET_LIMIT_BYTES", size)
    assert session.small_tables(s, {"sales": 0, "mv": 0})

    # A writer that left no checksum file (delta-rs: ``rs_commit``): the size is read from the log.
    checksum = warehouse.read_checksum(s, "mv", 0)
    Path(warehouse.local_table_dir(s, "mv"), "_delta_log", f"{0:020d}.crc").unlink()
    summary = warehouse.table_summary(s, "mv", 0)
    assert checksum is not None and summary is not None
    assert (summary["tableSizeBytes"], summary["numFiles"]) == (
        checksum["tableSizeBytes"],
        checksum["numFiles"],
    )
    assert session.small_tables(s, {"sales": 0, "mv": 0})
    monkeypatch.setattr(session, "INTERPRET_LIMIT_BYTES", size - 1)
    assert not session.small_tables(s, {"sales": 0, "mv": 0})
    # A size nothing can tell (no such table): the run compiles.
    monkeypatch.setattr(session, "INTERPRET_LIMIT_BYTES", 1 << 40)
    assert not session.small_tables(s, {"sales": 0, "gone": 0})


def test_an_interpreted_run_session_returns_what_a_compiled_one_does(
    spark: Any, local_settings: Settings
) -> None:
    rows = [{"id": i, "region": None if i % 5 == 0 else f"r{i % 3}", "amount": i / 7} for i in range(200)]
    tables.create_table(spark, local_settings, "sales", rows, SCHEMA)
    query = (
        "SELECT region, COUNT(*) AS n, SUM(amount) AS total, MAX(id) AS top FROM sales "
        "WHERE id NOT IN (3, 4, 5) GROUP BY region"
    )
    results = []
    for codegen in (True, False):
        run = session.run_session(spark, adaptive=False, codegen=codegen)
        assert run.conf.get("spark.sql.codegen.wholeStage") == str(codegen).lower()
        run.read.format("delta").load(warehouse.table_path(local_settings, "sales")).createTempView("sales")
        results.append(sorted(map(tuple, run.sql(query).collect()), key=repr))
    assert results[0] == results[1] and len(results[0]) == 4


def test_a_run_with_many_change_rows_compiles_from_then_on(spark: Any) -> None:
    run = session.run_session(spark, adaptive=False, codegen=False)
    session.compile_for(run, session.COMPILE_CHANGE_ROWS)  # not more than the limit: still interpreted
    assert run.conf.get("spark.sql.codegen.wholeStage") == "false"
    assert run.conf.get("spark.sql.codegen.factoryMode") == "NO_CODEGEN"
    session.compile_for(run, session.COMPILE_CHANGE_ROWS + 1)
    assert run.conf.get("spark.sql.codegen.wholeStage") == "true"
    assert run.conf.get("spark.sql.codegen.factoryMode") == "FALLBACK"
    assert run.range(10).selectExpr("sum(id * 2)").collect()[0][0] == 90
    assert spark.conf.get("spark.sql.codegen.wholeStage") == "true"  # the worker's own session: as before


def test_sessions_record_no_python_call_sites(spark: Any) -> None:
    """PySpark's DataFrame debugging (a conf read and two gateway calls per column expression) is
    off: a FAST run builds thousands of expressions."""
    from pyspark.errors import utils

    assert spark.conf.get("spark.python.sql.dataFrameDebugging.enabled") == "false"
    utils._enable_debugging_cache = None  # noqa: SLF001 - read again from the active session
    assert not utils.is_debugging_enabled()


def test_a_local_driver_gets_a_share_of_the_machine_not_sparks_1g(spark: Any) -> None:
    """The test process's session was built with no MVS_SPARK_DRIVER_MEMORY (tests/integration/conftest.py):
    its JVM's heap is the share of this machine ``memory.driver_memory`` gives, not Spark's 1g."""
    from workers.jobs.spark import memory

    expected = memory.driver_memory("", "local[2]", memory.machine_memory())
    assert expected is not None and spark.sparkContext.getConf().get("spark.driver.memory") == expected
    heap_mib = spark._jvm.java.lang.Runtime.getRuntime().maxMemory() // memory.MIB  # noqa: SLF001
    assert heap_mib >= 0.9 * int(expected.removesuffix("m"))  # the JVM keeps a sliver for itself
    assert heap_mib <= int(expected.removesuffix("m"))
