"""The container test's images, built in the background from the start of the pytest session.

``infra/setup_containers.sh`` is mostly waiting on the network and the disk (apt, debootstrap, the
image layers), so it runs beside the CPU-bound tests from the moment a session collects the container
test, and that test waits for it (``wait``). A pytest plugin (``tests/conftest.py`` loads it): the main
process makes a folder for the build's state and names it in an environment variable its xdist workers
inherit; the first worker to collect the container test starts the build (one per session, whoever
collects it); the main process's ``pytest_unconfigure`` ends a build still running and stops the daemon
the build started, if the test did not already."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

import pytest

from workers.config import REPO_ROOT

STATE_ENV = "MVS_IMAGE_BUILD_STATE"
DAEMON_STARTED = "dockerd: started"  # infra/setup_containers.sh --keep-daemon says so


@dataclass(frozen=True)
class ImageBuild:
    """One session's build: its state folder holds ``pid``, ``log`` and, once done, ``rc``."""

    state: Path

    @classmethod
    def of_session(cls) -> ImageBuild:
        folder = os.environ.get(STATE_ENV)
        if folder is None:  # a session without the plugin: the build is this process's own
            folder = os.environ[STATE_ENV] = tempfile.mkdtemp(prefix="mvs-image-build-")
        return cls(Path(folder))

    def start(self) -> bool:
        """Starts the build unless this session already has; True if this call started it."""
        try:
            claim = os.open(self.state / "pid", os.O_CREAT | os.O_EXCL | os.O_WRONLY)
        except FileExistsError:
            return False
        # rc appears whole, once the build has ended (renamed into place).
        script = (
            'bash infra/setup_containers.sh --keep-daemon >"$1/log" 2>&1; '
            'echo $? >"$1/rc.tmp"; mv "$1/rc.tmp" "$1/rc"'
        )
        # Its own session: it outlives the worker that started it if the test runs in the other one.
        build = subprocess.Popen(
            ["bash", "-c", script, "build", str(self.state)],
            cwd=REPO_ROOT,
            start_new_session=True,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        os.write(claim, str(build.pid).encode())
        os.close(claim)
        return True

    def log(self) -> str:
        path = self.state / "log"
        return path.read_text(errors="replace") if path.exists() else ""

    def exit_code(self) -> int | None:
        path = self.state / "rc"
        return int(path.read_text()) if path.exists() else None

    def ended(self) -> bool:
        return self.exit_code() is not None

    def wait(self, timeout_s: float) -> str:
        """The build's log once it has succeeded; fails with the log at the deadline or on an error."""
        from tests.support.cluster import wait_until

        try:
            wait_until(self.ended, timeout_s=timeout_s, what="the image build", every_s=1)
        except AssertionError as exc:
            raise AssertionError(f"{exc}:\n{self.log()}") from None
        code = self.exit_code()
        assert code == 0, f"infra/setup_containers.sh exited {code}:\n{self.log()}"
        return self.log()

    def end(self) -> None:
        """Stops the build if it still runs, then the daemon if the build started it (once)."""
        pid_file = self.state / "pid"
        if self.exit_code() is None and pid_file.exists() and pid_file.read_text():
            with contextlib.suppress(ProcessLookupError):
                os.killpg(int(pid_file.read_text()), signal.SIGTERM)
        stopped = self.state / "daemon-stopped"
        if DAEMON_STARTED in self.log() and not stopped.exists():
            subprocess.run(["bash", "infra/dockerd.sh", "stop"], cwd=REPO_ROOT, check=False, timeout=120)
            stopped.touch()


def engine_unavailable() -> str | None:
    """Why the container test cannot run here, or None."""
    if os.geteuid() != 0:
        return "needs root: it starts the project's own Docker daemon and builds a base with debootstrap"
    if shutil.which("dockerd") is None and shutil.which("apt-get") is None:
        return "no dockerd, and no apt-get to install Debian's docker.io"
    return None


def _is_worker(config: pytest.Config) -> bool:
    return hasattr(config, "workerinput")


_owned: list[Path] = []  # the state folder this process made (a pytest run inside a test inherits it)


def pytest_configure(config: pytest.Config) -> None:
    if not _is_worker(config) and STATE_ENV not in os.environ:
        os.environ[STATE_ENV] = tempfile.mkdtemp(prefix="mvs-image-build-")
        _owned.append(Path(os.environ[STATE_ENV]))


def pytest_collection_finish(session: pytest.Session) -> None:
    if any(item.get_closest_marker("containers") for item in session.items) and not engine_unavailable():
        ImageBuild.of_session().start()


def pytest_unconfigure(config: pytest.Config) -> None:
    while _owned:
        build = ImageBuild(_owned.pop())
        build.end()
        shutil.rmtree(build.state, ignore_errors=True)
        os.environ.pop(STATE_ENV, None)
