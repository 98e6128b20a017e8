"""The no-JVM Delta log readers of ``workers.warehouse`` on a local table whose log is written here,
line by line as Delta writes it (the object-store variants of the integration tests read Spark's)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from workers import warehouse
from workers.config import Settings, StorageSettings

SCHEMA = {"type": "struct", "fields": [{"name": "a", "type": "long", "nullable": True, "metadata": {}}]}


def write_log(table: Path, commits: int) -> None:
    log = table / warehouse.DELTA_LOG
    log.mkdir(parents=True)
    for version in range(commits):
        actions: list[dict[str, object]] = [
            {"commitInfo": {"timestamp": 1_700_000_000_000 + version, "operation": "WRITE"}},
            {"txn": {"appId": "mv:x", "version": version}},
        ]
        if version == 0:
            actions += [
                {"protocol": {"minReaderVersion": 1, "minWriterVersion": 2}},
                {
                    "metaData": {
                        "id": "t",
                        "format": {"provider": "parquet", "options": {}},
                        "schemaString": json.dumps(SCHEMA),
                        "partitionColumns": [],
                        "configuration": {},
                    }
                },
            ]
        (log / f"{version:020d}.json").write_text("\n".join(json.dumps(a) for a in actions) + "\n")
    (log / f"{commits - 1:020d}.crc").write_text(json.dumps({"numFiles": 0, "tableSizeBytes": 0}))
    # Delta's in-flight temp files and checkpoints are not commits.
    (log / f".{commits:020d}.json.0a1b.tmp").write_text("{}")


@pytest.fixture
def settings(tmp_path: Path) -> Settings:
    write_log(tmp_path / "wh" / "t", commits=3)
    return Settings(warehouse=str(tmp_path / "wh"))


def test_latest_version_and_existence(settings: Settings) -> None:
    assert warehouse.latest_version(settings, "t") == 2 and warehouse.table_exists(settings, "t")
    assert warehouse.latest_version(settings, "missing") is None
    assert warehouse.latest_version(Settings(warehouse="/nonexistent/warehouse"), "t") is None


def test_commit_and_checksum_reads_through_the_object_store(settings: Settings) -> None:
    actions = warehouse.read_commit(settings, "t", 1)
    assert actions == [
        {"commitInfo": {"timestamp": 1_700_000_000_001, "operation": "WRITE"}},
        {"txn": {"appId": "mv:x", "version": 1}},
    ]
    with pytest.raises(FileNotFoundError):
        warehouse.read_commit(settings, "t", 7)
    with pytest.raises(FileNotFoundError):
        warehouse.read_commit(Settings(warehouse="/nonexistent/warehouse"), "t", 0)
    assert warehouse.read_checksum(settings, "t", 2) == {"numFiles": 0, "tableSizeBytes": 0}
    assert warehouse.read_checksum(settings, "t", 1) is None


def test_file_uri_warehouse_reads_the_same_table(settings: Settings) -> None:
    as_uri = Settings(warehouse=Path(settings.warehouse).as_uri())
    assert warehouse.latest_version(as_uri, "t") == 2
    assert warehouse.read_commit(as_uri, "t", 0)[0]["commitInfo"]["operation"] == "WRITE"


def test_delete_table_removes_its_folder_and_ignores_a_missing_one(settings: Settings) -> None:
    warehouse.delete_table(settings, "t")
    assert not (Path(settings.warehouse) / "t").exists() and warehouse.latest_version(settings, "t") is None
    warehouse.delete_table(settings, "t")


def test_table_columns_come_from_the_checksum_else_from_the_log(settings: Settings, tmp_path: Path) -> None:
    # The checksum of the latest version has no schema here: delta-rs reads the log's metaData.
    assert warehouse.table_columns(settings, "t") == ("a",)
    assert warehouse.table_columns(settings, "missing") is None
    wider = {"fields": [{"name": "a"}, {"name": "B_col"}]}
    crc = tmp_path / "wh" / "t" / warehouse.DELTA_LOG / f"{2:020d}.crc"
    crc.write_text(json.dumps({"metadata": {"schemaString": json.dumps(wider)}}))
    assert warehouse.table_columns(settings, "t") == ("a", "B_col")


def test_a_quick_look_at_an_object_store_makes_one_attempt(monkeypatch: pytest.MonkeyPatch) -> None:
    # A look from a loop thread must not wait through the store client's retries (issue 32).
    opened: list[dict[str, str] | None] = []

    class Table:
        def __init__(self, uri: str, version: int | None, storage_options: dict[str, str] | None) -> None:
            opened.append(storage_options)

        def version(self) -> int:
            return 7

    monkeypatch.setattr(warehouse, "DeltaTable", Table)
    settings = Settings(warehouse="s3a://bucket/wh", storage=StorageSettings(endpoint="http://127.0.0.1:9"))
    assert warehouse.latest_version(settings, "sales", quick=True) == 7
    assert warehouse.latest_version(settings, "sales") == 7
    quick, patient = opened
    assert quick is not None and quick["max_retries"] == "0" and "connect_timeout" in quick
    assert patient is not None and "max_retries" not in patient
