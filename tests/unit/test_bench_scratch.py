"""A benchmark's scratch folder (``bench.common.scratch_dir``) is gone once its process exits."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path


def test_a_benchmarks_scratch_folder_is_removed_when_its_process_exits(tmp_path: Path) -> None:
    made = subprocess.run(
        [
            sys.executable,
            "-c",
            "import pathlib, tempfile; tempfile.tempdir = pathlib.Path(__import__('sys').argv[1]);"
            "from bench.common import scratch_dir; p = pathlib.Path(scratch_dir('mvs-x-'));"
            "(p / 'table').mkdir(); (p / 'table' / 'part-0.parquet').write_bytes(b'rows'); print(p)",
            str(tmp_path),
        ],
        capture_output=True,
        text=True,
        check=True,
        cwd=Path(__file__).resolve().parents[2],
    )
    folder = Path(made.stdout.strip())
    assert folder.parent == tmp_path and folder.name.startswith("mvs-x-")
    assert not folder.exists()
