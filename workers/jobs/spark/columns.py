"""Column references by name for Spark: names quoted, so any column name (a user's) resolves as itself."""

from __future__ import annotations

from pyspark.sql import Column
from pyspark.sql import functions as F


def q(name: str) -> str:
    """Backtick-quote a column name for Spark."""
    return "`" + name.replace("`", "``") + "`"


def col(alias: str, name: str) -> Column:
    """Column ``name`` of the frame aliased ``alias``."""
    return F.col(f"{alias}.{q(name)}")
