"""What a maintainer's mailbox carries (seed 004), and the context of one run.

The manager sends ``Due``/``Command``/``Update``/``Stop``; the executor thread of a run sends
``RunStarted``/``RunFinished`` back to the maintainer that submitted it.
"""

from __future__ import annotations

from dataclasses import dataclass

from workers.records import Record
from workers.sched.executor import RunOutcome


@dataclass(frozen=True)
class Due:
    pass


@dataclass(frozen=True)
class Command:
    record: Record  # a MaintainerCommand


@dataclass(frozen=True)
class Update:
    task: Record  # a newer TaskRecord from ADD_MAINTAINER


@dataclass(frozen=True)
class RunStarted:
    run: RunContext
    started: float  # scheduling clock, when the body began


@dataclass(frozen=True)
class RunFinished:
    run: RunContext
    outcome: RunOutcome


@dataclass(frozen=True)
class Stop:
    pass


@dataclass(frozen=True)
class RunContext:
    run_id: str
    epoch: int
    trigger: str
    queued_ms: int  # wall clock at submission; the RUNNING record carries the real start
    watermark_before: dict[str, int]

    @property
    def job_group(self) -> str:
        return f"mvs-{self.run_id}"
