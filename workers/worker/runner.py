"""What a run does: the bridge from a maintainer's decision to the Spark jobs.

The maintainer decides *when*; the runner does the work on the worker's one SparkSession and maps
failures to seed-002 error codes so the maintainer can tell retryable from permanent. The session
is created on first use, or ahead of it by ``warm()``: a worker process calls that at start, so a
task that fails over to it does not wait for a JVM to start (~8 s, far more on a busy machine).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, Protocol

from workers import warehouse
from workers.catalog.errors import ErrorCode, MvsError
from workers.config import Settings
from workers.jobs import JobError, RunCancelled, RunRequest, classify_failure
from workers.jobs.delta.sizes import ChangeSize, change_size
from workers.jobs.rebuilt import NO_REBUILD, Rebuilt
from workers.records import Record
from workers.status import REFLECTS
from workers.warehouse import latest_version, table_exists
from workers.worker.cut import Cut, Reflection, consistent_cut, cut_text
from workers.worker.decision import Decision, DecisionKind, decide, unchanged
from workers.worker.planning import COMPLETE, FAST, CostModel, PlanShape

if TYPE_CHECKING:  # the jobs pull in pyspark: imported when a run needs them
    from workers.jobs import RefreshResult
    from workers.jobs.delta.metadata import MvWatermark

log = logging.getLogger(__name__)
# While a cancelled run is still inside its Spark work, its job group is cancelled again this often.
RECANCEL_EVERY_S = 0.5
SPARK_READY = "Spark session ready in"  # logged by warm(); the failover bench waits for it


@dataclass(frozen=True)
class RunResult:
    state: str  # COMPLETED | SKIPPED
    rows_written: int | None = None
    watermark_before: dict[str, int] = field(default_factory=dict)
    watermark_after: dict[str, int] = field(default_factory=dict)
    message: str | None = None
    spark_jobs: int | None = None  # Spark jobs the run started; None when the job did not count them
    planning: Record | None = None  # what the run considered (RunRecord.planning), None: skipped
    rows_inserted: int | None = None  # rows the run inserted into / deleted from the MV, if known
    rows_deleted: int | None = None


@dataclass(frozen=True)
class Outcome:
    """What one run teaches the MV's cost model: its technique, sizes and time, whether the MV's run
    before it recomputed it, and its rebuild of helper state (None: not measured, a COMPLETE run or
    a FAST one that applied no change row)."""

    technique: str
    size: ChangeSize | None
    took_ms: float
    after_complete: bool
    rebuilt: Rebuilt | None
    probe: bool = False  # FORCE ran it as a probe (``Planning.probe``): a probe of COMPLETE is remembered


class Runner(Protocol):
    def base_versions(self, tables: list[str], *, quick: bool = False) -> dict[str, int]: ...
    def refresh(self, task: Record, *, run_id: str, job_group: str) -> RunResult: ...
    def purge(self, task: Record, *, safepoint: int | None, run_id: str, job_group: str) -> RunResult: ...
    def cancel(self, job_group: str) -> None: ...
    def drop(self, task: Record) -> None: ...


class SparkRunner:
    def __init__(
        self,
        settings: Settings,
        session: Callable[[Settings], Any] | None = None,
        *,
        priors: CostModel | None = None,
        learn: bool = True,
    ) -> None:
        """``priors``: each MV's refresh costs before its runs teach them (``planning.CostModel``'s
        defaults); ``learn``: whether outcomes update them (off: a fixed model, for tests)."""
        self.settings = settings
        self._session = session  # None: the process's (``workers.jobs.get_spark``)
        self._priors = priors or CostModel()
        self._learns = learn
        self._lock = threading.Lock()
        self._started = False  # whether this process has a Spark session (a cancel needs none else)
        self._live: set[str] = set()  # job groups of runs now inside refresh/purge
        # Each MV's refresh costs as its runs on this worker taught them (``planning.CostModel``).
        self._costs: dict[str, CostModel] = {}
        # Each MV's last technique run here: a FAST run after a COMPLETE one rebuilds helper state.
        self._last_ran: dict[str, str] = {}

    @property
    def spark(self) -> Any:
        """The session, asked for at each use: one whose JVM died is replaced (``get_spark``)."""
        if self._session is None:
            from workers.jobs import get_spark

            self._session = get_spark
        session = self._session(self.settings)
        self._started = True
        return session

    def warm(self) -> threading.Thread:
        """Start the SparkSession (and run one tiny job, loading the job classes) in the background.
        Runs that come meanwhile wait for the same session instead of starting another."""

        def start() -> None:
            began = time.monotonic()
            try:
                self.spark.range(1).count()
            except Exception:  # the first run reports whatever is wrong, with its error code
                log.warning("warming the Spark session failed", exc_info=True)
            else:
                log.info("%s: %s %.1fs", self.settings.worker_id, SPARK_READY, time.monotonic() - began)

        thread = threading.Thread(target=start, name="spark-warm", daemon=True)
        thread.start()
        return thread

    def base_versions(self, tables: list[str], *, quick: bool = False) -> dict[str, int]:
        """Latest Delta version of each base table, read from the Delta log listing (no Spark job);
        ``quick``: one attempt per table (a look from the loop thread, ``warehouse.QUICK_LOOK``)."""
        versions: dict[str, int] = {}
        for table in tables:
            with _storage_errors():  # an unreadable warehouse is a coded failure too
                version = latest_version(self.settings, table, quick=quick)
            if version is None:
                raise MvsError(
                    ErrorCode.NOT_FOUND,
                    f"base table {table} does not exist (it was dropped or its directory is gone: "
                    f"re-create it, then ALTER MATERIALIZED VIEW <name> RESUME or REFRESH)",
                )
            versions[table] = version
        return versions

    @contextmanager
    def _live_group(self, job_group: str) -> Iterator[None]:
        with self._lock:
            self._live.add(job_group)
        try:
            yield
        finally:
            with self._lock:
                self._live.discard(job_group)

    def refresh(self, task: Record, *, run_id: str, job_group: str) -> RunResult:
        """Refresh MV ``task`` (a TaskRecord carrying its query plan: ``request.with_plan``): pin the
        bases, build the run's one ``RunRequest``, decide (``workers.worker.decision``), run the job."""
        from workers.jobs import fast_refresh_blocker, read_watermark

        latest = self.base_versions(task["mv"]["base_tables"])
        with self._live_group(job_group), _storage_errors():
            # What the MV table already reflects, whoever wrote it (a new owner after a failover
            # finds its predecessor's result). Read from the Delta log without a JVM where the
            # warehouse is local, so a task that moves to a worker whose Spark is still starting is
            # current at once, not after a recompute.
            log_reader = None if warehouse.is_local(self.settings) else self.spark
            current = read_watermark(log_reader, self.settings, task["name"])
            reflected = current.watermark if current is not None else None
            if current is not None and current.costs:
                self._restore_costs(task["task_id"], current.costs)
            cut = self._cut(task, latest, reflected or {}, log_reader)
            if isinstance(cut, str):  # the upstream MVs do not meet yet: nothing to read
                return RunResult("SKIPPED", 0, reflected or {}, reflected or {}, cut, 0)
            request = RunRequest.for_task(
                task,
                run_id=run_id,
                job_group=job_group,
                pinned=cut.pinned,
                reflects=cut.reflects,
                costs=self.cost_model(task["task_id"]).record(),
            )
            mv_version = latest_version(self.settings, request.mv_name)
            # The MV's last commit says how it was made (whoever made it: a previous owner too);
            # older commits do not, and then what this worker last ran for it.
            last = current.technique if current is not None else None
            after_complete = (last or self._last_ran.get(request.task_id)) == COMPLETE
            # A FAST run that would catch its helper state up (or keeps none to rebuild) reads the
            # change since the state's own run, not since the MV's watermark: FORCE prices that, and
            # charges no rebuild.
            caught_up = self._catch_up(request, current, reflected) if after_complete else None
            rebuilds = after_complete and caught_up is None
            since = reflected if caught_up is None else {b: first for b, (first, _) in caught_up.items()}
            sizes: list[ChangeSize | None] = []  # read by the decision once it needs them

            def size() -> ChangeSize | None:
                sizes.append(self._change_size(request, since, mv_version))
                return sizes[-1]

            decision = decide(
                request,
                reflected,
                lambda: fast_refresh_blocker(self.spark, self.settings, request),
                size,
                self.cost_model(request.task_id),
                rebuilds,
            )
            if decision.kind is DecisionKind.SKIP:
                return RunResult("SKIPPED", 0, request.watermark, request.watermark, decision.reason, 0)
            began = time.monotonic()
            result, ran = self._run(request, decision)
            took_ms = (time.monotonic() - began) * 1000
        size_read = sizes[-1] if sizes else None
        if result.applied:  # a skipped commit did not do the work it would learn from
            probe = (
                decision.planning is not None and decision.planning.probe and ran == decision.planning.choice
            )
            learnt = Outcome(ran, size_read, took_ms, after_complete, result.rebuilt, probe)
            self._learn(request.task_id, learnt, decision.shape)
        message = result.message
        if not result.applied:
            message = "commit skipped by Delta: this result (epoch, watermark) was already applied"
        if cut.reflects != cut.pinned:  # an MV over MVs: the base versions it reflects through them
            message = f"{message}{REFLECTS}{cut_text(cut.reflects)}"
        deleted = result.rows_deleted
        if ran == COMPLETE and deleted is None and size_read is not None:
            # An overwrite deletes every row the MV had (none before its first build).
            deleted = size_read.mv.rows if size_read.mv is not None else 0
        planning = decision.planning.record() if decision.planning is not None else None
        if planning is not None and ran != planning["choice"]:
            planning["choice"] = ran  # FAST's preconditions failed under the fence: recomputed
            planning["reason"] = (result.message or "").partition(";")[0]
        return RunResult(
            "COMPLETED",
            result.rows_written if result.applied else 0,
            result.watermark_before,
            result.watermark_after,
            message,
            result.spark_jobs,
            planning,
            result.rows_inserted if result.applied else 0,
            deleted if result.applied else 0,
        )

    def _cut(self, task: Record, latest: dict[str, int], floor: dict[str, int], log_reader: Any) -> Cut | str:
        """The versions the run reads (``workers.worker.cut``): the latest, unless MVs among the
        inputs reflect different base versions; or why the run waits."""
        from workers.jobs import read_watermark

        upstream = [t for t in task["mv"].get("upstream_mvs") or [] if t in latest]
        if not upstream:
            return Cut(dict(latest), dict(latest))

        def reflected(mv: str, version: int) -> Reflection | None:
            found = read_watermark(log_reader, self.settings, mv, at=version)
            if found is None or found.delta_version is None:
                return None
            return Reflection(found.delta_version, found.reflects)

        return consistent_cut(latest, upstream, floor, reflected)

    def cost_model(self, task_id: str) -> CostModel:
        """What MV ``task_id``'s refreshes cost, as far as its runs here taught it."""
        with self._lock:
            return self._costs.get(task_id) or self._priors

    def _restore_costs(self, task_id: str, costs: Mapping[str, tuple[float, ...]]) -> None:
        """Go on from the costs the MV's last commit kept (its previous owner's, or this worker's
        before a restart) when this worker has not learnt its own yet."""
        if not self._learns:
            return
        with self._lock:
            if task_id not in self._costs:
                self._costs[task_id] = self._priors.restored(costs)

    def _learn(self, task_id: str, outcome: Outcome, shape: PlanShape | None) -> None:
        technique = outcome.technique
        with self._lock:
            if technique == FAST and outcome.rebuilt is None:
                return  # no change row applied (only the watermark moved): no run to learn from
            self._last_ran[task_id] = technique
            if not self._learns:
                return
            model = self._costs.get(task_id) or self._priors
            self._costs[task_id] = model.learned(
                technique,
                outcome.size,
                outcome.took_ms,
                shape,
                outcome.after_complete,
                outcome.rebuilt or NO_REBUILD,
                outcome.probe,
            )

    def _catch_up(
        self, request: RunRequest, current: MvWatermark | None, reflected: Mapping[str, int] | None
    ) -> dict[str, tuple[int, int]] | None:
        """The ranges a FORCE run's FAST run now would read catching the MV's helper state up (from
        the state's own run) instead of rebuilding it; FORCE then charges it no rebuild (what it learns
        still says it came right after a complete run: REBUILD learns what catching up took beyond a
        steady run, 0 but for key counts' own range). Asked only of a run that will not be skipped;
        None where it cannot be read (the plan then charges the rebuild)."""
        from workers.jobs import helper_state_catch_up

        if request.mode != "FORCE" or current is None or unchanged(request.pinned, reflected) is not None:
            return None
        try:
            return helper_state_catch_up(self.spark, self.settings, request, current)
        except Exception:  # noqa: BLE001 - it only informs the choice
            log.warning("%s: helper state's origin unreadable", request.task_id, exc_info=True)
            return None

    def _change_size(
        self, request: RunRequest, since: Mapping[str, int] | None, mv_version: int | None
    ) -> ChangeSize | None:
        """The run's change (from the versions ``since``) and table sizes from the Delta logs; None
        when they cannot be read (the run goes on: FORCE then takes FAST while it can)."""
        ranges = {base: ((since or {}).get(base), until) for base, until in request.pinned.items()}
        try:
            return change_size(self.settings, ranges, request.mv_name, mv_version)
        except Exception:  # noqa: BLE001 - sizes only inform the choice
            log.warning("%s: change sizes unreadable", request.task_id, exc_info=True)
            return None

    def _run(self, request: RunRequest, decision: Decision) -> tuple[RefreshResult, str]:
        """The job ``decision`` asks for and the technique that ran (FAST | COMPLETE); a complete
        refresh's message starts with the reason."""
        from workers.jobs import FastRefreshNotPossible, refresh_complete, refresh_incremental

        if decision.kind is DecisionKind.INCREMENTAL:
            try:
                return refresh_incremental(self.spark, self.settings, request), FAST
            except FastRefreshNotPossible as why:
                # The same preconditions, checked again under the fence, failed: the MV log moved
                # on (a purge) or the MV's content does not match its watermark since the decision.
                decision = Decision.complete(why.reason)
        result = refresh_complete(self.spark, self.settings, request)
        return replace(result, message=f"{decision.reason}; {result.message}"), COMPLETE

    def purge(self, task: Record, *, safepoint: int | None, run_id: str, job_group: str) -> RunResult:
        from workers.jobs import create_mv_log, purge
        from workers.jobs import job_group as spark_job_group

        base = task["name"]
        with (
            self._live_group(job_group),
            _storage_errors(),
            spark_job_group(self.spark, job_group, f"mvs purge {task['task_id']}"),
        ):
            create_mv_log(self.spark, self.settings, base)  # idempotent: the log exists once created
            result = purge(self.spark, self.settings, base, safepoint)
        mark = {base: result.captured_version}
        return RunResult(
            "COMPLETED",
            result.rows_deleted,
            mark,
            mark,
            f"captured to v{result.captured_version}, purged {result.rows_deleted} change rows "
            f"below safepoint {safepoint}",
        )

    def cancel(self, job_group: str) -> None:
        if self._started:
            from workers.jobs import cancel_run

            cancel_run(self.spark, job_group)
            threading.Thread(
                target=self._keep_cancelling, args=(job_group,), name=f"cancel-{job_group}", daemon=True
            ).start()

    def _keep_cancelling(self, job_group: str) -> None:
        """Spark cancels only the group's jobs active at that instant: one the run submits later
        (e.g. after a broadcast, which Spark runs under a group of its own, was in flight when the
        cancel came) would run to its end. So cancel again until the run has left its Spark work;
        a cancel that came before the run entered its job group (a FAST run decides its kind first)
        marks the group as soon as it is entered, so the run ends as cancelled, not as failed."""
        from workers.jobs import cancel_run

        pause = threading.Event()
        while not pause.wait(RECANCEL_EVERY_S):
            with self._lock:
                if job_group not in self._live:
                    return
            cancel_run(self.spark, job_group)

    def drop(self, task: Record) -> None:
        if task["kind"] == "MV":
            from workers.jobs import drop_mv_table

            drop_mv_table(self.settings, task["name"])
            with self._lock:  # an MV made again under its name learns anew
                self._costs.pop(task["task_id"], None)
                self._last_ran.pop(task["task_id"], None)
        elif table_exists(self.settings, task["name"]):
            from workers.jobs import drop_mv_log

            drop_mv_log(self.spark, self.settings, task["name"])


class RunFailure(MvsError):
    """A failed run whose retryability the failure decided (``workers.jobs.errors.FAILURE_RULES``),
    not its code's default: e.g. a permission denied is storage trouble (2001) that no retry fixes."""

    def __init__(self, code: ErrorCode, message: str, *, retryable: bool) -> None:
        super().__init__(code, message)
        self.retryable = retryable

    def record(self, at_ms: int) -> dict[str, Any]:
        severity = "WARN" if self.retryable else "ERROR"
        return {**super().record(at_ms), "retryable": self.retryable, "severity": severity}


@contextmanager
def _storage_errors() -> Iterator[None]:
    """Map job failures to coded errors: the jobs' own codes as they are; any other failure of
    Spark, Delta or the file system by its root cause (``classify_failure``): a table that is gone,
    a change feed a schema change made unreadable or a permission denied is permanent, the rest
    (I/O, timeouts, write conflicts) retryable. Cancellation passes through."""
    try:
        yield
    except (MvsError, RunCancelled):
        raise
    except JobError as exc:
        raise MvsError(ErrorCode(exc.code), str(exc)) from exc
    except Exception as exc:
        failure = classify_failure(exc)
        log.warning("run failed (%s): %s", failure.rule, failure.message)
        raise RunFailure(ErrorCode(failure.code), failure.message, retryable=failure.retryable) from exc
