"""The package's layers and owners of outside dependencies (the import-linter contracts in
``pyproject.toml``), and the refresh engine's public face."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import workers.jobs

ROOT = Path(__file__).resolve().parents[2]
_LINT = "; ".join(
    [
        "import sys",
        "from importlinter.cli import lint_imports",
        "sys.exit(lint_imports(no_cache=True, no_logo=True))",
    ]
)


def test_every_import_contract_is_kept() -> None:
    # In a process of its own, run from the checkout: the contracts are read from its pyproject.toml
    # and its ``workers`` is the one analysed.
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    linted = subprocess.run(
        [sys.executable, "-c", _LINT], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120
    )
    assert linted.returncode == 0, linted.stdout + linted.stderr
    assert "0 broken" in linted.stdout, linted.stdout


def test_the_engines_public_names_are_what_their_modules_define() -> None:
    for name in workers.jobs.__all__:
        found = getattr(workers.jobs, name)
        assert getattr(found, "__name__", name) == name, name
        assert found.__module__.startswith("workers.jobs."), (name, found.__module__)
