"""Latest-version and commit reads of ``workers.warehouse``, local folder vs object store.

Tables of N append commits (written with delta-rs, a checkpoint at the end as Spark writes one every
10 commits) in a local warehouse and in a bucket of the embedded object store (versitygw, started
here); each read is timed as the median of repeated calls. ``delta-rs load`` is what a local latest
version would cost through delta-rs (the path kept for remote tables).

    python -m bench.objectstore_log [--commits 20 200]
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path

from arro3.core import Array, DataType, Table
from deltalake import DeltaTable, write_deltalake

from bench.common import scratch_dir
from workers import warehouse
from workers.config import Settings
from workers.embedded.broker import free_port
from workers.embedded.objectstore import EmbeddedObjectStore


def median_ms(call: Callable[[], object], repeat: int = 30) -> float:
    call()
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        call()
        times.append((time.perf_counter() - start) * 1000)
    return statistics.median(times)


def build(uri: str, commits: int, options: dict[str, str] | None) -> None:
    rows = Table.from_pydict({"a": Array(list(range(10)), DataType.int64())})
    for _ in range(commits):
        write_deltalake(uri, rows, mode="append", storage_options=options)
    DeltaTable(uri, storage_options=options).create_checkpoint()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.objectstore_log")
    parser.add_argument("--commits", type=int, nargs="+", default=[20, 200])
    args = parser.parse_args(argv)
    root = Path(scratch_dir("mvs-objectstore-bench-"))
    with EmbeddedObjectStore(root / "s3", port=free_port()) as store:
        bucket = store.create_bucket("bench")
        env = {**store.environment(), "MVS_WAREHOUSE": f"{bucket}/wh"}
        remote = Settings.from_env(env)
        local = Settings(warehouse=str(root / "local"))
        options = remote.storage.delta_rs_options()
        print(
            f"{'commits':>7} {'where':<12} {'latest_version':>15} {'delta-rs load':>14} {'read_commit':>12}"
        )
        for commits in args.commits:
            name = f"t{commits}"
            build(str(root / "local" / name), commits, None)
            build(f"s3://bench/wh/{name}", commits, options)
            for where, settings in (("local", local), ("object store", remote)):
                uri = warehouse.table_path(settings, name).replace("s3a://", "s3://")
                opts = options if settings is remote else None
                latest = median_ms(partial(warehouse.latest_version, settings, name))
                load = median_ms(partial(DeltaTable, uri, storage_options=opts))
                read = median_ms(partial(warehouse.read_commit, settings, name, commits - 1))
                print(f"{commits:>7} {where:<12} {latest:>12.2f} ms {load:>11.2f} ms {read:>9.2f} ms")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
