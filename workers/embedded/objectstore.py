"""An embedded S3-compatible object store for tests and the one-machine demo: Versity's S3 gateway.

``versitygw`` (Go module proxy, Apache 2.0) with its ``posix`` backend is a real S3 server over
HTTP: SigV4 authentication, ListObjectsV2, multipart uploads, CopyObject, DeleteObjects, directory
objects (``key/``) beside files, conditional writes — what Hadoop's S3A and delta-rs send.
``infra/setup_objectstore.sh`` builds it into ``.cache/objectstore/bin`` with ``go install``. Each
bucket is a folder under the data folder, objects are files below it (metadata in extended
attributes). Nothing here talks S3: it starts the process, waits for its port, and stops it with
SIGTERM.

    python -m workers.embedded.objectstore run    # foreground, Ctrl-C stops it; prints the settings
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from workers.config import CACHE_DIR
from workers.embedded.broker import _port_open, free_port
from workers.embedded.processes import run_until_signal, terminate

VERSITYGW = CACHE_DIR / "objectstore" / "bin" / "versitygw"
DEFAULT_PORT = 19014
# Development credentials of the embedded server (never a real account's).
DEV_ACCESS_KEY = "mvs-dev"
DEV_SECRET_KEY = "mvs-dev-secret-key"


class ObjectStoreError(RuntimeError):
    pass


@dataclass
class EmbeddedObjectStore:
    data_dir: Path
    port: int = DEFAULT_PORT
    access_key: str = DEV_ACCESS_KEY
    secret_key: str = DEV_SECRET_KEY
    binary: Path = VERSITYGW
    _process: subprocess.Popen[bytes] | None = None

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def environment(self) -> dict[str, str]:
        """What a process sets to use this store (``workers.config.StorageSettings``)."""
        return {
            "MVS_S3_ENDPOINT": self.endpoint,
            "AWS_ACCESS_KEY_ID": self.access_key,
            "AWS_SECRET_ACCESS_KEY": self.secret_key,
        }

    def create_bucket(self, name: str) -> str:
        """Bucket ``name`` (a folder of the data folder: how the posix backend stores buckets); its URI."""
        (self.data_dir / name).mkdir(parents=True, exist_ok=True)
        return f"s3://{name}"

    def start(self, timeout_s: float = 20.0) -> EmbeddedObjectStore:
        if not self.binary.exists():
            raise ObjectStoreError(f"{self.binary} not found: run infra/setup_objectstore.sh once")
        if _port_open(self.port):
            raise ObjectStoreError(f"port {self.port} is already in use; is an object store running?")
        self.data_dir.mkdir(parents=True, exist_ok=True)
        out = open(self.data_dir.parent / f"{self.data_dir.name}.log", "ab")  # noqa: SIM115 - the child's
        command = [
            str(self.binary),
            *("--port", f"127.0.0.1:{self.port}", "--quiet"),
            *("--access", self.access_key, "--secret", self.secret_key),
            *("posix", str(self.data_dir)),
        ]
        self._process = subprocess.Popen(
            command, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
        )
        deadline = time.monotonic() + timeout_s
        while not _port_open(self.port):
            if self._process.poll() is not None:
                raise ObjectStoreError(f"versitygw exited with {self._process.returncode}; see {out.name}")
            if time.monotonic() > deadline:
                self.stop()
                raise ObjectStoreError(f"versitygw did not listen within {timeout_s}s; see {out.name}")
            time.sleep(0.05)
        return self

    def stop(self, timeout_s: float = 10.0) -> None:
        process, self._process = self._process, None
        terminate(process, timeout_s)

    def kill(self) -> None:
        """Stop it with SIGKILL: an outage, nothing closed cleanly (``start`` brings it back, same data)."""
        process, self._process = self._process, None
        if process is not None and process.poll() is None:
            process.kill()
            process.wait(10)

    def __enter__(self) -> EmbeddedObjectStore:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m workers.embedded.objectstore")
    parser.add_argument("command", choices=["run"])
    parser.add_argument("--data-dir", type=Path, default=CACHE_DIR / "objectstore" / "data")
    parser.add_argument("--port", type=int, default=DEFAULT_PORT)
    parser.add_argument("--bucket", default="mvs", help="created if missing (default: mvs)")
    args = parser.parse_args(argv)
    store = EmbeddedObjectStore(args.data_dir, port=args.port or free_port()).start()
    bucket = store.create_bucket(args.bucket)
    settings = " ".join(f"{k}={v}" for k, v in store.environment().items())
    print(f"versitygw serving on {store.endpoint}; use it with: {settings} MVS_WAREHOUSE={bucket}/warehouse")
    run_until_signal(lambda: store._process is not None and store._process.poll() is None)
    store.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
