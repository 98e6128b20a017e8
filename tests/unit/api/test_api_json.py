"""The REST API's answers without a broker: the same JSON shapes as ``--output json``, every failure
as ``{"error_code", "message"}`` with its HTTP status, and an OpenAPI document that lists exactly
those answers. The real broker and fleet: tests/integration/test_rest_api.py and test_api_fuzz.py."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from fastapi.testclient import TestClient

from tests.unit.test_views_json import fixture, snapshot
from workers.api.app import create_app
from workers.client import BrokerUnavailable, DdlTimeout, HistorySnapshot, MvsClient, NotAuthorized
from workers.config import Settings
from workers.views import history_json, status_json

SETTINGS = Settings(bootstrap_servers="127.0.0.1:1", embedded=False, api_timeout_s=2.0)


@pytest.fixture
def api() -> Iterator[TestClient]:
    with TestClient(create_app(SETTINGS), raise_server_exceptions=False) as client:
        yield client


@pytest.fixture
def statements(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The statements the API published; the coordinator answers each from ``answer``."""
    published: list[str] = []

    def execute(self: MvsClient, sql: str, **kwargs: Any) -> dict[str, Any]:
        published.append(sql)
        if "missing" in sql:
            error = {
                **fixture("TaskError"),
                "code": 1003,
                "message": "materialized view 'missing' does not exist",
            }
            return {"event_id": "e1", "task_id": None, "accepted": False, "error": error, "at": 1}
        if "twice" in sql:
            error = {**fixture("TaskError"), "code": 1002, "message": "already exists"}
            return {"event_id": "e2", "task_id": None, "accepted": False, "error": error, "at": 1}
        return {"event_id": "e3", "task_id": "mv:v", "accepted": True, "error": None, "at": 1}

    monkeypatch.setattr(MvsClient, "execute", execute)
    return published


def reads(monkeypatch: pytest.MonkeyPatch, *, status: Any = None, history: Any = None) -> None:
    def answer(value: Any) -> Any:
        def read(self: MvsClient, *args: Any, **kwargs: Any) -> Any:
            if isinstance(value, BaseException):
                raise value
            return value

        return read

    monkeypatch.setattr(MvsClient, "status_snapshot", answer(status if status is not None else snapshot()))
    monkeypatch.setattr(MvsClient, "history_snapshot", answer(history))


def test_list_and_one_task_are_the_status_shapes(api: TestClient, monkeypatch: pytest.MonkeyPatch) -> None:
    reads(monkeypatch)
    listed = api.get("/mvs")
    assert listed.status_code == 200 and listed.json() == status_json(snapshot(), SETTINGS.namespace)
    one = api.get("/mvs/sales_by_region")
    assert one.status_code == 200 and one.json() == listed.json()["tasks"][0]
    assert api.get("/mvs/mvlog:sales").json()["kind"] == "MV_LOG"
    missing = api.get("/mvs/nothing")
    assert missing.status_code == 404 and missing.json() == {
        "error_code": 1003,
        "message": "no task mv:nothing",
    }


def test_history_is_the_history_shape_and_a_name_without_any_is_404(
    api: TestClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    history = HistorySnapshot("mv:sales_by_region", [fixture("RunRecord")], [])
    reads(monkeypatch, history=history)
    answer = api.get("/mvs/sales_by_region/history", params={"limit": 5})
    assert answer.status_code == 200 and answer.json() == history_json(history)
    reads(monkeypatch, history=HistorySnapshot("mv:nothing", [], []))
    assert api.get("/mvs/nothing/history").status_code == 404
    bad_limit = api.get("/mvs/v/history", params={"limit": 0})
    assert bad_limit.status_code == 400 and bad_limit.json()["error_code"] == 1001


def test_a_statement_is_answered_as_mvs_sql_with_refusals_by_code(
    api: TestClient, statements: list[str]
) -> None:
    ok = api.post("/statements", json={"statement": "REFRESH MATERIALIZED VIEW v"})
    assert ok.status_code == 200
    assert ok.json() == {"event_id": "e3", "accepted": True, "task_id": "mv:v", "error": None}
    unknown = api.post("/statements", json={"statement": "DROP MATERIALIZED VIEW missing"})
    assert unknown.status_code == 404 and unknown.json()["error_code"] == 1003
    duplicate = api.post("/statements", json={"statement": "CREATE ... twice"})
    assert duplicate.status_code == 409 and duplicate.json() == {
        "error_code": 1002,
        "message": "already exists",
    }


def test_actions_publish_the_statement_for_a_checked_name(api: TestClient, statements: list[str]) -> None:
    for action in ("pause", "resume", "refresh", "cancel"):
        assert api.post(f"/mvs/by_region/{action}").status_code == 200
    assert statements == [
        "ALTER MATERIALIZED VIEW `by_region` PAUSE",
        "ALTER MATERIALIZED VIEW `by_region` RESUME",
        "REFRESH MATERIALIZED VIEW `by_region`",
        "CANCEL REFRESH MATERIALIZED VIEW `by_region`",
    ]
    assert api.post("/mvs/missing/pause").status_code == 404
    bad = api.post("/mvs/x` PAUSE; DROP/pause")
    assert bad.status_code in (400, 404) and set(bad.json()) == {"error_code", "message"}
    upper = api.post("/mvs/ByRegion/pause")
    assert upper.status_code == 400 and "lower case" in upper.json()["message"]
    assert len(statements) == 5  # nothing published for the bad names


@pytest.mark.parametrize(
    ("body", "content_type"),
    [(b"{not json", "application/json"), (b"[]", "application/json"), (b'{"sql": "x"}', "application/json"),
     (b"statement=x", "text/plain"), (b"", "application/json")],
)  # fmt: skip
def test_a_bad_body_is_400_with_code_1001_never_a_trace(
    api: TestClient, statements: list[str], body: bytes, content_type: str
) -> None:
    answer = api.post("/statements", content=body, headers={"content-type": content_type})
    assert answer.status_code == 400
    assert answer.json()["error_code"] == 1001 and "Traceback" not in answer.text
    assert statements == []


def test_a_syntax_error_is_400_before_the_broker(api: TestClient) -> None:
    answer = api.post("/statements", json={"statement": "SELEC 1"})
    assert answer.status_code == 400
    assert answer.json() == {
        "error_code": 1001,
        "message": "expected CREATE, ALTER, DROP, REFRESH or CANCEL, found 'SELEC' (line 1, column 1)",
    }


@pytest.mark.parametrize(
    ("raised", "status", "code"),
    [
        (BrokerUnavailable("broker unreachable at 127.0.0.1:1"), 503, 3001),
        (NotAuthorized("not authorized to read mvs.catalog"), 403, 3001),
        (OSError("disk gone"), 503, 2001),
        (KeyError("bug"), 500, None),
    ],
    ids=["outage", "acl", "storage", "bug"],
)
def test_failures_are_status_codes_with_one_line_and_no_trace(
    api: TestClient, monkeypatch: pytest.MonkeyPatch, raised: BaseException, status: int, code: int | None
) -> None:
    reads(monkeypatch, status=raised)
    answer = api.get("/mvs")
    assert answer.status_code == status
    body = answer.json()
    assert set(body) == {"error_code", "message"} and body["error_code"] == code
    assert "Traceback" not in body["message"] and "\n" not in body["message"]


def test_no_coordinator_answer_is_504(api: TestClient, monkeypatch: pytest.MonkeyPatch) -> None:
    def silent(self: MvsClient, sql: str, **kwargs: Any) -> None:
        raise DdlTimeout("no answer from a coordinator within 2s")

    monkeypatch.setattr(MvsClient, "execute", silent)
    answer = api.post("/mvs/v/refresh")
    assert answer.status_code == 504 and answer.json()["error_code"] == 3001


def test_unknown_routes_and_methods_answer_in_the_same_shape(api: TestClient) -> None:
    assert api.get("/nowhere").json() == {"error_code": 1003, "message": "Not Found"}
    wrong = api.delete("/mvs")
    assert wrong.status_code == 405 and wrong.json()["error_code"] == 1001
    assert api.get("/healthz").json() == {"status": "ok"}


def test_openapi_documents_every_answer_and_no_422(api: TestClient) -> None:
    document = api.get("/openapi.json").json()
    assert set(document["paths"]) == {
        "/healthz",
        "/mvs",
        "/overview",
        "/mvs/{name}",
        "/mvs/{name}/history",
        "/statements",
        "/mvs/{name}/pause",
        "/mvs/{name}/resume",
        "/mvs/{name}/refresh",
        "/mvs/{name}/cancel",
        "/explain",
    }
    for path, operations in document["paths"].items():
        for operation in operations.values():
            statuses = set(operation["responses"])
            assert "422" not in statuses, path
            if path == "/explain":  # reads Delta logs only: a refusal is its answer, not an error
                assert {"200", "400"} <= statuses
            elif path != "/healthz":
                assert {"200", "400", "404", "503"} <= statuses, path
    schemas = document["components"]["schemas"]
    assert set(schemas["TaskJson"]["required"]) >= {"task_id", "state", "owner", "lag_versions", "error"}
    assert "HTTPValidationError" not in schemas
    json.dumps(document)
