"""Spark for the jobs tests: one SparkSession (real Delta) for the whole test session.

Tables are addressed by path, so each test gets its own warehouse folder (``local_settings``)
while sharing the session.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.integration.cluster import Cluster
from tests.integration.objectstore import object_store, settings_on_warehouse  # noqa: F401 - fixtures
from tests.integration.registry_fixture import registry_settings, schema_registry_url  # noqa: F401
from tests.integration.sales import SCHEMA, rows
from workers.config import Settings


@pytest.fixture(scope="session")
def spark(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    from workers.jobs.session import get_spark, stop_spark

    session = get_spark(Settings.from_env(warehouse=str(tmp_path_factory.mktemp("spark-warehouse"))))
    yield session
    stop_spark()


@pytest.fixture
def local_settings(tmp_path: Path) -> Settings:
    """Settings with a fresh warehouse folder and no broker (the jobs never touch Kafka)."""
    return Settings(warehouse=str(tmp_path / "warehouse"))


@pytest.fixture
def sales(spark: Any, settings: Settings) -> None:
    """The ``sales`` base table (12 rows) in the test's warehouse."""
    from workers.jobs.tables import create_table

    create_table(spark, settings, "sales", rows(0, 12), SCHEMA)


@pytest.fixture
def cluster(settings: Settings, sales: None) -> Iterator[Cluster]:
    """A coordinator and one worker in this process (real Kafka, Spark, Delta) over ``sales``."""
    cluster = Cluster(settings)
    yield cluster
    cluster.close()
