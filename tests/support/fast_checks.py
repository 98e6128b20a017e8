"""The Spark side of the FAST property tests: base tables with their MV logs and MVs, driven through
the real jobs (``refresh_complete`` for the first build, ``refresh_incremental`` after every round of
commits, ``mvlog.purge`` in between), and the oracle every refresh is checked against.

The oracle: the MV must hold exactly the multiset of rows that its query returns over the bases
``VERSION AS OF`` the watermark in the MV's own Delta commit metadata, in the query's columns and
types (doubles equal within 1e-9 relative; see ``same_value``).
"""

from __future__ import annotations

import math
import os
import re
import shutil
import uuid
from collections import Counter
from collections.abc import Sequence
from typing import Any

from hypothesis import Phase

from tests.support.check_session import BaseViews, checking_session
from tests.support.fast_shapes import SCHEMA, VALUE_COLUMNS, Shape, prefixed_columns
from tests.support.fast_streams import BaseModel, Commit, Insert, On, Op, Purge, Recompute
from tests.support.run_requests import run_request
from workers import demo_tables as tables
from workers import warehouse
from workers.config import Settings
from workers.ddl.plan import TopN
from workers.jobs import complete as refresh
from workers.jobs.changes import mvlog
from workers.jobs.delta import log as deltalog
from workers.jobs.fast import refresh as incremental
from workers.jobs.rebuilt import NO_REBUILD

REL_TOL = 1e-9
# Near zero a relative bound means nothing (0.1 + 0.2 - 0.3 != 0): an absolute one as small.
ABS_TOL = 1e-9


def same_value(got: Any, want: Any) -> bool:
    if isinstance(got, float) and isinstance(want, float):
        return math.isclose(got, want, rel_tol=REL_TOL, abs_tol=ABS_TOL)
    return bool(got == want) and (got is None) == (want is None)


def _order(row: tuple[Any, ...]) -> tuple[Any, ...]:
    """A sort key that puts rows equal up to float noise side by side (NULLs first, per column)."""
    return tuple((v is not None, float(f"{v:.6g}") if isinstance(v, float) else v) for v in row)


def multiset_difference(got: Sequence[tuple[Any, ...]], want: Sequence[tuple[Any, ...]]) -> str | None:
    """None when ``got`` and ``want`` are the same multiset of rows (floats within tolerance), else
    what differs (for the assertion message)."""
    ordered_got, ordered_want = sorted(got, key=_order), sorted(want, key=_order)
    if len(got) == len(want) and all(
        len(g) == len(w) and all(same_value(a, b) for a, b in zip(g, w, strict=True))
        for g, w in zip(ordered_got, ordered_want, strict=True)
    ):
        return None
    extra, missing = Counter(got) - Counter(want), Counter(want) - Counter(got)
    return (
        f"MV has {len(got)} rows, the query {len(want)}; "
        f"only in the MV: {sorted(extra.elements(), key=_order)}; "
        f"only in the query: {sorted(missing.elements(), key=_order)}"
    )


# A row of a top-N query's inner rows: its values, its rank by the ORDER BY (1 + the rows before it) and
# how many rows sort before it or with it (its tie group's last position).
RankedRow = tuple[tuple[Any, ...], int, int]


def top_n_difference(got: Sequence[tuple[Any, ...]], ranked: Sequence[RankedRow], limit: int) -> str | None:
    """None when ``got`` is one of the valid results of ``ORDER BY … LIMIT limit`` over ``ranked``
    (the inner query's rows, each with its rank and tie group end), else what is wrong. Ties at the
    boundary make several results valid: every row whose whole tie group fits in the first ``limit``
    must be there, the rest of the ``limit`` rows come from the tie group the boundary cuts, and no
    row from after it (values compared exactly: the top-N shapes order and select no floats)."""
    sure = Counter(row for row, _, upto in ranked if upto <= limit)
    boundary = Counter(row for row, rank, upto in ranked if rank <= limit < upto)
    have = Counter(got)
    size = min(limit, len(ranked))
    problems = []
    if len(got) != size:
        problems.append(f"{len(got)} rows, not {size}")
    if missing := sure - have:
        problems.append(f"rows of the top {limit} missing: {sorted(missing.elements(), key=_order)}")
    if foreign := (have - sure) - boundary:
        problems.append(f"rows not in the top {limit}: {sorted(foreign.elements(), key=_order)}")
    return "; ".join(problems) or None


def ranked_rows(session: Any, top: TopN) -> list[RankedRow]:
    """The rows of a top-N query's inner query in ``session`` (its views are the bases at the
    watermark), each with its rank and tie group end by the query's ORDER BY."""
    ranked = session.sql(
        f"SELECT *, rank() OVER (ORDER BY {top.order_by}) AS __mvs_rank, "
        f"count(*) OVER (ORDER BY {top.order_by}) AS __mvs_upto FROM ({top.inner_query}) AS q"
    )
    return [(tuple(r)[:-2], r["__mvs_rank"], r["__mvs_upto"]) for r in ranked.collect()]


# ------------------------------------------------------- helper state (issue 10, item 1: helper state)
def reads_no_base(query: str, message: str) -> bool:
    """An aggregate without MIN/MAX is refreshed from its deltas, its own columns and its helper state:
    no group is recomputed from the base (the values the shapes draw all fit the exact sums) — unless
    it keeps no state (its run ``message`` names none) and SUMs a column it does not COUNT: such a sum
    come to exactly 0 after deletes is recomputed (``aggregate_rules._sum_left``)."""
    text = query.upper()
    if "MIN(" in text or "MAX(" in text:
        return False
    uncounted_sum = any(f"SUM({c})" in text and f"COUNT({c})" not in text for c in ("V", "D"))
    # A SUM of an expression is never counted by the shapes' COUNTs (which count columns or rows).
    uncounted_sum = uncounted_sum or re.search(r"SUM\((?!(V|D|X)\))", text) is not None
    return "__mvstate" in message or not uncounted_sum


# --------------------------------------------------------------------------- end of helper state


class Scenario:
    """Base tables (unique names per example; as many as the shapes read), their MV logs, and one MV per
    shape on them (every shape reads all of them)."""

    def __init__(self, spark: Any, settings: Settings, shapes: Sequence[Shape]) -> None:
        self.spark, self.settings = spark, settings
        prefix = f"p{uuid.uuid4().hex[:12]}"
        count = max(shape.bases for shape in shapes)
        self.bases = [prefix] if count == 1 else [f"{prefix}_{i}" for i in range(count)]
        self.mvs = {f"{prefix}_mv{i}": shape.sql(*self.bases) for i, shape in enumerate(shapes)}
        self.kinds = {name: shape.kind for name, shape in zip(self.mvs, shapes, strict=True)}
        self.models = [BaseModel() for _ in self.bases]
        prefixed = {shape.prefixed for shape in shapes}
        assert len(prefixed) == 1, "the shapes of one scenario share its bases' column names"
        self.prefixed = prefixed.pop()
        # The test's own Spark work, the oracle's queries and the commits to the bases, runs in a
        # session of its own (``checking_session``); its temp views named like the bases are them at
        # a version. The product's jobs run on ``spark``.
        self.oracle = checking_session(spark)
        self.views = BaseViews(self.oracle, settings)
        self.refreshes = 0
        self.top_n: dict[str, TopN] = {}  # the top-N MVs' inner queries (the oracle ranks their rows)
        self.log: list[str] = []  # what happened, for the failure message

    # ------------------------------------------------------------------------------------- lifecycle

    def create(self, initial: Insert, others: Sequence[Insert] = ()) -> None:
        """The bases with their first rows (base 0's, then ``others``), their MV logs, and a COMPLETE
        first build of every MV."""
        firsts = [initial, *others]
        assert len(firsts) == len(self.bases), (len(firsts), self.bases)
        for base, model, first in zip(self.bases, self.models, firsts, strict=True):
            commit = model.commit_for(first)
            assert commit is not None
            index = self.bases.index(base)
            tables.create_table(
                self.oracle, self.settings, base, self._rows(index, commit), self._named(index, SCHEMA)
            )
            mvlog.create_mv_log(self.spark, self.settings, base)
        for mv, query in self.mvs.items():
            request = run_request(self.settings, mv, query, run="c0")
            plan = request.plan.fast_refresh
            assert plan is not None and plan.kind == self.kinds[mv], (query, request.plan.fast_reason)
            if plan.top_n is not None:
                self.top_n[mv] = plan.top_n
            assert refresh.refresh_complete(self.spark, self.settings, request).applied
            self.check(mv)

    def drop(self) -> None:
        logs = [warehouse.mlog_table_name(base) for base in self.bases]
        states = [helper for mv in self.mvs for helper in warehouse.helper_tables(mv)]
        for base in self.bases:
            self.oracle.catalog.dropTempView(base)
        for name in [*self.mvs, *states, *logs, *self.bases]:
            shutil.rmtree(warehouse.local_table_dir(self.settings, name), ignore_errors=True)
            deltalog.forget_table(self.settings, name)

    # ----------------------------------------------------------------------------------- the changes

    def apply(self, step: Op | On) -> None:
        index, op = (step.base, step.op) if isinstance(step, On) else (0, step)
        base = self.bases[index]
        if isinstance(op, Purge):
            self._purge(base)
            return
        if isinstance(op, Recompute):
            self._recompute()
            return
        commit = self.models[index].commit_for(op)
        assert commit is not None
        self._commit(base, commit)
        self.log.append(f"{op} -> {base} v{self.latest(base)}")

    def _commit(self, base: str, commit: Commit) -> None:
        index = self.bases.index(base)
        if commit.statement is None:
            tables.append(self.oracle, self.settings, base, self._rows(index, commit))
            return
        path = warehouse.table_path(self.settings, base)
        self.oracle.sql(self._named(index, commit.statement).format(t=f"delta.`{path}`"))

    def _rows(self, index: int, commit: Commit) -> list[dict[str, Any]]:
        """The commit's rows, keyed by base ``index``'s column names."""
        return [{self._named(index, key): value for key, value in row.items()} for row in commit.rows]

    def _named(self, index: int, text: str) -> str:
        """``text`` (SQL or a schema, over the model's column names) with base ``index``'s names:
        prefixed ones when the shapes are (``Shape.prefixed``); string literals are left alone."""
        if not self.prefixed:
            return text
        columns = ["id", *VALUE_COLUMNS]
        names = dict(zip(columns, prefixed_columns(index, columns), strict=True))
        word = re.compile(r"\b(" + "|".join(columns) + r")\b")
        parts = text.split("'")  # odd parts are inside quotes
        return "'".join(
            part if i % 2 else word.sub(lambda m: names[m.group(1)], part) for i, part in enumerate(parts)
        )

    def _purge(self, base: str) -> None:
        """What the purge task does: the safepoint is the lowest watermark of the MVs on the base."""
        safepoint = min(self.watermark(mv)[base] for mv in self.mvs)
        result = mvlog.purge(self.spark, self.settings, base, safepoint=safepoint)
        retained = mvlog.retained_from(self.spark, self.settings, base)
        assert retained is not None and retained <= safepoint + 1, (safepoint, retained)
        self.log.append(f"purge {base} below v{safepoint}: {result.message}")

    def _recompute(self) -> None:
        """A complete refresh of every MV at the bases' latest versions, each checked: as FORCE runs
        it by cost (a top-N's rows table is not written: the FAST run after it goes on from it)."""
        self.refreshes += 1
        for mv, query in self.mvs.items():
            request = run_request(self.settings, mv, query, mode="FORCE", run=f"c{self.refreshes}")
            result = refresh.refresh_complete(self.spark, self.settings, request)
            self.log.append(f"recompute {mv} -> {dict(request.pinned)}: {result.message}")
            self.check(mv)

    # ------------------------------------------------------------------------------ refresh and check

    def refresh_all(self) -> None:
        """A FAST refresh of every MV at the base's latest version, each checked against the oracle."""
        self.refreshes += 1
        for mv, query in self.mvs.items():
            before = self.watermark(mv)
            request = run_request(self.settings, mv, query, mode="FAST", run=f"f{self.refreshes}")
            pinned = dict(request.pinned)
            try:
                result = incremental.refresh_incremental(self.spark, self.settings, request)
            except incremental.FastRefreshNotPossible as why:
                raise AssertionError(f"{mv}: FAST refresh refused: {why.reason}\n{self.story(mv)}") from why
            if pinned != before:  # something to do: it must have been done incrementally
                assert result.applied, f"{mv}: {result.message}\n{self.story(mv)}"
                assert result.message.startswith("incremental:"), f"{mv}: {result.message}"
                assert result.watermark_after == pinned, result
                # The run timed its rebuild of helper state exactly when it says it rebuilt one, or
                # caught key counts up in a range of their own (None: a run that only moved the
                # watermark measured nothing, and rebuilt nothing).
                said = "state rebuilt from" in result.message or "key counts: caught up" in result.message
                measured = result.rebuilt or NO_REBUILD
                assert said == bool(measured.ms), f"{mv}: {measured}, {result.message}"
                instead = "over maintained state (rebuild)" in result.message  # a top-N's rows table
                assert measured.instead == instead, f"{mv}: {result.message}"
            else:  # nothing committed since: the same watermark again is skipped
                assert not result.applied and result.message.startswith("skipped"), result.message
            assert self.watermark(mv) == pinned, (mv, self.watermark(mv), pinned)
            self.log.append(f"refresh {mv} {before} -> {pinned}: {result.message}")
            self.check(mv)
            aggregate = self.kinds[mv] in ("aggregate", "join_aggregate")
            if pinned != before and aggregate and reads_no_base(query, result.message):
                assert " 0 recomputed from the base" in result.message, f"{mv}: {result.message}"

    def check(self, mv: str) -> None:
        """The MV holds exactly what its query returns over the bases at the MV's watermark."""
        watermark = self.watermark(mv)
        self.views.show(watermark)
        expected = self.oracle.sql(self.mvs[mv])
        table = self.oracle.read.format("delta").load(warehouse.table_path(self.settings, mv))
        columns = [(f.name, f.dataType.simpleString()) for f in table.schema.fields]
        wanted = [(f.name, f.dataType.simpleString()) for f in expected.schema.fields]
        assert columns == wanted, f"{mv}: columns {columns}, the query's {wanted}"
        got = [tuple(r) for r in table.collect()]
        top = self.top_n.get(mv)
        if top is None:
            difference = multiset_difference(got, [tuple(r) for r in expected.collect()])
        else:  # ties at the boundary: one of the valid top n
            difference = top_n_difference(got, ranked_rows(self.oracle, top), top.limit)
        assert difference is None, f"{mv} at {watermark}: {difference}\n{self.story(mv)}"

    def watermark(self, mv: str) -> dict[str, int]:
        found = refresh.read_watermark(self.spark, self.settings, mv)
        assert found is not None and set(found.watermark) == set(self.bases), (mv, found)
        return dict(found.watermark)

    def latest(self, base: str) -> int:
        version = warehouse.latest_version(self.settings, base)
        assert version is not None
        return version

    def story(self, mv: str) -> str:
        return f"query: {self.mvs[mv]}\n" + "\n".join(f"  {line}" for line in self.log)


def phases_for_ci() -> tuple[Phase, ...]:
    """Hypothesis phases of a property test whose every example costs minutes of real Spark: only its
    explicit examples under the CI profile (the suite's time budget), every phase under
    ``HYPOTHESIS_PROFILE=long``."""
    if os.environ.get("HYPOTHESIS_PROFILE", "ci") == "ci":
        return (Phase.explicit,)
    return tuple(Phase)
