"""An MV over an MV not built yet, and an MV log on one, wait for its first refresh: no run, the
reason said once in a run record (what ``mvs status`` shows), a quiet look every WAIT_POLL_S, and
the first run as soon as the upstream's table exists. Fake runner, manual clock (pure scheduling)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.support.maintainer_harness import WAIT, Harness, mv, mv_log
from workers.status import status_table
from workers.worker.upstreams import WAIT_POLL_S


@pytest.fixture
def h() -> Iterator[Harness]:
    harness = Harness()
    yield harness
    harness.executor.shutdown(timeout_s=WAIT)


def _over_upstream(name: str, upstream: str) -> dict[str, object]:
    task = mv(name, "EVERY", 3_600_000, base=upstream)
    task["mv"] = {**task["mv"], "upstream_mvs": [upstream]}
    return task


def test_an_mv_waits_for_its_upstreams_first_refresh_then_runs_at_once(h: Harness) -> None:
    m = h.add(_over_upstream("b", "a"))
    h.tick()
    assert h.refreshes("mv:b") == 0
    [waiting] = h.runs("mv:b")
    assert (waiting["state"], waiting["message"]) == ("SKIPPED", "waiting for a's first refresh")
    status = {"mv:b": {**m.task, **m.status(), "owner": "w"}}
    assert "waiting for a's first refresh" in status_table(status, lambda _t: None)
    for _ in range(3):  # looked at again every poll, said once
        h.clock.advance(WAIT_POLL_S)
        h.tick()
    assert h.refreshes("mv:b") == 0 and len(h.runs("mv:b")) == 1
    h.runner.versions["a"] = 0  # a's first refresh made its table
    h.clock.advance(WAIT_POLL_S)
    h.tick()
    assert h.refreshes("mv:b") == 1
    assert h.runs("mv:b")[-1]["state"] == "COMPLETED"
    assert h.runs("mv:b")[-1]["watermark_after"] == {"a": 0}


def test_an_mv_log_on_an_unbuilt_mv_waits_for_its_table(h: Harness) -> None:
    h.add(mv_log("a", 60_000))
    h.tick()
    assert not [c for c in h.runner.calls if c.kind == "purge"]
    assert h.runs("mvlog:a")[0]["message"].startswith("waiting for table a")
    h.runner.versions["a"] = 0
    h.clock.advance(WAIT_POLL_S)
    h.tick()
    assert [c.task_id for c in h.runner.calls if c.kind == "purge"] == ["mvlog:a"]
