"""`mvs`: publish DDL, run the roles, and inspect the control plane.

mvs topics apply                  create missing topics, report drift
mvs schemas apply                 register schemas/ in the schema registry (MVS_SCHEMA_REGISTRY_URL)
mvs acls apply|show --coordinator User:c --worker User:w --ddl-producer User:alice --operator User:ops
                                  create (or print) the minimal ACLs per role and the DDL inboxes
mvs sql "CREATE MATERIALIZED VIEW ..."   publish one DDL event and print the coordinator's answer
mvs status [--watch SECONDS]      every task: kind, state, owner, epoch, last run, watermark, lag, error
mvs history [TASK]                run history (with each run's planning information)
mvs explain "CREATE MATERIALIZED VIEW …"   FAST or not and why, the plan, MV logs and helper state
mvs tail TOPIC [--from-beginning] decoded records of any mvs topic
          (status, history, tail: --output json for scripts; fields in README "Machine-readable output")
mvs serve [--host H] [--port P]   the REST API (README "REST API"; OpenAPI at /openapi.json)
mvs coordinator | mvs worker      run a role until SIGTERM / Ctrl-C
mvs broker                        run the embedded Kafka broker in the foreground
mvs demo                          the live demo (broker, coordinator, two workers, sample data)

Client commands (topics, sql, status, history, tail) give up after --timeout seconds whatever the
broker does, with one line on stderr (`ERROR 3001: broker unreachable at ...`) and a non-zero exit
code; -v/--debug also shows librdkafka's log and, for an unexpected failure, the traceback.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import traceback

# The names tests and scripts reach through `workers.cli` (they patch cmd_* and WATCHDOG_GRACE_S here).
from workers.cli.commands import (
    cmd_acls,
    cmd_broker,
    cmd_coordinator,
    cmd_demo,
    cmd_explain,
    cmd_history,
    cmd_serve,
    cmd_sql,
    cmd_status,
    cmd_tail,
    cmd_topics,
    cmd_worker,
)
from workers.cli.schemas import add_parser as add_schemas_parser
from workers.config import DEFAULT_CLIENT_TIMEOUT_S, Settings
from workers.failures import (
    EXIT_INTERRUPTED,
    EXIT_REFUSED,
    EXIT_STATEMENT,
    EXIT_UNAVAILABLE,
    WATCHDOG_GRACE_S,
    CommandTimeout,
    UsageError,
    error_line,
    failure,
    within,
)

__all__ = [
    "EXIT_INTERRUPTED",
    "EXIT_REFUSED",
    "EXIT_STATEMENT",
    "EXIT_UNAVAILABLE",
    "WATCHDOG_GRACE_S",
    "CommandTimeout",
    "UsageError",
    "build_parser",
    "error_line",
    "main",
]


def _timeout_option(default: float) -> argparse.ArgumentParser:
    parent = argparse.ArgumentParser(add_help=False)
    parent.add_argument(
        "--timeout",
        type=float,
        default=default,
        metavar="SECONDS",
        help=f"give up after this long, whatever the broker does (default {default:g})",
    )
    return parent


def _output_option() -> argparse.ArgumentParser:
    parent = argparse.ArgumentParser(add_help=False)
    parent.add_argument(
        "--output",
        choices=["text", "json"],
        default="text",
        help="json: stable field names for scripts (README 'Machine-readable output')",
    )
    return parent


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="mvs", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "-v", "--verbose", "--debug", action="store_true", help="librdkafka logs and tracebacks"
    )
    sub = parser.add_subparsers(dest="command", required=True)
    bounded = _timeout_option(DEFAULT_CLIENT_TIMEOUT_S)
    output = _output_option()
    topics = sub.add_parser("topics", help="manage the topics declared in topics/", parents=[bounded])
    topics.add_argument("action", choices=["apply"])
    topics.set_defaults(func=cmd_topics, watchdog=True)
    add_schemas_parser(sub)
    acls = sub.add_parser(
        "acls", help="create (apply) or print (show) the minimal ACLs per role", parents=[bounded]
    )
    acls.add_argument("action", choices=["apply", "show"])
    for role in ("coordinator", "worker", "ddl-producer", "operator"):
        acls.add_argument(f"--{role}", action="append", default=[], metavar="User:NAME")
    acls.set_defaults(func=cmd_acls, watchdog=True)
    sql = sub.add_parser("sql", help="publish one DDL statement", parents=[_timeout_option(60.0)])
    sql.add_argument("statement")
    sql.add_argument("--no-wait", action="store_true", help="do not wait for the coordinator's answer")
    sql.set_defaults(func=cmd_sql, watchdog=True)
    explain = sub.add_parser(
        "explain", help="what a CREATE MATERIALIZED VIEW would be, without creating it", parents=[output]
    )
    explain.add_argument("statement")
    explain.set_defaults(func=cmd_explain)  # reads Delta logs only: no broker to wait for
    status = sub.add_parser("status", help="list every task", parents=[bounded, output])
    status.add_argument("--watch", type=float, default=0.0, metavar="SECONDS")
    status.set_defaults(func=cmd_status)  # bounds each snapshot itself
    history = sub.add_parser("history", help="run history", parents=[bounded, output])
    history.add_argument("task", nargs="?")
    history.add_argument("--limit", type=int, default=30)
    history.set_defaults(func=cmd_history, watchdog=True)
    tail = sub.add_parser("tail", help="print decoded records of a topic", parents=[bounded, output])
    tail.add_argument("topic", help="logical topic name, e.g. ddl, catalog, runs, dlq")
    tail.add_argument("--from-beginning", action="store_true")
    tail.set_defaults(func=cmd_tail)  # bounds connecting; then follows until Ctrl-C
    serve = sub.add_parser("serve", help="serve the REST API until SIGTERM / Ctrl-C")
    serve.add_argument("--host", default=None, help="address to listen on (default MVS_API_HOST, 127.0.0.1)")
    serve.add_argument("--port", type=int, default=None, help="port (default MVS_API_PORT, 8083)")
    serve.set_defaults(func=cmd_serve)
    coordinator = sub.add_parser("coordinator", help="run a coordinator")
    coordinator.add_argument("--metrics-port", type=int, default=0, help="serve Prometheus metrics")
    coordinator.set_defaults(func=cmd_coordinator)
    worker = sub.add_parser("worker", help="run a worker (manager + maintainers + Spark)")
    worker.add_argument("--metrics-port", type=int, default=0, help="serve Prometheus metrics")
    worker.add_argument("--pollers", type=int, default=0, help="maintainer poller threads (0: loop thread)")
    worker.add_argument(
        "--lazy-spark",
        action="store_true",
        help="start Spark on the first run instead of at start (a standby that may never own a task)",
    )
    worker.set_defaults(func=cmd_worker)
    sub.add_parser("broker", help="run the embedded Kafka broker").set_defaults(func=cmd_broker)
    demo = sub.add_parser("demo", help="run the live demo")
    demo.add_argument("--rounds", type=int, default=3)
    demo.add_argument(
        "--registry",
        action="store_true",
        help="a schema registry (Apicurio): records in the Confluent format",
    )
    demo.add_argument(
        "--status-page", action="store_true", help="serve the REST API and status page on MVS_API_PORT (8083)"
    )
    demo.add_argument(
        "--object-store",
        action="store_true",
        help="the warehouse on an S3-compatible object store (versitygw)",
    )
    demo.add_argument("--all", action="store_true", help="every option above")
    demo.set_defaults(func=cmd_demo)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run one command. Nothing escapes as a traceback (unless -v/--debug): a failure is one line
    on stderr and a non-zero exit code."""
    args = build_parser().parse_args(argv)
    logging.basicConfig(
        level=logging.INFO if args.verbose else logging.WARNING,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    # MVS_LOG_LEVEL (e.g. DEBUG) sets mvs's own loggers only: the libraries' DEBUG output drowns them.
    level = os.environ.get("MVS_LOG_LEVEL", "").upper()
    if level in logging.getLevelNamesMapping():
        logging.getLogger("workers").setLevel(level)
    settings: Settings | None = None
    try:
        settings = Settings.from_env()
        configured = settings
        if getattr(args, "watchdog", False):
            # This module's WATCHDOG_GRACE_S, read now: a test may have shortened it.
            return within(args.timeout, lambda: int(args.func(configured, args)), grace_s=WATCHDOG_GRACE_S)
        return int(args.func(settings, args))
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except Exception as exc:
        if args.verbose:
            traceback.print_exc()
        code, message, exit_code = failure(exc, settings)
        print(error_line(code, message), file=sys.stderr, flush=True)
        return exit_code
    finally:
        sys.stdout.flush()


if __name__ == "__main__":
    sys.exit(main())
