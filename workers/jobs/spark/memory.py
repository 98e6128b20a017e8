"""The driver JVM's heap (``spark.driver.memory``): what the operator set, else sized from the machine.

Spark's default is 1g, and in local mode the driver is also the executor: every join, aggregate and
held frame of a run lives in that heap. At TPC-H SF 1, 66 MVs refreshed by one worker, q21's recompute
took 24 s instead of 10 (collections), then the JVM died (session 27). So a local master gets a quarter
of the machine's memory (its cgroup limit in a container, where the JVM is killed rather than collects
past it), within ``LOCAL_BOUNDS``: a machine may run several workers, each with its own JVM. The heap
can only be set before the JVM starts (``-Xmx`` in ``spark.driver.extraJavaOptions`` is refused by
Spark's launcher), hence a setting of its own (``MVS_SPARK_DRIVER_MEMORY``).
"""

from __future__ import annotations

import os
from pathlib import Path

MIB = 1 << 20
LOCAL_SHARE = 0.25
LOCAL_BOUNDS = (1024 * MIB, 4096 * MIB)  # Spark's default at least; at most what a worker needs here
# Where a container's memory limit is read (cgroup v2, then v1); a number, or "max" for none.
CGROUP_LIMITS = (Path("/sys/fs/cgroup/memory.max"), Path("/sys/fs/cgroup/memory/memory.limit_in_bytes"))


def machine_memory(limits: tuple[Path, ...] = CGROUP_LIMITS) -> int | None:
    """This machine's memory in bytes, or its container's limit where lower; None when unknown."""
    try:
        found = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError):
        return None
    for path in limits:
        try:
            text = path.read_text().strip()
        except OSError:
            continue
        if text.isdigit():
            found = min(found, int(text))
    return found


def driver_memory(configured: str, master: str, machine: int | None) -> str | None:
    """``spark.driver.memory`` for a session: ``configured`` when set; for a local master a share of
    ``machine`` (bytes) within ``LOCAL_BOUNDS``; else None (Spark's own default, or the cluster's)."""
    if configured:
        return configured
    if not master.startswith("local") or machine is None:
        return None
    low, high = LOCAL_BOUNDS
    return f"{min(max(int(machine * LOCAL_SHARE), low), high) // MIB}m"
