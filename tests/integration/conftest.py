"""Spark for the jobs tests: one SparkSession (real Delta) for the whole test session.

Tables are addressed by path, so each test gets its own warehouse folder (``local_settings``)
while sharing the session.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import C1_ONLY
from tests.integration.cluster import Cluster
from tests.integration.objectstore import object_store, settings_on_warehouse  # noqa: F401 - fixtures
from tests.integration.registry_fixture import registry_settings, schema_registry_url  # noqa: F401
from tests.integration.sales import SCHEMA, rows
from workers.config import Settings


@pytest.fixture(scope="session")
def spark(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    from workers.jobs.spark.session import get_spark, stop_spark

    # This driver lives for the whole run and plans thousands of queries: there the C2 compiler pays
    # back its threads (measured: two FAST property tests 155 s with C1 only, 125 s with C2), unlike
    # in the short-lived role processes' drivers (C1 only, see tests/conftest.py).
    warehouse = str(tmp_path_factory.mktemp("spark-warehouse"))
    options = os.environ.get("MVS_SPARK_JAVA_OPTIONS", "").replace(C1_ONLY, "").strip()
    session = get_spark(Settings.from_env(warehouse=warehouse, spark_java_options=options))
    yield session
    stop_spark()


@pytest.fixture
def local_settings(tmp_path: Path) -> Settings:
    """Settings with a fresh warehouse folder and no broker (the jobs never touch Kafka)."""
    return Settings(warehouse=str(tmp_path / "warehouse"))


@pytest.fixture
def sales(spark: Any, settings: Settings) -> None:
    """The ``sales`` base table (12 rows) in the test's warehouse."""
    from workers.demo_tables import create_table

    create_table(spark, settings, "sales", rows(0, 12), SCHEMA)


@pytest.fixture
def cluster(settings: Settings, sales: None) -> Iterator[Cluster]:
    """A coordinator and one worker in this process (real Kafka, Spark, Delta) over ``sales``."""
    cluster = Cluster(settings)
    yield cluster
    cluster.close()
