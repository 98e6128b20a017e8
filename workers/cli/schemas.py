"""`mvs schemas apply`: register schemas/ in the schema registry (MVS_SCHEMA_REGISTRY_URL)."""

from __future__ import annotations

import argparse
import sys

from workers.catalog.errors import ErrorCode
from workers.config import Settings
from workers.failures import EXIT_REFUSED, error_line


def cmd_schemas(settings: Settings, args: argparse.Namespace) -> int:
    """Every declared topic's value schema under ``<topic>-value`` with BACKWARD compatibility;
    an incompatible local change exits 1 naming the subject and its fields (nothing of it is kept)."""
    from workers.kafka.subjects import apply_schemas

    report = apply_schemas(settings)
    print(report)
    for result in report.incompatible:
        message = f"{result.subject}: {result.record_type} is not BACKWARD compatible: {result.problem}"
        print(error_line(ErrorCode.INVALID_CONFIG, message), file=sys.stderr)
    return EXIT_REFUSED if report.incompatible else 0


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    schemas = sub.add_parser("schemas", help="register schemas/ in the schema registry (BACKWARD)")
    schemas.add_argument("action", choices=["apply"])
    schemas.set_defaults(func=cmd_schemas)
