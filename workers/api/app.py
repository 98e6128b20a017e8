"""The REST API's routes (README "REST API"): read state and publish DDL through ``MvsClient``, the
same calls the CLI makes, answered in the shapes of ``workers.views``.

Routes are plain (sync) functions: FastAPI runs them on its thread pool, and each request's client
calls are bounded by ``Settings.api_timeout_s`` (plus the CLI's watchdog for what the deadlines
cannot bound), so a broker outage is a 503 in bounded time, never a hung request.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from fastapi import Body, FastAPI, Path, Query, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import BaseModel, Field
from starlette.exceptions import HTTPException
from typing_extensions import TypedDict

from workers.api.errors import ApiError, ApiErrorJson, api_error, bad_request, not_found, refusal
from workers.api.overview import OverviewJson, read_overview
from workers.api.page import add_status_page
from workers.catalog.errors import ErrorCode
from workers.catalog.names import mv_name_problem
from workers.client import MvsClient, task_id_of
from workers.config import Settings
from workers.explain import ExplainJson, explain
from workers.failures import within
from workers.views import (
    HistoryJson,
    StatementJson,
    StatusJson,
    TaskJson,
    history_json,
    snapshot_task_json,
    statement_json,
    status_json,
)

T = TypeVar("T")
ISSUED_BY = "mvs-api"
MAX_HISTORY = 10_000
# The statement each action route publishes, for an MV name already checked against the name rule.
ACTIONS = {
    "pause": "ALTER MATERIALIZED VIEW `{name}` PAUSE",
    "resume": "ALTER MATERIALIZED VIEW `{name}` RESUME",
    "refresh": "REFRESH MATERIALIZED VIEW `{name}`",
    "cancel": "CANCEL REFRESH MATERIALIZED VIEW `{name}`",
}


# A path's MV name (or task id, where the route says so), with a realistic example for the docs.
NAME = Path(description="an MV name, e.g. sales_by_region", examples=["sales_by_region"])


class StatementRequest(BaseModel):
    """One DDL statement, as ``mvs sql`` takes it (grammar: docs/GRAMMAR.md)."""

    statement: str = Field(
        description="one DDL statement",
        examples=[
            "CREATE MATERIALIZED VIEW sales_by_region REFRESH COMPLETE EVERY 30 SECONDS AS "
            "SELECT region, sum(amount) AS total FROM sales GROUP BY region"
        ],
    )


class HealthJson(TypedDict):
    status: str


def _errors(*statuses: int) -> dict[int | str, dict[str, Any]]:
    return {status: {"model": ApiErrorJson} for status in statuses}


# What a route reading the bus may answer besides 200; DDL routes add their refusals and 504.
READ_ERRORS = _errors(400, 403, 404, 503)
DDL_ERRORS = _errors(400, 403, 404, 409, 503, 504)


def _error_response(error: ApiError) -> JSONResponse:
    return JSONResponse(status_code=error.status, content=error.body())


def _install_error_handlers(app: FastAPI, settings: Settings) -> None:
    async def on_api_error(request: Request, exc: Exception) -> JSONResponse:
        return _error_response(api_error(exc, settings))

    async def on_invalid_request(request: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, RequestValidationError)
        problems = "; ".join(
            f"{'.'.join(str(part) for part in error.get('loc', ()))}: {error.get('msg', 'invalid')}"
            for error in exc.errors()
        )
        return _error_response(bad_request(f"invalid request: {problems or 'unreadable body'}"))

    async def on_http_error(request: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, HTTPException)
        code = ErrorCode.NOT_FOUND if exc.status_code == 404 else ErrorCode.INVALID_CONFIG
        error = ApiError(exc.status_code, int(code), str(exc.detail))
        return JSONResponse(status_code=error.status, content=error.body(), headers=exc.headers)

    app.add_exception_handler(ApiError, on_api_error)
    app.add_exception_handler(RequestValidationError, on_invalid_request)
    app.add_exception_handler(HTTPException, on_http_error)
    app.add_exception_handler(Exception, on_api_error)


def _documented_errors_only(app: FastAPI) -> None:
    """The OpenAPI document without FastAPI's default 422 answers: invalid requests are 400 here."""
    build = app.openapi

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            document = build()
            for path in document.get("paths", {}).values():
                for operation in path.values():
                    operation.get("responses", {}).pop("422", None)
            for name in ("HTTPValidationError", "ValidationError"):
                document.get("components", {}).get("schemas", {}).pop(name, None)
            app.openapi_schema = document
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]


def create_app(settings: Settings) -> FastAPI:
    """The API over the control plane of ``settings.namespace``."""
    app = FastAPI(
        title="mvs",
        version="1",
        description="Materialized views over Delta Lake kept fresh by workers on Kafka: task status, "
        "run history, DDL. Errors are {error_code, message}, with the codes of docs/ARCHITECTURE.md "
        "'Error codes'.",
    )
    _install_error_handlers(app, settings)
    _documented_errors_only(app)
    timeout_s = settings.api_timeout_s

    def call(read: Callable[[MvsClient], T]) -> T:
        """``read(client)`` within the request's timeout, on a client of its own (thread-safe)."""
        client = MvsClient(settings, issued_by=ISSUED_BY, quiet_kafka_logs=True)
        try:
            return within(timeout_s, lambda: read(client))
        except Exception as exc:  # answered here, so the server does not log it as a crash too
            raise api_error(exc, settings) from exc
        finally:
            client.close()

    def execute(statement: str) -> StatementJson:
        result = call(lambda client: client.execute(statement, timeout_s=timeout_s))
        assert result is not None  # execute waits for the answer
        if not result["accepted"]:
            error = result["error"] or {}
            raise refusal(error.get("code", int(ErrorCode.INVALID_CONFIG)), error.get("message", "refused"))
        return statement_json(result)

    @app.get("/healthz", response_model=HealthJson, tags=["health"])
    def healthz() -> HealthJson:
        """The process serves (it does not touch the broker)."""
        return {"status": "ok"}

    @app.get("/mvs", response_model=StatusJson, responses=READ_ERRORS, tags=["tasks"])
    def list_tasks() -> StatusJson:
        """Every MV and MV log with state, owner, lag and last error; the live roles
        (as ``mvs status --output json``)."""
        snapshot = call(lambda client: client.status_snapshot(timeout_s=timeout_s))
        return status_json(snapshot, settings.namespace)

    @app.get("/overview", response_model=OverviewJson, responses=READ_ERRORS, tags=["status page"])
    def overview() -> OverviewJson:
        """What the status page (``GET /``) shows, in one document: every task and role (as
        ``GET /mvs``), the dependency graph base tables → MVs, each MV's freshness against its
        trigger or TARGET LAG, and the newest runs of all tasks (newest first) with their messages."""
        return call(lambda client: read_overview(client, settings, timeout_s))

    @app.get("/mvs/{name}", response_model=TaskJson, responses=READ_ERRORS, tags=["tasks"])
    def get_task(name: str = NAME) -> TaskJson:
        """One task: an MV by name (``by_region``) or any task by id (``mvlog:sales``)."""
        task_id = task_id_of(name)
        snapshot = call(lambda client: client.status_snapshot(timeout_s=timeout_s))
        if task_id not in snapshot.tasks:
            raise not_found(f"no task {task_id}")
        return snapshot_task_json(snapshot, task_id)

    @app.get("/mvs/{name}/history", response_model=HistoryJson, responses=READ_ERRORS, tags=["tasks"])
    def get_history(name: str = NAME, limit: int = Query(30, ge=1, le=MAX_HISTORY)) -> HistoryJson:
        """The task's last ``limit`` runs and DDL statements, oldest first (as ``mvs history
        --output json``); a dropped MV keeps its history, a name that never had any is 404."""
        task_id = task_id_of(name)
        snapshot = call(lambda client: client.history_snapshot(task_id, limit, timeout_s=timeout_s))
        if not snapshot.runs and not snapshot.ddl and not snapshot.notes:
            raise not_found(f"no task {task_id} and no history of one")
        return history_json(snapshot)

    @app.post("/statements", response_model=StatementJson, responses=DDL_ERRORS, tags=["ddl"])
    def post_statement(request: StatementRequest) -> StatementJson:
        """Publish one DDL statement and wait for the coordinator's answer (as ``mvs sql``):
        200 when accepted, else the refusal's code (404 unknown MV, 409 duplicate, 400 invalid)."""
        return execute(request.statement)

    @app.post("/explain", response_model=ExplainJson, responses=_errors(400), tags=["ddl"])
    def post_explain(statement: str = Body(..., media_type="text/plain")) -> ExplainJson:
        """EXPLAIN the body, a ``CREATE MATERIALIZED VIEW`` statement, without creating anything (as
        ``mvs explain --output json``): FAST or not and why, the plan and its rules, the MV logs the
        bases still need, the helper state. A statement that would be refused says so (``accepted``
        false, ``error``)."""
        return explain(settings, statement)

    def add_action(action: str, template: str) -> None:
        def act(name: str = NAME) -> StatementJson:
            problem = mv_name_problem(name)
            if problem is not None:
                raise bad_request(problem)
            return execute(template.format(name=name))

        act.__doc__ = f"Publish ``{template.format(name='<name>')}`` and wait for the answer."
        app.post(
            f"/mvs/{{name}}/{action}",
            response_model=StatementJson,
            responses=DDL_ERRORS,
            tags=["ddl"],
            operation_id=f"{action}_mv",
            summary=f"{action.capitalize()} an MV",
        )(act)

    for action, template in ACTIONS.items():
        add_action(action, template)
    add_status_page(app)
    return app
