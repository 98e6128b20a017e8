"""Fixtures of the jobs' integration tests."""

from __future__ import annotations

from pathlib import Path

import pytest

from workers.config import Settings


@pytest.fixture(scope="module")
def warehouse_settings(tmp_path_factory: pytest.TempPathFactory) -> Settings:
    """One warehouse for the module: every example makes its own uniquely named tables (and drops them)."""
    return Settings(warehouse=str(Path(tmp_path_factory.mktemp("fast-properties")) / "warehouse"))
