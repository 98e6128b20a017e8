"""Issue 12 item 5: the status page of `mvs serve` in a real browser — Debian's Chromium driven by
Playwright (its Python package; the browser is /usr/bin/chromium, never a download) — against a
running fleet (coordinator + worker with Spark and Delta, real broker): the page shows the fleet's
tasks and the graph sales → by_region → top_regions, then a base change and a refresh issued through
the client show up on the page without a reload. The page's screenshot is a test artifact
(``<tmp>/status-page.png``, copied to ``artifacts/status-page.png``)."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.integration.test_rest_api import api_server
from tests.support.cluster import Cluster, wait_until
from tests.support.sales import BY_REGION, rows
from workers.config import REPO_ROOT, Settings
from workers.demo_tables import append
from workers.embedded.broker import free_port
from workers.warehouse import latest_version, mlog_table_name, table_exists

CHROMIUM = Path("/usr/bin/chromium")
# The machine's network is closed: without the background-networking flags Chromium keeps trying
# (and failing) to reach Google's hosts.
CHROMIUM_FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
PAGE_WAIT_MS = 90_000
ARTIFACT = REPO_ROOT / "artifacts" / "status-page.png"

pytestmark = pytest.mark.skipif(
    not CHROMIUM.exists(),
    reason="Debian's chromium is not installed: infra/setup_browser.sh installs it with apt-get as root",
)


@pytest.fixture(scope="module")
def browser(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """Headless Chromium with a fresh profile (user-data-dir), started once and stopped after this
    module's tests (not kept through the rest of the session)."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        context = playwright.chromium.launch_persistent_context(
            str(tmp_path_factory.mktemp("chromium-profile")),
            executable_path=str(CHROMIUM),
            headless=True,
            args=CHROMIUM_FLAGS,
            viewport={"width": 1500, "height": 1000},
        )
        try:
            yield context
        finally:
            context.close()


def created(cluster: Cluster, statement: str) -> None:
    answer = cluster.sql(statement)
    assert answer["accepted"], answer


def built(cluster: Cluster, task_id: str, base: str) -> dict[str, Any]:
    """The task once its last completed run reflects ``base``'s newest version."""

    def current() -> dict[str, Any] | None:
        task = cluster.task(task_id)
        run = (task or {}).get("last_run") or {}
        newest = latest_version(cluster.settings, base)
        done = run.get("state") == "COMPLETED" and task and task["checkpoint"].get(base) == newest
        return task if done else None

    return wait_until(current, what=f"{task_id} refreshed to {base}'s newest version")


def test_the_page_shows_the_fleet_and_follows_a_refresh_without_reload(
    cluster: Cluster, spark: Any, browser: Any, tmp_path: Path
) -> None:
    created(cluster, "CREATE MATERIALIZED VIEW LOG ON sales PURGE EVERY 1 HOUR")
    # the log's creation commits to sales (it turns the change feed on): let it land first
    wait_until(lambda: table_exists(cluster.settings, mlog_table_name("sales")), what="the MV log on sales")
    created(cluster, f"CREATE MATERIALIZED VIEW by_region REFRESH COMPLETE ON DEMAND AS {BY_REGION}")
    built(cluster, "mv:by_region", "sales")
    # an MV over an MV: the graph's chain; ON CHANGE, so it follows by_region by itself
    created(
        cluster,
        "CREATE MATERIALIZED VIEW top_regions REFRESH COMPLETE ON CHANGE AS "
        "SELECT region, total FROM by_region WHERE total > 40",
    )
    built(cluster, "mv:top_regions", "by_region")

    with api_server(cluster.settings, tmp_path / "serve.log") as api:
        page = browser.new_page()
        errors: list[str] = []
        page.on("pageerror", lambda error: errors.append(str(error)))
        page.goto(f"{api.url}/", wait_until="domcontentloaded")

        # the fleet's tasks, their freshness and the chain sales → by_region → top_regions
        by_region = page.locator('#mvs tr[data-task-id="mv:by_region"]')
        by_region.wait_for(timeout=PAGE_WAIT_MS)
        page.locator('#mvs tr[data-task-id="mv:top_regions"][data-freshness="fresh"]').wait_for(
            timeout=PAGE_WAIT_MS
        )
        assert by_region.get_attribute("data-freshness") == "fresh"
        assert page.locator('#mvlogs tr[data-task-id="mvlog:sales"]').count() == 1
        for edge in ("sales->by_region", "by_region->top_regions"):
            assert page.locator(f'#graph [data-edge="{edge}"]').count() == 1, edge
        columns = [
            page.locator(f'#graph [data-node="{name}"]').bounding_box()["x"]
            for name in ("sales", "by_region", "top_regions")
        ]
        assert columns == sorted(columns) and len(set(columns)) == 3, columns
        assert "· MV log" in (page.locator('#graph [data-node="sales"]').text_content() or "")
        page.locator('.role[data-role="worker"]').first.wait_for(timeout=PAGE_WAIT_MS)
        shown_runs = set(
            page.locator("#runs tr[data-run-id]").evaluate_all("rs => rs.map(r => r.dataset.runId)")
        )
        assert shown_runs, "the runs so far are listed"
        page.evaluate("window.loadedOnce = true")  # gone if the page were reloaded

        # new rows in sales: the ON DEMAND view falls behind (late: it waits for its user) ...
        append(spark, cluster.settings, "sales", rows(100, 6))
        page.locator('#mvs tr[data-task-id="mv:by_region"][data-freshness="late"]').wait_for(
            timeout=PAGE_WAIT_MS
        )
        # the edge it reads says how far behind: one version of sales
        behind = '#graph [data-edge="sales->by_region"][data-behind="1"]'
        page.locator(behind).wait_for(state="attached", timeout=PAGE_WAIT_MS)  # a line: no height
        # ... until a refresh through the client: its run, and top_regions' run after it, appear
        assert cluster.sql("REFRESH MATERIALIZED VIEW by_region")["accepted"]
        new_run = (
            "(shown) => [...document.querySelectorAll('#runs tr[data-run-id]')].some(r =>"
            " r.dataset.taskId === 'mv:{task}' && r.dataset.state === 'COMPLETED'"
            " && !shown.includes(r.dataset.runId))"
        )
        for task in ("by_region", "top_regions"):
            page.wait_for_function(
                new_run.replace("{task}", task), arg=list(shown_runs), timeout=PAGE_WAIT_MS
            )
        # the catalog follows the runs (heartbeats, then the coordinator): both views current again
        for task in ("by_region", "top_regions"):
            page.locator(
                f'#mvs tr[data-task-id="mv:{task}"][data-freshness="fresh"]'
                '[data-lag-versions="0"][data-last-run="COMPLETED"]'
            ).wait_for(timeout=PAGE_WAIT_MS)
        for edge in ("sales->by_region", "by_region->top_regions"):
            current = f'#graph [data-edge="{edge}"][data-behind="0"]'
            page.locator(current).wait_for(state="attached", timeout=PAGE_WAIT_MS)
        manual = page.locator('#runs tr[data-task-id="mv:by_region"]').first
        assert "MANUAL" in manual.inner_text() and "COMPLETED" in manual.inner_text()
        assert page.evaluate("window.loadedOnce") is True
        assert page.locator("#problem").is_hidden() and errors == []

        screenshot = tmp_path / "status-page.png"
        page.screenshot(path=str(screenshot), full_page=True)
        ARTIFACT.parent.mkdir(exist_ok=True)
        shutil.copyfile(screenshot, ARTIFACT)
        page.close()


def test_the_page_says_when_it_cannot_read_the_control_plane(
    settings: Settings, browser: Any, tmp_path: Path
) -> None:
    """No broker at the configured address: the page shows the API's 503 message and keeps polling."""
    gone = Settings.from_env(bootstrap_servers=f"127.0.0.1:{free_port()}", namespace=settings.namespace)
    with api_server(gone, tmp_path / "serve.log", {"MVS_API_TIMEOUT_S": "2"}) as api:
        page = browser.new_page()
        page.goto(f"{api.url}/status", wait_until="domcontentloaded")
        problem = page.locator("#problem")
        problem.wait_for(state="visible", timeout=PAGE_WAIT_MS)
        assert "broker unreachable at 127.0.0.1:" in problem.inner_text()
        assert page.locator("#live").get_attribute("data-state") == "failing"
        page.close()
