"""Property-based fuzzing of `mvs serve` with schemathesis, from the OpenAPI document the server
generates: every operation, with valid and invalid inputs, against the real broker and a real
coordinator, must answer without a 5xx, with a status code the document lists, and with a body
that matches the document's schema. CI-sized: a few examples per operation (well under a minute).

The fleet has no worker (the API needs none; no Spark here): an MV and an MV log are created on an
empty Delta table (a real Delta log, written by hand), so the task shapes are checked on real catalog
entries; the document's example name (``sales_by_region``) is that MV's."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from hypothesis.errors import Unsatisfiable
from schemathesis.checks import not_a_server_error
from schemathesis.generation.modes import GenerationMode
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from tests.integration.test_rest_api import api_server
from tests.support.cluster import Cluster
from workers.config import Settings
from workers.warehouse import DELTA_LOG, local_table_dir

EXAMPLES = 10  # per operation and mode: CI-sized (~30 s)
CHECKS = [not_a_server_error, status_code_conformance, content_type_conformance, response_schema_conformance]


def empty_delta_table(settings: Settings, name: str) -> None:
    """Version 0 of an empty Delta table with one ``id`` column (protocol + metaData actions)."""
    log = local_table_dir(settings, name) / DELTA_LOG
    log.mkdir(parents=True)
    schema = {"type": "struct", "fields": [{"name": "id", "type": "long", "nullable": True, "metadata": {}}]}
    actions = [
        {"protocol": {"minReaderVersion": 1, "minWriterVersion": 2}},
        {
            "metaData": {
                "id": str(uuid.uuid4()),
                "format": {"provider": "parquet", "options": {}},
                "schemaString": json.dumps(schema),
                "partitionColumns": [],
                "configuration": {},
                "createdTime": 0,
            }
        },
    ]
    (log / f"{0:020d}.json").write_text("".join(json.dumps(a) + "\n" for a in actions))


@pytest.fixture
def api_url(settings: Settings, tmp_path: Path) -> Iterator[str]:
    empty_delta_table(settings, "sales")
    cluster = Cluster(settings, workers=0)
    try:
        for statement in (
            "CREATE MATERIALIZED VIEW sales_by_region REFRESH COMPLETE ON DEMAND AS SELECT id FROM sales",
            "CREATE MATERIALIZED VIEW LOG ON sales",
        ):
            assert cluster.sql(statement)["accepted"]
        with api_server(settings, tmp_path / "serve.log") as api:
            yield api.url
    finally:
        cluster.close()


def fuzz(operation: Any, mode: GenerationMode) -> int:
    """Call ``operation`` with up to ``EXAMPLES`` generated inputs of ``mode``, checking each answer;
    how many calls were made (0: the operation has no input that ``mode`` can make)."""
    calls: list[int] = []

    @given(case=operation.as_strategy(mode))
    @settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=list(HealthCheck))
    def answers_within_the_document(case: Any) -> None:
        case.call_and_validate(checks=CHECKS, timeout=60)
        calls.append(1)

    try:
        answers_within_the_document()
    except Unsatisfiable:
        assert mode is GenerationMode.NEGATIVE, operation.label  # nothing to make invalid
    return len(calls)


def test_every_operation_answers_within_its_document(api_url: str) -> None:
    """Each operation: valid inputs (the document's examples first), then invalid ones where the
    operation has inputs to break (a body, a query parameter)."""
    schema = schemathesis.openapi.from_url(f"{api_url}/openapi.json")
    calls: dict[tuple[str, GenerationMode], int] = {}
    for result in schema.get_all_operations():
        operation = result.ok()
        for mode in GenerationMode:
            calls[operation.label, mode] = fuzz(operation, mode)
    assert len({label for label, _ in calls}) == 11  # POST /explain among them
    assert all(n > 0 for (_, mode), n in calls.items() if mode is GenerationMode.POSITIVE), calls
    assert calls["POST /statements", GenerationMode.NEGATIVE] > 0
    assert calls["GET /mvs/{name}/history", GenerationMode.NEGATIVE] > 0
