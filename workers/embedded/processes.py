"""Stopping an embedded server's JVM: SIGTERM (a clean shutdown), SIGKILL of its group if it hangs."""

from __future__ import annotations

import os
import signal
import subprocess


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
