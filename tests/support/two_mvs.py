"""The two MVs over ``sales`` the outage tests keep while a part of the system is killed: one
COMPLETE EVERY 3 SECONDS, one FAST ON CHANGE (over its MV log)."""

from __future__ import annotations

import time
from typing import Any

from tests.support.cluster import wait_until
from tests.support.fleet import assert_applied_once, refresh_commits, unended_runs
from tests.support.processes import Fleet, Role
from tests.support.sales import mv_rows, query_rows
from workers.client import MvsClient
from workers.config import Settings
from workers.warehouse import latest_version

BY_REGION = "SELECT region, sum(amount) AS total, count(*) AS orders FROM sales GROUP BY region"
BIG = "SELECT id, region, amount FROM sales WHERE amount > 15"
MVS = {"by_region": BY_REGION, "big": BIG}


def mv_current(client: MvsClient, spark: Any, settings: Settings, name: str) -> bool:
    """The MV reports the latest version of ``sales`` and its table equals its query."""
    task = client.tasks().get(f"mv:{name}")
    if not task or task["checkpoint"].get("sales") != latest_version(settings, "sales"):
        return False
    return mv_rows(spark, settings, name) == query_rows(spark, settings, MVS[name])


def create_two_mvs(client: MvsClient, spark: Any, settings: Settings) -> None:
    """The MV log and both MVs, through the user's path; returns once both are built."""
    for sql in (
        "CREATE MATERIALIZED VIEW LOG ON sales",
        f"CREATE MATERIALIZED VIEW by_region REFRESH COMPLETE EVERY 3 SECONDS AS {BY_REGION}",
        f"CREATE MATERIALIZED VIEW big REFRESH FAST ON CHANGE AS {BIG}",
    ):
        result = client.execute(sql, timeout_s=60)
        assert result is not None and result["accepted"], (sql, result)
    wait_until_current(client, spark, settings, "built", timeout_s=180)


def wait_until_current(
    client: MvsClient, spark: Any, settings: Settings, what: str, timeout_s: float
) -> None:
    for name in MVS:
        wait_until(
            lambda n=name: mv_current(client, spark, settings, n), timeout_s=timeout_s, what=f"{name} {what}"
        )


def assert_whole_after_outage(spark: Any, settings: Settings, fleet: Fleet, roles: list[Role]) -> None:
    """What an outage must not have cost once every MV caught up: each refresh applied once, every
    run that started ended, every role process alive."""
    for name in MVS:
        assert_applied_once(refresh_commits(spark, settings, name))
    now_ms = int(time.time() * 1000)
    wait_until(lambda: not unended_runs(settings, now_ms), timeout_s=120, what="every started run ended")
    dead = [(r.name, r.process.returncode) for r in roles if not r.alive]
    assert not dead, f"role processes died: {dead}\n{fleet.logs()}"
