"""The Spark session a test does its own Spark work in: the oracle's queries and the test's commits to
the bases. The product's code keeps running on the shared session, with its own conf (its runs make run
sessions of their own, ``workers.jobs.spark.session.run_session``)."""

from __future__ import annotations

from typing import Any

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
