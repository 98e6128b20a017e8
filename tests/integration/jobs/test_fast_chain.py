"""A two-level pipeline refreshed FAST along its edges, proven equal to recomputation.

A base table with its MV log, MV ``a`` over it (a projection/filter), an MV log on ``a`` (its table's
change data feed), and MV ``b`` over ``a`` (an aggregate). Hypothesis draws change streams on the
base (inserts, duplicates, updates moving rows between groups, deletes, delete-all, purges of both
logs below their readers' watermarks); after every round ``a`` refreshes (FAST, or COMPLETE in some
rounds: an overwrite's change rows must serve ``b`` too), then ``b`` FAST over ``a``'s changes. After
each refresh, through the real jobs on real Spark and Delta:

- each MV holds exactly the multiset its query returns over its inputs at its watermark;
- ``b`` equals the composed query over the base at the version ``a``'s commit at ``b``'s watermark
  reflects (read from ``a``'s commit metadata, as any Delta reader can): a consistent cut.

CI size: the explicit example (two rounds: a complete refresh of both mid-round, FAST, then a COMPLETE
of ``a``) only, by the suite's time budget (``phases_for_ci``); generated streams
(``HYPOTHESIS_PROFILE=long`` for more).
"""

from __future__ import annotations

import os
import shutil
import uuid
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from tests.support.fast_checks import multiset_difference, phases_for_ci
from tests.support.fast_shapes import SCHEMA
from tests.support.fast_streams import (
    BaseModel,
    DeleteAll,
    Insert,
    MoveGroup,
    Purge,
    Recompute,
    Stream,
    Update,
    streams,
)
from tests.support.run_requests import run_request
from workers import demo_tables as tables
from workers import warehouse
from workers.config import Settings
from workers.ddl import analyze_query, plan_record
from workers.jobs import complete as refresh
from workers.jobs.changes import mvlog
from workers.jobs.delta import log as deltalog
from workers.jobs.fast import refresh as incremental
from workers.worker.runner import SparkRunner

pytestmark = pytest.mark.integration

PROFILE = os.environ.get("HYPOTHESIS_PROFILE", "ci")
MAX_ROUNDS = 1 if PROFILE == "ci" else 4

A_QUERY = "SELECT id, k1, v, d FROM {base} WHERE v IS NOT NULL OR k1 = 'a'"
B_QUERY = "SELECT k1, COUNT(*) AS n, SUM(v) AS s_v, MIN(v) AS lo_v, SUM(d) AS s_d FROM {a} GROUP BY k1"
# b over the base, as a reader composing the two would write it.
COMPOSED = (
    "SELECT k1, COUNT(*) AS n, SUM(v) AS s_v, MIN(v) AS lo_v, SUM(d) AS s_d FROM "
    "(SELECT id, k1, v, d FROM {base} WHERE v IS NOT NULL OR k1 = 'a') GROUP BY k1"
)


@pytest.fixture(scope="module")
def chain_settings(tmp_path_factory: pytest.TempPathFactory) -> Settings:
    return Settings(warehouse=str(Path(tmp_path_factory.mktemp("fast-chain")) / "warehouse"))


class Chain:
    """base → a → b, with the oracle: queries over temp views pinned at versions."""

    def __init__(self, spark: Any, settings: Settings) -> None:
        self.spark, self.settings = spark, settings
        prefix = f"c{uuid.uuid4().hex[:12]}"
        self.base, self.a, self.b = prefix, f"{prefix}_a", f"{prefix}_b"
        self.queries = {self.a: A_QUERY.format(base=self.base), self.b: B_QUERY.format(a=self.a)}
        self.model = BaseModel()
        self.oracle = spark.newSession()
        self.runs = 0
        self.log: list[str] = []

    def create(self, first: Insert) -> None:
        commit = self.model.commit_for(first)
        assert commit is not None
        tables.create_table(self.spark, self.settings, self.base, commit.rows, SCHEMA)
        mvlog.create_mv_log(self.spark, self.settings, self.base)
        self._complete(self.a)
        # The MV log on an MV: its table's change data feed on, its changes captured like a base's.
        mvlog.create_mv_log(self.spark, self.settings, self.a)
        self._complete(self.b)

    def drop(self) -> None:
        names = [self.b, self.a, self.base, warehouse.mlog_table_name(self.a)]
        names += [warehouse.mlog_table_name(self.base), warehouse.state_table_name(self.b)]
        for name in names:
            shutil.rmtree(warehouse.local_table_dir(self.settings, name), ignore_errors=True)
            deltalog.forget_table(self.settings, name)
        for view in (self.base, self.a):
            self.oracle.catalog.dropTempView(view)

    def apply(self, op: Any) -> None:
        if isinstance(op, Purge):  # each log below the lowest watermark of its readers, as the tasks do
            for table, reader in ((self.base, self.a), (self.a, self.b)):
                safepoint = self.watermark(reader)[table]
                result = mvlog.purge(self.spark, self.settings, table, safepoint=safepoint)
                self.log.append(f"purge {table} below v{safepoint}: {result.message}")
            return
        if isinstance(op, Recompute):  # a complete refresh of both, each checked; b's next FAST run
            self._complete(self.a)  # catches its helper state up across it
            self._complete(self.b)
            return
        commit = self.model.commit_for(op)
        assert commit is not None
        if commit.statement is None:
            tables.append(self.spark, self.settings, self.base, commit.rows)
        else:
            path = warehouse.table_path(self.settings, self.base)
            self.spark.sql(commit.statement.format(t=f"delta.`{path}`"))
        self.log.append(f"{op} -> {self.base} v{warehouse.latest_version(self.settings, self.base)}")

    def refresh_round(self, a_complete: bool) -> None:
        self.runs += 1
        if a_complete:
            self._complete(self.a)
        else:
            self._fast(self.a)
        self._fast(self.b)

    def _complete(self, mv: str) -> None:
        self.runs += 1
        request = run_request(self.settings, mv, self.queries[mv], run=f"c{self.runs}")
        result = refresh.refresh_complete(self.spark, self.settings, request)
        self.log.append(f"complete {mv} -> {request.pinned}: {result.message}")
        self.check(mv)

    def _fast(self, mv: str) -> None:
        before = self.watermark(mv)
        request = run_request(self.settings, mv, self.queries[mv], mode="FAST", run=f"f{self.runs}")
        try:
            result = incremental.refresh_incremental(self.spark, self.settings, request)
        except incremental.FastRefreshNotPossible as why:
            raise AssertionError(f"{mv}: FAST refused: {why.reason}\n{self.story()}") from why
        self.log.append(f"fast {mv} {before} -> {request.pinned}: {result.message}")
        if dict(request.pinned) != before:
            assert result.message.startswith("incremental:"), f"{mv}: {result.message}\n{self.story()}"
        assert self.watermark(mv) == dict(request.pinned)
        self.check(mv)

    def check(self, mv: str) -> None:
        watermark = self.watermark(mv)
        self._expect(mv, self.queries[mv], watermark)
        if mv == self.b:
            # The consistent cut: b reflects a at a version whose commit names the base version it
            # reflects; b is the composed query over the base at that version.
            found = refresh.read_watermark(None, self.settings, self.a, at=watermark[self.a])
            assert found is not None and set(found.watermark) == {self.base}, found
            self._expect(mv, COMPOSED.format(base=self.base), dict(found.watermark))

    def _expect(self, mv: str, query: str, at: dict[str, int]) -> None:
        for table, version in at.items():
            path = warehouse.table_path(self.settings, table)
            self.oracle.read.format("delta").option("versionAsOf", version).load(
                path
            ).createOrReplaceTempView(table)
        want = [tuple(r) for r in self.oracle.sql(query).collect()]
        got = [
            tuple(r)
            for r in self.spark.read.format("delta").load(warehouse.table_path(self.settings, mv)).collect()
        ]
        difference = multiset_difference(got, want)
        assert difference is None, f"{mv} at {at}: {difference}\n{self.story()}"

    def watermark(self, mv: str) -> dict[str, int]:
        found = refresh.read_watermark(self.spark, self.settings, mv)
        assert found is not None, mv
        return dict(found.watermark)

    def story(self) -> str:
        return "\n".join(f"  {line}" for line in self.log)


EVERY_CHANGE = Stream(
    Insert(
        (
            ("a", 0, 5, Decimal("1.25"), 0.1),
            ("a", 1, None, Decimal("3.10"), 2 / 3),
            ("b", 0, 3, Decimal("-2.50"), None),
            (None, 1, 2, None, 0.0),
        ),
        (0,),
    ),
    (
        (
            Insert((("b", 1, 4, Decimal("0.50"), 1.0), ("c", 0, None, None, None))),
            Update(1, (("v", 6),)),
            Recompute(),
        ),
        (MoveGroup("a", "c"), DeleteAll(), Purge()),
    ),
)


@settings(
    phases=phases_for_ci(),
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@example(stream=EVERY_CHANGE, complete_rounds=(False, True))
@given(stream=streams(MAX_ROUNDS), complete_rounds=st.lists(st.booleans(), min_size=4, max_size=4).map(tuple))
def test_a_two_level_chain_refreshes_fast_and_each_mv_equals_its_query_at_its_watermark(
    spark: Any, chain_settings: Settings, stream: Stream, complete_rounds: tuple[bool, ...]
) -> None:
    chain = Chain(spark, chain_settings)
    try:
        chain.create(stream.initial)
        for ops, a_complete in zip(stream.rounds, complete_rounds, strict=False):
            for op in ops:
                chain.apply(op)
            chain.refresh_round(a_complete)
    finally:
        chain.drop()
    fast_b = [line for line in chain.log if line.startswith(f"fast {chain.b} ")]
    assert fast_b and all("incremental:" in line or "skipped" in line for line in fast_b), chain.story()


def _runner_refresh(spark: Any, settings: Settings, mv: str, query: str, upstream: list[str]) -> Any:
    """A COMPLETE refresh the way a worker runs it (``SparkRunner.refresh``: the cut, then the job)."""
    runner = SparkRunner(settings, session=lambda _settings: spark)  # the session the tests share
    info = analyze_query(query, columns_of=lambda table: warehouse.table_columns(settings, table))
    spec = {
        "query": query,
        "refresh_mode": "COMPLETE",
        "base_tables": list(info.base_tables),
        "plan": plan_record(info.plan),
        "upstream_mvs": upstream,
    }
    task = {"task_id": f"mv:{mv}", "name": mv, "kind": "MV", "epoch": 1, "mv": spec}
    return runner.refresh(task, run_id=uuid.uuid4().hex[:8], job_group=f"{mv}-run")


def test_a_fan_in_reads_its_upstreams_at_one_consistent_cut(spark: Any, chain_settings: Settings) -> None:
    """hi and lo over one base, hi refreshed once more after a base change; fan over both (and the
    base): its run reads hi where it met lo, the base at that version too, and records the cut."""
    settings, prefix = chain_settings, f"f{uuid.uuid4().hex[:12]}"
    base, hi, lo, fan = prefix, f"{prefix}_hi", f"{prefix}_lo", f"{prefix}_fan"
    model = BaseModel()
    first = model.commit_for(Insert((("a", 0, 5, None, None), ("b", 1, 1, None, None))))
    assert first is not None
    tables.create_table(spark, settings, base, first.rows, SCHEMA)
    queries = {
        hi: f"SELECT id, k1, v FROM {base} WHERE v >= 3",
        lo: f"SELECT id, v FROM {base} WHERE v < 3",
        fan: f"SELECT h.k1, l.v AS lo_v, s.k2 FROM {hi} h JOIN {lo} l ON h.id = l.id + 100 "
        f"JOIN {base} s ON s.id = h.id",
    }
    try:
        for mv in (lo, hi):
            assert _runner_refresh(spark, settings, mv, queries[mv], []).state == "COMPLETED"
        at_lo = warehouse.latest_version(settings, base)
        more = model.commit_for(Insert((("c", 1, 7, None, None), ("c", 0, 2, None, None))))
        assert more is not None
        tables.append(spark, settings, base, more.rows)  # hi sees these, lo does not
        assert _runner_refresh(spark, settings, hi, queries[hi], []).state == "COMPLETED"
        assert warehouse.latest_version(settings, base) == (at_lo or 0) + 1

        result = _runner_refresh(spark, settings, fan, queries[fan], [hi, lo])
        assert result.state == "COMPLETED", result
        assert result.message.endswith(f"; reflects {base}@v{at_lo}"), result.message
        found = refresh.read_watermark(None, settings, fan)
        assert found is not None and found.reflects == {base: at_lo}, found
        assert found.watermark == {base: at_lo, lo: 0, hi: 0}, found  # hi's first commit: where they met
        oracle = spark.newSession()
        for table, version in found.watermark.items():
            path = warehouse.table_path(settings, table)
            oracle.read.format("delta").option("versionAsOf", version).load(path).createOrReplaceTempView(
                table
            )
        want = sorted(tuple(r) for r in oracle.sql(queries[fan]).collect())
        got = sorted(
            tuple(r) for r in spark.read.format("delta").load(warehouse.table_path(settings, fan)).collect()
        )
        assert got == want
        # The cut is consistent: hi as read reflects the base version lo and the base are read at.
        hi_read = refresh.read_watermark(None, settings, hi, at=found.watermark[hi])
        assert hi_read is not None and hi_read.watermark == {base: at_lo}
    finally:
        for name in (fan, hi, lo, base):
            shutil.rmtree(warehouse.local_table_dir(settings, name), ignore_errors=True)
            deltalog.forget_table(settings, name)
