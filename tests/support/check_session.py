"""The Spark session a test does its own Spark work in: the oracle's queries and the test's commits to
the bases. The product's code keeps running on the shared session, with its own conf (its runs make run
sessions of their own, ``workers.jobs.spark.session.run_session``)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from workers import warehouse
from workers.config import Settings
from workers.jobs.spark.session import ADAPTIVE, INTERPRETED


def checking_session(spark: Any) -> Any:
    """A new session on ``spark``'s context (its own temp views; the process's static conf) that
    interprets its plans and runs without adaptive execution. A test's queries and commits are tiny and
    each a new plan: generating code for every one, and a job per shuffle stage, cost more than the rows
    (measured: the HAVING property test 242 → 225 CPU-s, the two runs side by side). Results do not
    depend on it. Only for tiny data: the fleet tests' oracle of their slow MV (a self-join of 14,000
    rows) took 3-6x as long interpreted (three fleet tests 516 s → 94 s back on the shared session)."""
    session = spark.newSession()
    session.conf.set(ADAPTIVE, "false")
    for key, value in INTERPRETED.items():
        session.conf.set(key, value)
    return session


class BaseViews:
    """Temp views in ``session`` named like the bases, each the base ``VERSION AS OF`` the version last
    shown. A version never changes, and the MVs of a round share their watermark: each base version is
    loaded once for all of them (``cache``: its rows kept in memory too, until another version of it)."""

    def __init__(self, session: Any, settings: Settings, *, cache: bool = False) -> None:
        self.session, self.settings, self.cache = session, settings, cache
        self.shown: dict[str, tuple[int, Any]] = {}  # base -> (version, its frame)

    def show(self, watermark: Mapping[str, int]) -> None:
        for base, version in watermark.items():
            held = self.shown.get(base)
            if held is not None and held[0] == version:
                continue
            if held is not None and self.cache:
                held[1].unpersist()
            path = warehouse.table_path(self.settings, base)
            frame = self.session.read.format("delta").option("versionAsOf", version).load(path)
            frame = frame.cache() if self.cache else frame
            frame.createOrReplaceTempView(base)
            self.shown[base] = (version, frame)
