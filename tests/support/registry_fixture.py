"""The schema registry for the tests that need one: Apicurio Registry, started once per session,
keeping its schemas in the session broker (kafkasql storage), like a registry beside a real cluster.

``MVS_TEST_SCHEMA_REGISTRY_URL`` points these tests at a running Confluent-compatible registry instead.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import replace

import pytest

from workers.config import Settings
from workers.embedded.registry import EmbeddedRegistry


@pytest.fixture(scope="session")
def schema_registry_url(kafka_bootstrap: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    external = os.environ.get("MVS_TEST_SCHEMA_REGISTRY_URL")
    if external:
        yield external
        return
    registry = EmbeddedRegistry(tmp_path_factory.mktemp("registry"), bootstrap_servers=kafka_bootstrap)
    with registry:
        yield registry.url


@pytest.fixture
def registry_settings(settings: Settings, schema_registry_url: str) -> Settings:
    """The test's settings with the schema registry on: producers write the Confluent wire format."""
    return replace(settings, schema_registry_url=schema_registry_url)
