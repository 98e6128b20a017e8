"""`mvs`: publish DDL, run the roles, and inspect the control plane.

mvs topics apply                  create missing topics, report drift
mvs sql "CREATE MATERIALIZED VIEW ..."   publish one DDL event and print the coordinator's answer
mvs status [--watch SECONDS]      every task: kind, state, owner, epoch, last run, watermark, lag, error
mvs history [TASK]                run history
mvs tail TOPIC [--from-beginning] decoded records of any mvs topic
mvs coordinator | mvs worker      run a role until SIGTERM / Ctrl-C
mvs broker                        run the embedded Kafka broker in the foreground
mvs demo                          the live demo (broker, coordinator, two workers, sample data)
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
from typing import Any

from workers.config import Settings


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
    print(f"ERROR {error['code']}: {error['message']}", file=sys.stderr)
    return 1


def cmd_topics(settings: Settings, args: argparse.Namespace) -> int:
    from workers.kafka.admin import apply_topics

    report = apply_topics(settings)
    print(report)
    return 0


def cmd_sql(settings: Settings, args: argparse.Namespace) -> int:
    from workers.client import DdlTimeout, MvsClient
    from workers.ddl.errors import DdlSyntaxError

    client = MvsClient(settings, issued_by="mvs-cli")
    try:
        return _print_result(client.execute(args.statement, wait=not args.no_wait, timeout_s=args.timeout))
    except DdlSyntaxError as exc:
        print(f"ERROR 1001: {exc}", file=sys.stderr)
        return 2
    except DdlTimeout as exc:
        print(f"ERROR: {exc}", file=sys.stderr)
        return 3


def cmd_status(settings: Settings, args: argparse.Namespace) -> int:
    from workers.client import MvsClient
    from workers.kafka.admin import group_owners
    from workers.status import members_table, status_table
    from workers.warehouse import latest_version

    client = MvsClient(settings)
    while True:
        tasks = client.tasks()
        members = members_table(
            group_owners(settings, settings.group("coordinator")),
            group_owners(settings, settings.group("workers")),
            tasks,
        )
        text = status_table(tasks, lambda t: latest_version(settings, t)) + "\n\n" + members
        if args.watch:
            print("\033[2J\033[H" + time.strftime("%H:%M:%S ") + settings.namespace)
        print(text, flush=True)
        if not args.watch:
            return 0
        time.sleep(args.watch)


def cmd_history(settings: Settings, args: argparse.Namespace) -> int:
    from workers.client import MvsClient
    from workers.status import ddl_table, history_table

    task = args.task
    if task and ":" not in task:
        task = f"mv:{task}"
    client = MvsClient(settings)
    print(history_table(client.history(task, limit=args.limit)))
    print()
    print(ddl_table(client.ddl_history(task, limit=args.limit)))
    return 0


def cmd_tail(settings: Settings, args: argparse.Namespace) -> int:
    from workers.kafka.typed import tail

    stop = _stop_event()
    for message in tail(settings, args.topic, from_beginning=args.from_beginning, stop=stop):
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
    from workers.coordinator.service import Coordinator

    _serve_metrics(args)
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


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="mvs", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("-v", "--verbose", action="store_true")
    sub = parser.add_subparsers(dest="command", required=True)
    topics = sub.add_parser("topics", help="manage the topics declared in topics/")
    topics.add_argument("action", choices=["apply"])
    topics.set_defaults(func=cmd_topics)
    sql = sub.add_parser("sql", help="publish one DDL statement")
    sql.add_argument("statement")
    sql.add_argument("--no-wait", action="store_true", help="do not wait for the coordinator's answer")
    sql.add_argument("--timeout", type=float, default=60.0)
    sql.set_defaults(func=cmd_sql)
    status = sub.add_parser("status", help="list every task")
    status.add_argument("--watch", type=float, default=0.0, metavar="SECONDS")
    status.set_defaults(func=cmd_status)
    history = sub.add_parser("history", help="run history")
    history.add_argument("task", nargs="?")
    history.add_argument("--limit", type=int, default=30)
    history.set_defaults(func=cmd_history)
    tail = sub.add_parser("tail", help="print decoded records of a topic")
    tail.add_argument("topic", help="logical topic name, e.g. ddl, catalog, runs, dlq")
    tail.add_argument("--from-beginning", action="store_true")
    tail.set_defaults(func=cmd_tail)
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


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(
        level=logging.INFO if args.verbose else logging.WARNING,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    result: int = args.func(Settings.from_env(), args)
    return result


if __name__ == "__main__":
    sys.exit(main())
