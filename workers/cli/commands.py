"""What each `mvs` command does; `workers.cli` parses the command line and calls these.

Kafka, Spark and the roles are imported inside each command, so a command loads only what it uses.
"""

from __future__ import annotations

import argparse
import faulthandler
import json
import signal
import sys
import threading
import time
from typing import TYPE_CHECKING, Any

from workers.catalog.errors import ErrorCode
from workers.config import Settings
from workers.failures import EXIT_REFUSED, EXIT_STATEMENT, UsageError, error_line, within

if TYPE_CHECKING:
    from workers.client import MvsClient


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
        print(error_line(ErrorCode.INVALID_CONFIG, str(exc)), file=sys.stderr)
        return EXIT_STATEMENT
    try:
        grants = apply_acls(settings, roles) if args.action == "apply" else role_grants(settings, roles)
    except BusError as exc:
        print(error_line(ErrorCode.BUS_UNAVAILABLE, str(exc)), file=sys.stderr)
        return EXIT_REFUSED
    print(grants_table(grants))
    return 0


def cmd_sql(settings: Settings, args: argparse.Namespace) -> int:
    client = _client(settings, args)
    try:
        return _print_result(client.execute(args.statement, wait=not args.no_wait, timeout_s=args.timeout))
    finally:
        client.close()


def cmd_explain(settings: Settings, args: argparse.Namespace) -> int:
    """EXPLAIN a CREATE MATERIALIZED VIEW (``workers.explain``); exit 1 when it would be refused."""
    from workers.explain import explain, explain_text

    answer = explain(settings, args.statement)
    print(json.dumps(answer) if args.output == "json" else explain_text(answer))
    return 0 if answer["accepted"] else 1


def _status_output(settings: Settings, args: argparse.Namespace) -> str:
    """The tasks table, then the live roles; what cannot be read (a group this principal may not
    describe, an unreadable warehouse) is one note under the tables, not a failure. With
    ``--output json``: one JSON document (``workers.views.status_json``)."""
    from workers.status import members_table, notes_text, status_table

    snapshot = _client(settings, args).status_snapshot(timeout_s=args.timeout)
    if args.output == "json":
        from workers.views import status_json

        return json.dumps(status_json(snapshot, settings.namespace))
    tables = status_table(snapshot.tasks, snapshot.latest_version) + "\n\n"
    tables += members_table(
        snapshot.coordinators, snapshot.workers, snapshot.tasks, snapshot.loop_errors, snapshot.ddl_lag
    )
    return tables + notes_text(snapshot.notes)


def cmd_status(settings: Settings, args: argparse.Namespace) -> int:
    if not args.watch:
        print(within(args.timeout, lambda: _status_output(settings, args)), flush=True)
        return 0
    while True:
        text = within(args.timeout, lambda: _status_output(settings, args))
        if args.output != "json":  # JSON: one document per line, for a script to follow
            print("\033[2J\033[H" + time.strftime("%H:%M:%S ") + settings.namespace)
        print(text, flush=True)
        time.sleep(args.watch)


def cmd_history(settings: Settings, args: argparse.Namespace) -> int:
    """Runs, then the DDL log; a part this principal may not read (or a missing topic) is a note."""
    from workers.client import task_id_of
    from workers.status import ddl_table, history_table

    task = task_id_of(args.task) if args.task else None
    snapshot = _client(settings, args).history_snapshot(task, args.limit, timeout_s=args.timeout)
    if args.output == "json":
        from workers.views import history_json

        print(json.dumps(history_json(snapshot)))
        return 0
    print(history_table(snapshot.runs) if snapshot.runs is not None else snapshot.runs_note)
    print()
    print(ddl_table(snapshot.ddl) if snapshot.ddl is not None else snapshot.ddl_note)
    return 0


def cmd_tail(settings: Settings, args: argparse.Namespace) -> int:
    from workers.kafka.typed import tail
    from workers.topics import TopicConfigError, topic_spec

    try:
        topic_spec(args.topic)
    except TopicConfigError as exc:
        raise UsageError(str(exc)) from exc
    checked = within(args.timeout, lambda: _checked(settings, args))
    stop = _stop_event()
    for message in tail(checked, args.topic, from_beginning=args.from_beginning, stop=stop):
        if args.output == "json":
            from workers.views import tail_json

            print(json.dumps(tail_json(message)), flush=True)
            continue
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


def cmd_serve(settings: Settings, args: argparse.Namespace) -> int:
    from workers.api.server import serve

    port = settings.api_port if args.port is None else args.port
    return serve(settings, host=args.host or settings.api_host, port=port)


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
    from workers.worker.history_sink import HISTORY_SINK_STOP_S, start_history_sink
    from workers.worker.manager import Manager
    from workers.worker.runner import SparkRunner

    _serve_metrics(args)
    runner = SparkRunner(settings)
    if not args.lazy_spark:
        runner.warm()  # before joining the group: a task that fails over here runs without a JVM start
    stop = _stop_event()
    sink = start_history_sink(settings, stop)  # runs and tasks as Delta tables (MVS_HISTORY_TABLES=0: off)
    code = Manager(settings, runner=runner, pollers=args.pollers).run(stop)
    if sink is not None:
        stop.set()
        sink.join(HISTORY_SINK_STOP_S)
    return code


def cmd_broker(settings: Settings, args: argparse.Namespace) -> int:
    from workers.embedded.broker import main

    return main(["run"])


def cmd_demo(settings: Settings, args: argparse.Namespace) -> int:
    from workers.demo import run_demo

    return run_demo(
        rounds=args.rounds,
        registry=args.registry or args.all,
        status_page=args.status_page or args.all,
        object_store=args.object_store or args.all,
    )
