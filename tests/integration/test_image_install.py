"""The container image's install step, without a Docker engine: the files infra/Dockerfile copies are
copied to an empty folder, and its RUN step runs there — the pip install (resolved against the package
index, not installed: ``--dry-run``) and the jar fetch (mvn, into the folder's own .cache/jars). A
file the image forgets to copy, a dependency that does not resolve, or a jar profile that does not
fetch fails here instead of in ``docker build``. (tests/integration/test_containers.py builds the image
itself and runs it.)"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from workers.config import REPO_ROOT

pytestmark = pytest.mark.integration

DOCKERFILE = REPO_ROOT / "infra" / "Dockerfile"


def test_the_images_install_step_runs_on_exactly_the_files_it_copies(tmp_path: Path) -> None:
    dockerfile = DOCKERFILE.read_text()
    for sources in re.findall(r"^COPY (.+) \S+$", dockerfile, re.M):
        for source in sources.split():
            path = REPO_ROOT / source
            copy = shutil.copytree if path.is_dir() else shutil.copy
            copy(path, tmp_path / source)
    (run,) = re.findall(r"^RUN (pip install .+)$", dockerfile, re.M)
    pip_step, fetch_step, cleanup = (part.strip() for part in run.split("&&"))
    assert pip_step == "pip install --no-cache-dir -e ." and fetch_step == "bash infra/fetch_jars.sh"
    assert cleanup == "rm -rf /root/.m2"  # Maven's download cache, not the jars it fetched

    report = tmp_path / "report.json"
    pip = [sys.executable, "-m", "pip", "install", "--dry-run", "--ignore-installed", "--quiet"]
    done = subprocess.run(
        [*pip, "--report", str(report), "-e", "."], cwd=tmp_path, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    installed = {item["metadata"]["name"].lower() for item in json.loads(report.read_text())["install"]}
    assert {"mvs", "pyspark", "delta-spark", "confluent-kafka", "fastavro", "deltalake"} <= installed

    done = subprocess.run(["bash", "infra/fetch_jars.sh"], cwd=tmp_path, capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr
    jars = {jar.name for jar in (tmp_path / ".cache" / "jars").rglob("*.jar")}
    for prefix in ("delta-spark_", "delta-storage-", "hadoop-aws-", "kafka_"):
        assert any(jar.startswith(prefix) for jar in jars), f"no {prefix}*.jar fetched"
