"""Run every benchmark in turn (each prints its table and, last, its JSON line).

.venv/bin/python -m bench.run_all
"""

from __future__ import annotations

import subprocess
import sys

BENCHES = (
    "bench.sched_precision",
    "bench.skip_refresh",
    "bench.warm_vs_submit",
    "bench.fast_vs_complete",
    "bench.codec_throughput",
)


def main() -> int:
    failed = 0
    for module in BENCHES:
        print(f"\n$ python -m {module}", flush=True)
        # One process each: every bench owns its SparkSession (or none) and its CPU figures.
        failed += subprocess.run([sys.executable, "-m", module], check=False).returncode != 0
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
