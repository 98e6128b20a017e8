"""Per test file: wall seconds and CPU seconds of the test process and all its descendants (Spark JVMs,
brokers, role processes), to rank ``LONGEST_FIRST`` in tests/conftest.py from a whole run.
``--durations`` names only the slowest items; xdist hands out whole files, and on a loaded machine
wall time says little, CPU time much more.

Opt-in (a pytest plugin tests/conftest.py loads): ``MVS_FILE_TIMES=<path> pytest …`` appends one JSON
line per file to ``<path>`` from each process (``{"file", "wall_s", "cpu_s", "worker"}``), e.g.
``jq -s 'group_by(.file)|map({file:.[0].file,cpu:(map(.cpu_s)|add)})|sort_by(-.cpu)' <path>``.
A file's time is the sum of its items' (set-up and teardown included: a module fixture's cost lands on
the file's first item, a session fixture's on the first file that asks for it). Not counted: processes
that are no descendants (containers run by dockerd), a descendant's CPU after its last sample, and
descendants that live less than a sample."""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Generator
from pathlib import Path

import pytest

TIMES_ENV = "MVS_FILE_TIMES"
SAMPLE_S = 0.5
_TICK_S = 1 / os.sysconf("SC_CLK_TCK")


def _stat(pid: int) -> tuple[int, int, float] | None:
    """(parent pid, start time, CPU seconds of the process itself)."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:  # gone meanwhile
        return None
    fields = text[text.rfind(")") + 2 :].split()  # after the command name, which may hold spaces
    return int(fields[1]), int(fields[19]), (int(fields[11]) + int(fields[12])) * _TICK_S


class TreeCpu:
    """CPU seconds used by a process and every descendant seen so far, sampled every ``SAMPLE_S`` by
    a thread: a descendant's last sample counts after it exits, even when nobody reaps it (a Spark JVM
    outlives the role process that started it, and its parent's ``cutime`` never gets it)."""

    def __init__(self, root: int) -> None:
        self.root = root
        self.seen: dict[tuple[int, int], float] = {}  # (pid, start time) → CPU s at its last sample
        self.lock = threading.Lock()
        self.stopped = threading.Event()
        threading.Thread(target=self._run, name="file-times", daemon=True).start()

    def _run(self) -> None:
        while not self.stopped.wait(SAMPLE_S):
            self.total()

    def total(self) -> float:
        found = {int(e): st for e in os.listdir("/proc") if e.isdigit() and (st := _stat(int(e)))}
        children: dict[int, list[int]] = {}
        for pid, (parent, _, _) in found.items():
            children.setdefault(parent, []).append(pid)
        with self.lock:
            stack = [self.root]
            while stack:
                pid = stack.pop()
                if pid in found:
                    _, started, cpu = found[pid]
                    self.seen[(pid, started)] = cpu
                stack.extend(children.get(pid, []))
            return sum(self.seen.values())


class FileTimes:
    def __init__(self, path: Path) -> None:
        self.path = path
        self.worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
        self.times: dict[str, tuple[float, float]] = {}  # file → (wall s, CPU s)
        self.cpu = TreeCpu(os.getpid())

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_protocol(self, item: pytest.Item) -> Generator[None]:
        wall, cpu = time.monotonic(), self.cpu.total()
        yield
        file = item.nodeid.split("::", 1)[0]
        spent_wall, spent_cpu = self.times.get(file, (0.0, 0.0))
        self.times[file] = (
            spent_wall + time.monotonic() - wall,
            spent_cpu + self.cpu.total() - cpu,
        )

    def pytest_sessionfinish(self) -> None:
        self.cpu.stopped.set()
        lines = [
            json.dumps({"file": f, "wall_s": round(w, 1), "cpu_s": round(c, 1), "worker": self.worker})
            for f, (w, c) in self.times.items()
        ]
        if lines:
            with self.path.open("a") as out:  # one write: the processes append side by side
                out.write("\n".join(lines) + "\n")


def pytest_configure(config: pytest.Config) -> None:
    path = os.environ.get(TIMES_ENV)
    if path:
        config.pluginmanager.register(FileTimes(Path(path)), "mvs-file-times")
