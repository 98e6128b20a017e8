"""Per test file: wall seconds and CPU seconds of the test process and all its descendants (Spark JVMs,
brokers, role processes), to rank ``LONGEST_FIRST`` in tests/conftest.py from a whole run.
``--durations`` names only the slowest items; xdist hands out whole files, and on a loaded machine
wall time says little, CPU time much more.

Opt-in (a pytest plugin tests/conftest.py loads): ``MVS_FILE_TIMES=<path> pytest …`` appends one JSON
line per file to ``<path>`` from each process (``{"file", "wall_s", "cpu_s", "worker"}``), e.g.
``jq -s 'group_by(.file)|map({file:.[0].file,cpu:(map(.cpu_s)|add)})|sort_by(-.cpu)' <path>``.
A file's time is the sum of its items' (set-up and teardown included: a module fixture's cost lands on
the file's first item, a session fixture's on the first file that asks for it). Not counted: processes
that are no descendants (containers run by dockerd) and a descendant's CPU once it exits unreaped by a
living descendant."""

from __future__ import annotations

import json
import os
import time
from collections.abc import Generator
from pathlib import Path

import pytest

TIMES_ENV = "MVS_FILE_TIMES"
_TICK_S = 1 / os.sysconf("SC_CLK_TCK")


def _stat(pid: int) -> tuple[int, float] | None:
    """(parent pid, CPU seconds of the process and its reaped children)."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:  # gone meanwhile
        return None
    fields = text[text.rfind(")") + 2 :].split()  # after the command name, which may hold spaces
    utime, stime, cutime, cstime = (int(v) for v in fields[11:15])
    return int(fields[1]), (utime + stime + cutime + cstime) * _TICK_S


def tree_cpu_s(root: int) -> float:
    """CPU seconds used so far by ``root`` and its living descendants (with their reaped children)."""
    parents: dict[int, int] = {}
    cpu: dict[int, float] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit() and (found := _stat(int(entry))) is not None:
            parents[int(entry)], cpu[int(entry)] = found
    children: dict[int, list[int]] = {}
    for pid, parent in parents.items():
        children.setdefault(parent, []).append(pid)
    total, stack = 0.0, [root]
    while stack:
        pid = stack.pop()
        total += cpu.get(pid, 0.0)
        stack.extend(children.get(pid, []))
    return total


class FileTimes:
    def __init__(self, path: Path) -> None:
        self.path = path
        self.worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
        self.times: dict[str, tuple[float, float]] = {}  # file → (wall s, CPU s)

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_protocol(self, item: pytest.Item) -> Generator[None]:
        wall, cpu = time.monotonic(), tree_cpu_s(os.getpid())
        yield
        file = item.nodeid.split("::", 1)[0]
        spent_wall, spent_cpu = self.times.get(file, (0.0, 0.0))
        self.times[file] = (
            spent_wall + time.monotonic() - wall,
            spent_cpu + tree_cpu_s(os.getpid()) - cpu,
        )

    def pytest_sessionfinish(self) -> None:
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
