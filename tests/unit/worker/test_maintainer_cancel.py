"""The maintainer's cancel reaches Spark: SparkRunner.cancel repeats the job-group cancel while the
run is still inside its Spark work (Spark only cancels the jobs active at that instant).

A fake SparkContext records the cancels; no JVM.
"""

from __future__ import annotations

import threading
from pathlib import Path
from types import SimpleNamespace

import pytest

from workers.config import Settings
from workers.worker import runner as runner_module
from workers.worker.runner import SparkRunner

WAIT = 5.0


class RecordingContext:
    def __init__(self) -> None:
        self.cond = threading.Condition()
        self.cancels: list[str] = []

    def cancelJobGroup(self, group: str) -> None:  # noqa: N802 (Spark's name)
        with self.cond:
            self.cancels.append(group)
            self.cond.notify_all()


def test_cancel_repeats_until_the_run_leaves_its_spark_work(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(runner_module, "RECANCEL_EVERY_S", 0.01)
    context = RecordingContext()
    runner = SparkRunner(Settings(warehouse=str(tmp_path)), lambda _: SimpleNamespace(sparkContext=context))
    runner.spark  # noqa: B018 - as if a run had started the session
    with runner._live_group("mvs-r1"):
        runner.cancel("mvs-r1")
        with context.cond:
            # the first cancel, then more while the run is inside: a job it submits later is cancelled too
            assert context.cond.wait_for(lambda: len(context.cancels) >= 3, WAIT)
    (repeater,) = [t for t in threading.enumerate() if t.name == "cancel-mvs-r1"]
    repeater.join(WAIT)
    assert not repeater.is_alive()  # the run left its Spark work: no more cancels
    assert set(context.cancels) == {"mvs-r1"}


def test_cancel_without_a_session_does_nothing(tmp_path: Path) -> None:
    runner = SparkRunner(Settings(warehouse=str(tmp_path)))
    runner.cancel("mvs-r2")  # no run ever started Spark in this process
    assert not [t for t in threading.enumerate() if t.name == "cancel-mvs-r2"]
