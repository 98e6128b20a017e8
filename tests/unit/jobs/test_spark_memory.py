"""The driver JVM's heap: the operator's size, else a share of the machine (or its container) for a
local master, within bounds; a wrong size is refused where it is set, naming it."""

from __future__ import annotations

from pathlib import Path

import pytest

from workers.config import Settings
from workers.jobs.spark.memory import LOCAL_BOUNDS, MIB, driver_memory, machine_memory

GIB = 1024 * MIB


@pytest.mark.parametrize(
    ("configured", "master", "machine", "expected"),
    [
        ("8g", "local[2]", 24 * GIB, "8g"),  # the operator's, as set
        ("", "local[2]", 24 * GIB, f"{LOCAL_BOUNDS[1] // MIB}m"),  # a quarter, at most the bound
        ("", "local[*]", 8 * GIB, "2048m"),  # a quarter
        ("", "local[2]", 2 * GIB, f"{LOCAL_BOUNDS[0] // MIB}m"),  # never below Spark's 1g
        ("", "spark://master:7077", 24 * GIB, None),  # a cluster's driver: its own default
        ("", "local[2]", None, None),  # the machine unknown: Spark's default
        ("6g", "yarn", None, "6g"),
    ],
)
def test_the_driver_heap_is_the_operators_or_a_share_of_the_machine(
    configured: str, master: str, machine: int | None, expected: str | None
) -> None:
    assert driver_memory(configured, master, machine) == expected


def test_a_containers_limit_caps_the_machines_memory(tmp_path: Path) -> None:
    physical = machine_memory(())
    assert physical is not None and physical > 0
    limit, unlimited, missing = tmp_path / "memory.max", tmp_path / "v1", tmp_path / "absent"
    limit.write_text(f"{512 * MIB}\n")
    unlimited.write_text("max\n")
    assert machine_memory((missing, unlimited)) == physical  # no limit: the machine's
    assert machine_memory((missing, limit, unlimited)) == min(physical, 512 * MIB)


@pytest.mark.parametrize("value", ["4g", "512m", "2048", " 8G "])
def test_a_driver_memory_setting_is_read_from_the_environment(value: str) -> None:
    settings = Settings.from_env({"MVS_SPARK_DRIVER_MEMORY": value})
    assert settings.spark_driver_memory == value.strip()
    assert Settings.from_env({}).spark_driver_memory == ""


@pytest.mark.parametrize("value", ["4 GB", "-1g", "0", "-Xmx4g", "lots"])
def test_a_wrong_driver_memory_is_refused_naming_the_setting(value: str) -> None:
    with pytest.raises(ValueError, match="MVS_SPARK_DRIVER_MEMORY"):
        Settings.from_env({"MVS_SPARK_DRIVER_MEMORY": value})
