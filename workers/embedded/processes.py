"""Running an embedded server in the foreground, and stopping its JVM: SIGTERM (a clean shutdown),
SIGKILL of its group if it hangs."""

from __future__ import annotations

import os
import signal
import subprocess
import threading
from collections.abc import Callable


def run_until_signal(alive: Callable[[], bool]) -> None:
    """Block until SIGTERM / SIGINT (Ctrl-C), or until ``alive()`` says the server exited."""
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    while alive() and not stop.wait(0.2):
        pass


def terminate(process: subprocess.Popen[bytes] | None, timeout_s: float = 30.0) -> None:
    """Stop ``process`` (started with ``start_new_session=True``) if it still runs."""
    if process is None or process.poll() is not None:
        return
    process.send_signal(signal.SIGTERM)
    try:
        process.wait(timeout_s)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()
