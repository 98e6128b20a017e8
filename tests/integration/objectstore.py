"""The object-store variant of a test: one real S3-compatible server for the test session
(``workers.embedded.objectstore``, like the broker), and ``settings`` pointing at a bucket on it.

A test runs on both warehouses with
``@pytest.mark.parametrize("settings", ["local", "s3"], indirect=True)``; ``s3`` gives it
``MVS_WAREHOUSE=s3://mvs/<namespace>`` with the server's endpoint and credentials, read by
``Settings.from_env`` as a user's would be. After an ``s3`` test, its records (run history, catalog,
heartbeats, DDL results) and every log line it wrote are checked for the secret key.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from dataclasses import replace

import pytest

from workers.config import Settings
from workers.embedded.broker import free_port
from workers.embedded.objectstore import EmbeddedObjectStore

BUCKET = "mvs"
# Topics whose records could carry what a worker saw: each is read back after an s3 test.
_RECORD_TOPICS = ("runs", "catalog", "coordinator", "ddl.results", "manager", "maintainer", "dlq")


@pytest.fixture(scope="session")
def object_store(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmbeddedObjectStore]:
    data = tmp_path_factory.mktemp("objectstore") / "data"
    secret = f"secret-{free_port()}-never-logged"
    with EmbeddedObjectStore(data, port=free_port(), secret_key=secret) as store:
        store.create_bucket(BUCKET)
        yield store


def object_store_settings(store: EmbeddedObjectStore, base: Settings, bucket: str = BUCKET) -> Settings:
    """``base`` with its warehouse in ``bucket``, configured from the environment a user would set."""
    env = {**store.environment(), "MVS_WAREHOUSE": f"s3://{bucket}/{base.namespace}"}
    on_s3 = Settings.from_env(env)
    return replace(base, warehouse=on_s3.warehouse, storage=on_s3.storage)


@pytest.fixture(name="settings")
def settings_on_warehouse(settings: Settings, request: pytest.FixtureRequest) -> Iterator[Settings]:
    """The session's ``settings``; with the ``s3`` parameter, its warehouse on the object store."""
    if getattr(request, "param", "local") != "s3":
        yield settings
        return
    from workers.jobs.spark.session import get_spark

    store: EmbeddedObjectStore = request.getfixturevalue("object_store")
    caplog: pytest.LogCaptureFixture = request.getfixturevalue("caplog")
    caplog.set_level(logging.DEBUG)
    on_s3 = object_store_settings(store, settings)
    request.getfixturevalue("spark")  # the session's one SparkSession, started with a local warehouse:
    get_spark(on_s3)  # its S3A options now point at the store
    yield on_s3
    _assert_secret_nowhere(on_s3, store.secret_key, caplog)


def _assert_secret_nowhere(settings: Settings, secret: str, caplog: pytest.LogCaptureFixture) -> None:
    from workers.kafka.typed import read_to_end

    records = [r for topic in _RECORD_TOPICS for r in read_to_end(settings, topic)]
    assert records, "the test wrote no records to check"
    leaked = [r for r in records if secret in repr(r.value)]
    assert not leaked, f"the storage secret is in {len(leaked)} record(s)"
    records_logged = [r for when in ("setup", "call") for r in caplog.get_records(when)]
    assert len(records_logged) > 10, "debug logging was not captured"
    lines = [f"{r.name}: {r.getMessage()}" for r in records_logged if secret in r.getMessage()]
    assert not lines, f"the storage secret is in {len(lines)} log line(s), the first: {lines[0][:200]}"
    assert secret not in repr(settings), "the storage secret is in repr(Settings)"
