"""Issue 12 item 4: `mvs serve` as an operator runs it (its own process) against the real broker and a
fleet (coordinator + worker with Spark and Delta, in the test process): list, CREATE through POST,
refresh, pause / resume / refresh / cancel, and the 4xx / 503 answers. The fuzzer is test_api_fuzz.py."""

from __future__ import annotations

import json
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.integration.cluster import Cluster, wait_until
from tests.integration.processes import role_env
from tests.integration.sales import BY_REGION, rows
from workers.config import REPO_ROOT, Settings
from workers.demo_tables import append
from workers.embedded.broker import free_port
from workers.warehouse import latest_version


@dataclass
class Api:
    """A running `mvs serve` process and plain HTTP calls to it (status, decoded JSON body)."""

    url: str
    process: subprocess.Popen[bytes]

    def call(self, method: str, path: str, body: bytes | None = None) -> tuple[int, Any]:
        request = urllib.request.Request(self.url + path, data=body, method=method)
        if body is not None:
            request.add_header("Content-Type", "application/json")
        try:
            with urllib.request.urlopen(request, timeout=60) as response:
                return response.status, json.loads(response.read())
        except urllib.error.HTTPError as error:
            return error.code, json.loads(error.read())

    def get(self, path: str) -> tuple[int, Any]:
        return self.call("GET", path)

    def post(self, path: str, document: Any = None) -> tuple[int, Any]:
        return self.call("POST", path, None if document is None else json.dumps(document).encode())

    def children(self) -> list[str]:
        """Processes the server started (a Spark JVM would be one)."""
        pid = self.process.pid
        return Path(f"/proc/{pid}/task/{pid}/children").read_text().split()


@contextmanager
def api_server(settings: Settings, log: Path, extra: Mapping[str, str] | None = None) -> Iterator[Api]:
    """`python -m workers.cli serve` on a free port with the role environment of ``settings``,
    answering /healthz before it is handed out; stopped with SIGTERM."""
    port = free_port()
    with log.open("wb") as output:
        process = subprocess.Popen(
            [sys.executable, "-m", "workers.cli", "serve", "--port", str(port)],
            cwd=REPO_ROOT,
            env=role_env(settings, "api", {"MVS_API_TIMEOUT_S": "20", **(extra or {})}),
            stdout=output,
            stderr=subprocess.STDOUT,
        )
    api = Api(f"http://127.0.0.1:{port}", process)
    try:

        def healthy() -> bool:
            assert process.poll() is None, f"mvs serve exited: {log.read_text()}"
            try:
                return api.get("/healthz") == (200, {"status": "ok"})
            except OSError:
                return False

        wait_until(healthy, timeout_s=60, what="mvs serve answering /healthz")
        yield api
    finally:
        process.terminate()
        process.wait(30)


@pytest.fixture
def api(settings: Settings, tmp_path: Path) -> Iterator[Api]:
    with api_server(settings, tmp_path / "serve.log") as server:
        yield server


def task(api: Api, name: str) -> dict[str, Any] | None:
    status, body = api.get(f"/mvs/{name}")
    return body if status == 200 else None


def test_create_refresh_pause_resume_through_the_api(cluster: Cluster, api: Api, spark: Any) -> None:
    status, listed = api.get("/mvs")
    assert status == 200 and listed["tasks"] == [] and listed["namespace"] == cluster.settings.namespace
    statement = f"CREATE MATERIALIZED VIEW by_region REFRESH COMPLETE EVERY 1 HOUR AS {BY_REGION}"
    status, answer = api.post("/statements", {"statement": statement})
    assert (status, answer["accepted"], answer["task_id"]) == (200, True, "mv:by_region")

    def refreshed(version: int) -> dict[str, Any] | None:
        shown = task(api, "by_region")
        done = shown and shown["last_run"] and shown["last_run"]["state"] == "COMPLETED"
        return shown if done and shown["watermark"] == {"sales": version} else None

    first = wait_until(
        lambda: refreshed(latest_version(cluster.settings, "sales") or 0), what="first refresh"
    )
    assert first["owner"] == "worker-0" and first["lag_versions"] == 0 and first["state"] == "NORMAL"
    assert first["last_run"]["started_at"].endswith("Z") and first["last_run"]["rows_written"] > 0
    status, listed = api.get("/mvs")
    assert [t["task_id"] for t in listed["tasks"]] == ["mv:by_region"]

    def roles() -> set[tuple[str, str]]:  # empty while a group rebalances
        return {(r["role"], r["name"]) for r in api.get("/mvs")[1]["roles"]}

    wait_until(lambda: ("worker", "worker-0") in roles(), what="the worker among the live roles")

    assert api.post("/mvs/by_region/pause")[0] == 200
    wait_until(lambda: (task(api, "by_region") or {}).get("state") == "PAUSED", what="paused")
    assert api.post("/mvs/by_region/resume")[0] == 200
    wait_until(lambda: (task(api, "by_region") or {}).get("state") == "NORMAL", what="resumed")

    append(spark, cluster.settings, "sales", rows(100, 5))
    newest = latest_version(cluster.settings, "sales")
    assert api.post("/mvs/by_region/refresh")[0] == 200  # EVERY 1 HOUR: only this refreshes it now

    def manual_run() -> dict[str, Any] | None:
        status, history = api.get("/mvs/by_region/history?limit=50")
        assert status == 200 and history["task_id"] == "mv:by_region"
        runs = [r for r in history["runs"] if r["trigger"] == "MANUAL" and r["state"] == "COMPLETED"]
        return history if runs and runs[-1]["watermark_after"] == {"sales": newest} else None

    history = wait_until(manual_run, what="the refresh asked for through the API")
    # the catalog follows the run record (the worker's heartbeat, then the coordinator)
    assert wait_until(lambda: refreshed(newest), what="the catalog at the new version")["lag_versions"] == 0
    assert [d["action"] for d in history["ddl"]] == ["CREATE_MV", "PAUSE", "RESUME", "REFRESH"]
    assert all(d["accepted"] for d in history["ddl"])
    assert len(api.get("/mvs/by_region/history?limit=1")[1]["runs"]) == 1

    status, cancelled = api.post("/mvs/by_region/cancel")
    assert status == 200 and cancelled["accepted"]
    assert api.children() == []  # the API never started Spark (or anything else)


def test_bad_requests_are_4xx_with_the_error_code(cluster: Cluster, api: Api) -> None:
    status, body = api.call("POST", "/statements", b"{not json")
    assert status == 400 and body["error_code"] == 1001 and body["message"].startswith("invalid request: ")
    status, body = api.post("/statements", {"statement": "CREATE MATERIALIZED VIEW v AS SELEC"})
    assert status == 400 and body["error_code"] == 1001
    assert api.get("/mvs/nothing") == (404, {"error_code": 1003, "message": "no task mv:nothing"})
    assert api.get("/mvs/nothing/history")[0] == 404
    # the coordinator's own refusal of an unknown MV, as `mvs sql` prints it (ERROR 1003)
    status, body = api.post("/mvs/nothing/pause")
    assert status == 404 and body == {
        "error_code": 1003,
        "message": "materialized view 'nothing' does not exist",
    }
    statement = "CREATE MATERIALIZED VIEW twice REFRESH COMPLETE ON DEMAND AS SELECT id FROM sales"
    assert api.post("/statements", {"statement": statement})[0] == 200
    status, body = api.post("/statements", {"statement": statement})
    assert status == 409 and body["error_code"] == 1002
    assert api.post("/mvs/Upper/pause")[0] == 400
    assert api.call("DELETE", "/mvs")[0] == 405


def test_a_broker_outage_is_503_with_a_clear_message(settings: Settings, tmp_path: Path) -> None:
    """No broker at the configured address: every call that needs one is a 503 within the timeout."""
    gone = Settings.from_env(bootstrap_servers=f"127.0.0.1:{free_port()}", namespace=settings.namespace)
    with api_server(gone, tmp_path / "serve.log", {"MVS_API_TIMEOUT_S": "2"}) as api:
        for method, path in (("GET", "/mvs"), ("GET", "/mvs/v"), ("POST", "/mvs/v/refresh")):
            status, body = api.call(method, path)
            assert status == 503, (path, body)
            assert body["error_code"] == 3001 and body["message"].startswith(
                "broker unreachable at 127.0.0.1:"
            )
        assert api.get("/healthz")[0] == 200
