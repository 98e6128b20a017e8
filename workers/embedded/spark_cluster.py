"""A Spark standalone cluster from PySpark's own distribution: one master and N workers, each its own
JVM started with ``spark-class`` (``org.apache.spark.deploy.master.Master`` / ``...worker.Worker``),
for tests and for trying ``MVS_SPARK_MASTER=spark://host:7077`` on one machine.

Nothing here is mvs-specific: a worker process of mvs is the driver (its SparkSession connects to the
master), the executors run on the cluster's workers, and the Delta (and S3A) jars reach them through
``spark.jars`` (``workers.jobs.spark.session``), which the driver serves to its executors.

    python -m workers.embedded.spark_cluster --workers 1     # foreground, Ctrl-C stops it
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from importlib.util import find_spec
from pathlib import Path

from workers.config import CACHE_DIR
from workers.embedded.broker import free_port
from workers.embedded.processes import run_until_signal, terminate

# PySpark's distribution (bin/spark-class, jars/), found without importing pyspark (workers.jobs owns it).
_PYSPARK = find_spec("pyspark")
SPARK_HOME = Path(_PYSPARK.origin).parent if _PYSPARK is not None and _PYSPARK.origin else Path("pyspark")


class SparkClusterError(RuntimeError):
    pass


@dataclass
class SparkStandalone:
    data_dir: Path
    workers: int = 1
    cores: int = 1  # per worker
    memory: str = "1g"  # per worker
    port: int = field(default_factory=free_port)
    ui_port: int = field(default_factory=free_port)
    _processes: list[subprocess.Popen[bytes]] = field(default_factory=list)

    @property
    def master_url(self) -> str:
        return f"spark://127.0.0.1:{self.port}"

    def _spawn(self, name: str, *args: str) -> None:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        env = {**os.environ, "SPARK_HOME": str(SPARK_HOME), "SPARK_LOCAL_IP": "127.0.0.1"}
        out = open(self.data_dir / f"{name}.log", "ab")  # noqa: SIM115 - owned by the child process
        command = [str(SPARK_HOME / "bin" / "spark-class"), *args]
        process = subprocess.Popen(
            command, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
        )
        self._processes.append(process)

    def start(self, timeout_s: float = 90.0) -> SparkStandalone:
        master = "org.apache.spark.deploy.master.Master"
        self._spawn(
            "master",
            master,
            "--host",
            "127.0.0.1",
            "--port",
            str(self.port),
            "--webui-port",
            str(self.ui_port),
        )
        for i in range(self.workers):
            self._spawn(
                f"worker{i + 1}",
                "org.apache.spark.deploy.worker.Worker",
                self.master_url,
                "--host", "127.0.0.1",
                "--cores", str(self.cores),
                "--memory", self.memory,
                "--webui-port", str(free_port()),
                "--work-dir", str(self.data_dir / f"work{i + 1}"),
            )  # fmt: skip
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            dead = [str(p.args) for p in self._processes if p.poll() is not None]
            if dead:
                self.stop()
                raise SparkClusterError(f"{dead[0]} exited; see {self.data_dir}/*.log")
            if len(self.alive_workers()) >= self.workers:
                return self
            time.sleep(0.25)  # a JVM starting: nothing to wait on but its HTTP status
        self.stop()
        raise SparkClusterError(f"no {self.workers} live workers within {timeout_s}s; see {self.data_dir}")

    def status(self) -> dict[str, object]:
        """The master's status JSON (workers, applications), or {} while it does not answer."""
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.ui_port}/json/", timeout=2) as answer:
                loaded = json.load(answer)
        except (OSError, urllib.error.URLError, ValueError):
            return {}
        return loaded if isinstance(loaded, dict) else {}

    def alive_workers(self) -> list[dict[str, object]]:
        workers = self.status().get("workers", [])
        return (
            [w for w in workers if isinstance(w, dict) and w.get("state") == "ALIVE"]
            if isinstance(workers, list)
            else []
        )

    def executor_log_files(self) -> list[Path]:
        """Where every executor the workers ran writes its stderr (``<work dir>/<app>/<executor>/stderr``)."""
        return sorted(self.data_dir.glob("work*/*/*/stderr"))

    def executor_logs(self) -> str:
        """What every executor the workers ran wrote to stderr."""
        return "\n".join(p.read_text(errors="replace") for p in self.executor_log_files())

    def stop(self) -> None:
        processes, self._processes = self._processes, []
        for process in reversed(processes):  # workers first, then the master
            terminate(process, timeout_s=20)

    def __enter__(self) -> SparkStandalone:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m workers.embedded.spark_cluster")
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--cores", type=int, default=1)
    parser.add_argument("--port", type=int, default=7077)
    parser.add_argument("--data-dir", type=Path, default=CACHE_DIR / "spark-cluster")
    args = parser.parse_args(argv)
    with SparkStandalone(args.data_dir, workers=args.workers, cores=args.cores, port=args.port) as cluster:
        print(f"spark master {cluster.master_url} (UI http://127.0.0.1:{cluster.ui_port}/)", flush=True)
        print(f"set MVS_SPARK_MASTER={cluster.master_url}", flush=True)
        run_until_signal(lambda: True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
