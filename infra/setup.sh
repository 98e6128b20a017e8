#!/usr/bin/env bash
# Everything a fresh machine needs, idempotent: the venv with mvs and its tools, and every
# JVM jar (Kafka broker, Delta Lake) fetched from Maven Central with mvn into .cache/jars.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
python="${PYTHON:-python3.11}"
command -v "$python" >/dev/null || python=python3
if [[ ! -x .venv/bin/python ]]; then
  "$python" -m venv .venv
fi
stamp=.venv/.mvs-installed
if [[ ! -f "$stamp" || pyproject.toml -nt "$stamp" ]]; then
  .venv/bin/pip install -q --upgrade pip
  .venv/bin/pip install -q -e ".[dev,bench]"
  touch "$stamp"
fi
bash infra/fetch_jars.sh >/dev/null
# The Spark driver JVM's class archive (infra/make_class_archive.py): every worker starts faster.
.venv/bin/python infra/make_class_archive.py
bash infra/setup_registry.sh >/dev/null
bash infra/setup_compose_schema.sh >/dev/null
bash infra/setup_browser.sh
bash infra/setup_objectstore.sh >/dev/null
echo "mvs set up: .venv ready, jars in .cache/jars"
