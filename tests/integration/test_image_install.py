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
            path, target = REPO_ROOT / source, tmp_path / source
            target.parent.mkdir(parents=True, exist_ok=True)
            if path.is_dir():
                shutil.copytree(path, target, dirs_exist_ok=True)
            else:
                shutil.copy(path, target)
    runs = re.findall(r"^RUN (.+?)$", dockerfile, re.M)
    assert "pip install --no-cache-dir -r /tmp/requirements.txt" in dockerfile  # pyproject's pins
    assert "bash infra/fetch_jars.sh && rm -rf /root/.m2" in runs  # Maven's cache, not the jars
    assert runs[-1] == "pip install --no-cache-dir --no-deps -e ."

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
