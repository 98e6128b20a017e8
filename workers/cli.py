"""`mvs`: publish DDL, run the roles, and inspect the control plane.

mvs topics apply                  create missing topics, report drift
mvs acls apply|show --coordinator User:c --worker User:w --ddl-producer User:alice --operator User:ops
                                  create (or print) the minimal ACLs per role and the DDL inboxes
mvs sql "CREATE MATERIALIZED VIEW ..."   publish one DDL event and print the coordinator's answer
mvs status [--watch SECONDS]      every task: kind, state, owner, epoch, last run, watermark, lag, error
mvs history [TASK]                run history
mvs tail TOPIC [--from-beginning] decoded records of any mvs topic
mvs coordinator | mvs worker      run a role until SIGTERM / Ctrl-C
mvs broker                        run the embedded Kafka broker in the foreground
mvs demo                          the live demo (broker, coordinator, two workers, sample data)

Client commands (topics, sql, status, history, tail) give up after --timeout seconds whatever the
broker does, with one line on stderr (`ERROR 3001: broker unreachable at ...`) and a non-zero exit
code; -v/--debug also shows librdkafka's log and, for an unexpected failure, the traceback.
"""

from __future__ import annotations

import argparse
import faulthandler
import json
import logging
import signal
import sys
import threading
import time
import traceback
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

from workers.config import Settings

if TYPE_CHECKING:
    from workers.client import MvsClient

T = TypeVar("T")
EXIT_REFUSED = 1  # the coordinator refused the statement; also any other failure
EXIT_STATEMENT = 2  # the statement is not valid DDL (nothing published)
EXIT_UNAVAILABLE = 3  # no answer from the broker or a coordinator, or refused credentials
EXIT_INTERRUPTED = 130
# The command's own deadlines report first; this much later the watchdog gives up on it.
WATCHDOG_GRACE_S = 2.0
DEFAULT_TIMEOUT_S = 30.0


class UsageError(Exception):
    """The command line asks for something that does not exist (code 1001)."""


def error_line(code: int | None, message: str) -> str:
    """The one line a failed command prints: ``ERROR <code>: <message>``."""
    text = " ".join(str(message).split())
    return f"ERROR {code}: {text}" if code is not None else f"ERROR: {text}"


class CommandTimeout(Exception):
    """The command did not end within its timeout (a call the deadlines could not bound)."""


def _within(timeout_s: float, call: Callable[[], T]) -> T:
    """``call()`` on a helper thread, given up on ``WATCHDOG_GRACE_S`` after ``timeout_s``: every
    Kafka call inside is bounded by the command's deadline, this bounds what they cannot (a broker
    that accepts connections and never answers, a close that waits for it)."""
    box: dict[str, Any] = {}

    def run() -> None:
        try:
            box["result"] = call()
        except BaseException as exc:  # handed to the caller's thread
            box["error"] = exc

    thread = threading.Thread(target=run, name="mvs-command", daemon=True)
    thread.start()
    thread.join(timeout_s + WATCHDOG_GRACE_S)
    if thread.is_alive():
        raise CommandTimeout(f"no answer within {timeout_s:g}s")
    if "error" in box:
        raise box["error"]
    result: T = box["result"]
    return result


def _stop_event() -> threading.Event:
    stop = threading.Event()

    def _on_signal(*_: object) -> None:
        stop.set()

    signal.signal(signal.SIGTERM, _on_signal)
    signal.signal(signal.SIGINT, _on_signal)
    # `kill -USR1 <pid>` prints every thread's stack to stderr: what a role that seems stuck is doing.
    faulthandler.register(signal.SIGUSR1, all_threads=True)
    return stop


def _print_result(result: dict[str, Any] | None) -> int:
    if result is None:
        print("published")
        return 0
    if result["accepted"]:
        print(f"OK {result['task_id'] or ''}".rstrip())
        return 0
    error = result["error"]
    print(error_line(error["code"], error["message"]), file=sys.stderr)
    return EXIT_REFUSED


def _client(settings: Settings, args: argparse.Namespace, issued_by: str = "mvs-cli") -> MvsClient:
    from workers.client import MvsClient

    return MvsClient(settings, issued_by=issued_by, quiet_kafka_logs=not args.verbose)


def _checked(settings: Settings, args: argparse.Namespace) -> Settings:
    """``settings`` bounded by the command's timeout, once the broker answered (else a typed error)."""
    from workers.client import Deadline

    client = _client(settings, args)
    return client.connect(Deadline(args.timeout))


def cmd_topics(settings: Settings, args: argparse.Namespace) -> int:
    from workers.client import client_error
    from workers.kafka.admin import apply_topics
    from workers.kafka.errors import BusError

    checked = _checked(settings, args)
    try:
        report = apply_topics(checked)
    except BusError as exc:
        raise client_error(exc) from exc
    print(report)
    return 0


def cmd_acls(settings: Settings, args: argparse.Namespace) -> int:
    from workers.kafka.acls import AclConfigError, Roles, apply_acls, grants_table, role_grants
    from workers.kafka.errors import BusError

    try:
        roles = Roles(
            coordinators=args.coordinator,
            workers=args.worker,
            ddl_producers=args.ddl_producer,
            operators=args.operator,
        )
    except AclConfigError as exc:
        print(f"ERROR 1001: {exc}", file=sys.stderr)
        return 2
    try:
        grants = apply_acls(settings, roles) if args.action == "apply" else role_grants(settings, roles)
    except BusError as exc:
        print(f"ERROR 3001: {exc}", file=sys.stderr)
        return 1
    print(grants_table(grants))
    return 0


def cmd_sql(settings: Settings, args: argparse.Namespace) -> int:
    client = _client(settings, args)
    try:
        return _print_result(client.execute(args.statement, wait=not args.no_wait, timeout_s=args.timeout))
    finally:
        client.close()


def _status_text(settings: Settings, args: argparse.Namespace) -> str:
    """The tasks table, then the live roles; what cannot be read (a group this principal may not
    describe, an unreadable warehouse) is one note under the tables, not a failure."""
    from workers.client import Deadline, MvsClientError
    from workers.kafka.admin import group_owners
    from workers.kafka.errors import BusError
    from workers.status import members_table, notes_text, status_table
    from workers.warehouse import latest_version

    deadline = Deadline(args.timeout)
    client = _client(settings, args)
    tasks = client.tasks(timeout_s=deadline.remaining())  # the catalog is the one thing status needs
    checked = _checked(settings, args)
    notes: list[str] = []
    owners: list[dict[str, list[int]]] = []
    for role in ("coordinator", "workers"):
        try:
            owners.append(
                group_owners(checked, settings.group(role), strict=True, timeout_s=deadline.remaining())
            )
        except BusError as exc:
            notes.append(f"roles: {exc}")
            owners.append({})

    def version(table: str) -> int | None:
        try:
            return latest_version(settings, table)
        except OSError as exc:
            note = f"lag: cannot read the warehouse: {exc}"
            if note not in notes:
                notes.append(note)
            return None

    loop_errors: dict[str, str | None] = {}
    if owners[1]:
        try:
            loop_errors = client.loop_errors(timeout_s=deadline.remaining())
        except MvsClientError as exc:
            notes.append(f"loop errors: {exc}")
    text = status_table(tasks, version) + "\n\n" + members_table(owners[0], owners[1], tasks, loop_errors)
    return text + notes_text(notes)


def cmd_status(settings: Settings, args: argparse.Namespace) -> int:
    if not args.watch:
        print(_within(args.timeout, lambda: _status_text(settings, args)), flush=True)
        return 0
    while True:
        text = _within(args.timeout, lambda: _status_text(settings, args))
        print("\033[2J\033[H" + time.strftime("%H:%M:%S ") + settings.namespace)
        print(text, flush=True)
        time.sleep(args.watch)


def cmd_history(settings: Settings, args: argparse.Namespace) -> int:
    """Runs, then the DDL log; a part this principal may not read (or a missing topic) is a note."""
    from workers.client import Deadline, NotAuthorized, TopicNotFound
    from workers.status import ddl_table, history_table

    task = args.task
    if task and ":" not in task:
        task = f"mv:{task}"
    client = _client(settings, args)
    deadline = Deadline(args.timeout)
    try:
        print(history_table(client.history(task, limit=args.limit, timeout_s=deadline.remaining())))
    except (NotAuthorized, TopicNotFound) as exc:
        print(f"runs: {exc}")
    print()
    try:
        print(ddl_table(client.ddl_history(task, limit=args.limit, timeout_s=deadline.remaining())))
    except (NotAuthorized, TopicNotFound) as exc:
        print(f"ddl: {exc}")
    return 0


def cmd_tail(settings: Settings, args: argparse.Namespace) -> int:
    from workers.kafka.typed import tail
    from workers.topics import TopicConfigError, topic_spec

    try:
        topic_spec(args.topic)
    except TopicConfigError as exc:
        raise UsageError(str(exc)) from exc
    checked = _within(args.timeout, lambda: _checked(settings, args))
    stop = _stop_event()
    for message in tail(checked, args.topic, from_beginning=args.from_beginning, stop=stop):
        print(
            json.dumps(
                {
                    "partition": message.partition,
                    "offset": message.offset,
                    "key": message.key,
                    "type": message.record_type,
                    "value": message.value,
                },
                default=str,
            ),
            flush=True,
        )
    return 0


def _serve_metrics(args: argparse.Namespace) -> None:
    """``--metrics-port N``: Prometheus metrics of this process on http://0.0.0.0:N/metrics."""
    if args.metrics_port:
        from workers.sched.metrics import serve_metrics

        serve_metrics(args.metrics_port)


def cmd_coordinator(settings: Settings, args: argparse.Namespace) -> int:
    from workers.coordinator.inbox import forward_inboxes_in_background
    from workers.coordinator.service import Coordinator

    _serve_metrics(args)
    forward_inboxes_in_background(settings)  # MVS_DDL_INBOX=1: DDL inboxes → ddl, issued_by = principal
    return Coordinator(settings).run(_stop_event())  # non-zero: fenced or misconfigured


def cmd_worker(settings: Settings, args: argparse.Namespace) -> int:
    from workers.worker.manager import Manager
    from workers.worker.runner import SparkRunner

    _serve_metrics(args)
    runner = SparkRunner(settings)
    if not args.lazy_spark:
        runner.warm()  # before joining the group: a task that fails over here runs without a JVM start
    return Manager(settings, runner=runner, pollers=args.pollers).run(_stop_event())


def cmd_broker(settings: Settings, args: argparse.Namespace) -> int:
    from workers.embedded.broker import main

    return main(["run"])


def cmd_demo(settings: Settings, args: argparse.Namespace) -> int:
    from workers.demo import run_demo

    return run_demo(rounds=args.rounds)


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


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="mvs", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "-v", "--verbose", "--debug", action="store_true", help="librdkafka logs and tracebacks"
    )
    sub = parser.add_subparsers(dest="command", required=True)
    bounded = _timeout_option(DEFAULT_TIMEOUT_S)
    topics = sub.add_parser("topics", help="manage the topics declared in topics/", parents=[bounded])
    topics.add_argument("action", choices=["apply"])
    topics.set_defaults(func=cmd_topics, watchdog=True)
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
    status = sub.add_parser("status", help="list every task", parents=[bounded])
    status.add_argument("--watch", type=float, default=0.0, metavar="SECONDS")
    status.set_defaults(func=cmd_status)  # bounds each snapshot itself
    history = sub.add_parser("history", help="run history", parents=[bounded])
    history.add_argument("task", nargs="?")
    history.add_argument("--limit", type=int, default=30)
    history.set_defaults(func=cmd_history, watchdog=True)
    tail = sub.add_parser("tail", help="print decoded records of a topic", parents=[bounded])
    tail.add_argument("topic", help="logical topic name, e.g. ddl, catalog, runs, dlq")
    tail.add_argument("--from-beginning", action="store_true")
    tail.set_defaults(func=cmd_tail)  # bounds connecting; then follows until Ctrl-C
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
    demo.set_defaults(func=cmd_demo)
    return parser


def _failure(exc: BaseException, settings: Settings | None) -> tuple[int | None, str, int]:
    """(code, message, exit code) of a command that raised ``exc``."""
    from workers.catalog.errors import MvsError
    from workers.client import DdlTimeout, MvsClientError, StatementError
    from workers.kafka.errors import BusError

    if isinstance(exc, StatementError):
        return exc.code, str(exc), EXIT_STATEMENT
    if isinstance(exc, DdlTimeout):
        return exc.code, str(exc), EXIT_UNAVAILABLE
    if isinstance(exc, MvsClientError):
        return exc.code, str(exc), EXIT_UNAVAILABLE
    if isinstance(exc, CommandTimeout):
        where = settings.bootstrap_servers if settings is not None else "the broker"
        return 3001, f"broker unreachable at {where} ({exc})", EXIT_UNAVAILABLE
    if isinstance(exc, BusError):
        return 3001, str(exc), EXIT_UNAVAILABLE
    if isinstance(exc, MvsError):
        return int(exc.code), exc.message, EXIT_REFUSED
    if isinstance(exc, RecursionError):
        return 1001, "input nested too deeply", EXIT_STATEMENT
    if isinstance(exc, (UsageError, ValueError)):
        return 1001, str(exc), EXIT_STATEMENT
    if isinstance(exc, OSError):
        return 2001, f"{type(exc).__name__}: {exc}", EXIT_REFUSED
    return None, f"unexpected {type(exc).__name__}: {exc} (run with --debug for the traceback)", EXIT_REFUSED


def main(argv: list[str] | None = None) -> int:
    """Run one command. Nothing escapes as a traceback (unless -v/--debug): a failure is one line
    on stderr and a non-zero exit code."""
    args = build_parser().parse_args(argv)
    logging.basicConfig(
        level=logging.INFO if args.verbose else logging.WARNING,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    settings: Settings | None = None
    try:
        settings = Settings.from_env()
        configured = settings
        if getattr(args, "watchdog", False):
            return _within(args.timeout, lambda: int(args.func(configured, args)))
        return int(args.func(settings, args))
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except Exception as exc:
        if args.verbose:
            traceback.print_exc()
        code, message, exit_code = _failure(exc, settings)
        print(error_line(code, message), file=sys.stderr, flush=True)
        return exit_code
    finally:
        sys.stdout.flush()


if __name__ == "__main__":
    sys.exit(main())
