"""Codec throughput: records/s per core through the typed bus, beside raw confluent-kafka bytes.

Two record shapes: a small command (``MaintainerCommand``, topic ``maintainer``, ~60 bytes) and a
large heartbeat (``Heartbeat`` with 60 maintainer statuses, topic ``coordinator``, ~4 KB).

- encode / decode: the codec alone, no Kafka.
- encode+produce: ``TypedProducer.send`` for every record, then ``flush`` (acks=all, idempotent).
- raw produce: the same payload bytes (encoded beforehand) with librdkafka's ``produce`` and the
  same producer configuration: what a Kafka client gives without the codec.
- consume+decode: ``TypedConsumer.poll`` until every record of the topic was handed out.
- raw consume: librdkafka's ``poll`` for the same records, bytes left undecoded.

Per core = records / process CPU seconds (``time.process_time``: every thread of this process,
librdkafka's included), so the figure does not depend on how busy the machine's other cores are.
Runs on its own embedded broker (or ``MVS_BOOTSTRAP_SERVERS``).

    .venv/bin/python -m bench.codec_throughput [--small 200000] [--large 3000]
"""

from __future__ import annotations

import argparse
import os
import shutil
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.common import report
from workers.codec import Record, get_codec
from workers.config import Settings
from workers.embedded.broker import one_broker_settings
from workers.kafka.admin import apply_topics
from workers.kafka.clients import lazy_consumer, lazy_producer
from workers.kafka.typed import TypedConsumer, TypedProducer

GOAL_SMALL_PER_CORE = 50_000  # encode+produce, small records / s / core
STATUSES = 60
T0 = 1_767_225_600_000


@dataclass(frozen=True)
class Shape:
    label: str
    record_type: str
    topic: str
    records: list[tuple[str, Record]]  # (key, record)


@dataclass(frozen=True)
class Figure:
    records: int
    cpu_s: float
    wall_s: float

    @property
    def per_core(self) -> float:
        return self.records / self.cpu_s if self.cpu_s > 0 else float("inf")

    @property
    def per_s(self) -> float:
        return self.records / self.wall_s if self.wall_s > 0 else float("inf")


def timed(records: int, work: Callable[[], object]) -> Figure:
    cpu, wall = time.process_time(), time.perf_counter()
    work()
    return Figure(records, time.process_time() - cpu, time.perf_counter() - wall)


def command(i: int) -> Record:
    return {
        "command_id": f"cmd-{i}",
        "coordinator_epoch": 7,
        "kind": "REFRESH_NOW",
        "task_id": f"mv:view{i % 1000}",
        "epoch": 1 + i % 5,
        "safepoint": None,
    }


def heartbeat(i: int) -> Record:
    statuses = [
        {
            "task_id": f"mv:view{j}",
            "epoch": 3,
            "state": "NORMAL",
            "checkpoint": {"sales": 17 + i, "regions": 2},
            "last_run": {
                "run_id": f"run-{i}-{j}",
                "trigger": "schedule",
                "state": "COMPLETED",
                "started_at": T0,
                "ended_at": T0 + 1500,
                "rows_written": 42,
                "message": None,
            },
            "next_run_at": T0 + 60_000,
            "error": None,
        }
        for j in range(STATUSES)
    ]
    return {
        "worker_id": "host-1234-abcdef",
        "sent_at": T0 + i,
        "coordinator_epoch": 7,
        "full": True,
        "statuses": statuses,
        "removed": [],
        "loop_error": None,
    }


def shapes(small: int, large: int) -> list[Shape]:
    return [
        Shape(
            "small (MaintainerCommand)",
            "MaintainerCommand",
            "maintainer",
            [(command(i)["task_id"], command(i)) for i in range(small)],
        ),
        Shape(
            f"large (Heartbeat, {STATUSES} statuses)",
            "Heartbeat",
            "coordinator",
            [("host-1234-abcdef", heartbeat(i)) for i in range(large)],
        ),
    ]


def typed_produce(settings: Settings, shape: Shape) -> None:
    with TypedProducer(settings) as producer:
        for key, record in shape.records:
            producer.send(shape.topic, key, record)
        producer.flush()


def raw_produce(settings: Settings, topic: str, payloads: Sequence[tuple[bytes, bytes]]) -> None:
    producer = lazy_producer(settings).get()
    physical = settings.topic(topic)
    for key, value in payloads:
        while True:
            try:
                producer.produce(physical, value=value, key=key)
                break
            except BufferError:  # local queue full: serve deliveries, then try again
                producer.poll(0.05)
    producer.flush(60)


def drain(poll: Callable[[float], bool], topic: str, count: int) -> Figure:
    """Wait for the first record (joining the group is not what is measured), then time the rest.
    ``poll`` says whether a record came within the timeout."""
    if not poll(60.0):
        raise RuntimeError(f"nothing on {topic} within 60 s")

    def rest() -> None:
        got = 1
        while got < count:
            if poll(5.0):
                got += 1
            else:
                raise RuntimeError(f"{topic}: stalled after {got} of {count} records")

    return timed(count - 1, rest)


def typed_consume(settings: Settings, topic: str, count: int) -> Figure:
    with TypedConsumer(settings, group_id=f"{settings.namespace}.bench.{uuid.uuid4().hex}") as consumer:
        consumer.subscribe([topic])
        return drain(lambda timeout_s: consumer.poll(timeout_s) is not None, topic, count)


def raw_consume(settings: Settings, topic: str, count: int) -> Figure:
    consumer = lazy_consumer(settings, f"{settings.namespace}.bench.{uuid.uuid4().hex}").get()
    consumer.subscribe([settings.topic(topic)])

    def poll(timeout_s: float) -> bool:
        message = consumer.poll(timeout_s)
        return message is not None and message.error() is None

    try:
        return drain(poll, topic, count)
    finally:
        consumer.close()


@contextmanager
def broker() -> Iterator[str]:
    external = os.environ.get("MVS_BOOTSTRAP_SERVERS")
    if external:
        yield external
        return
    from workers.embedded.broker import EmbeddedKafka, free_port

    root = Path(tempfile.mkdtemp(prefix="mvs-codec-bench-"))
    kafka = EmbeddedKafka(root / "kafka", port=free_port(), controller_port=free_port()).start()
    try:
        yield kafka.bootstrap_servers
    finally:
        kafka.stop()
        shutil.rmtree(root, ignore_errors=True)


def measure(settings: Settings, shape: Shape) -> dict[str, Figure]:
    codec = get_codec()
    n = len(shape.records)
    payloads: list[bytes] = []

    def encode_all() -> None:
        payloads.extend(codec.encode(shape.record_type, record) for _, record in shape.records)

    figures = {"encode": timed(n, encode_all)}
    figures["decode"] = timed(n, lambda: [codec.decode(p) for p in payloads])
    keyed = [(key.encode(), value) for (key, _), value in zip(shape.records, payloads, strict=True)]
    figures["encode+produce"] = timed(n, lambda: typed_produce(settings, shape))
    figures["raw produce"] = timed(n, lambda: raw_produce(settings, shape.topic, keyed))
    # Both halves of the topic (typed and raw) hold the same bytes: each consumer reads all of it.
    figures["consume+decode"] = typed_consume(settings, shape.topic, 2 * n)
    figures["raw consume"] = raw_consume(settings, shape.topic, 2 * n)
    return figures


ROWS = ("encode", "decode", "encode+produce", "raw produce", "consume+decode", "raw consume")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.codec_throughput", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--small", type=int, default=200_000, help="small records per run")
    parser.add_argument("--large", type=int, default=3_000, help="large records per run")
    args = parser.parse_args(argv)
    results: dict[str, dict[str, Figure]] = {}
    sizes: dict[str, int] = {}
    with broker() as bootstrap:
        settings = one_broker_settings(bootstrap, "b", Path(tempfile.gettempdir()))  # no table is written
        apply_topics(settings)
        for shape in shapes(args.small, args.large):
            sizes[shape.label] = len(get_codec().encode(shape.record_type, shape.records[0][1]))
            results[shape.label] = measure(settings, shape)
    rows: list[list[object]] = []
    figures: dict[str, Any] = {"bench": "codec_throughput", "goal_small_per_core": GOAL_SMALL_PER_CORE}
    for label, by_step in results.items():
        for step in ROWS:
            f = by_step[step]
            rows.append(
                [
                    label,
                    sizes[label],
                    step,
                    f.records,
                    f"{f.per_core:,.0f}",
                    f"{f.per_s:,.0f}",
                    f"{f.cpu_s:.2f}",
                ]
            )
            figures[f"{label.split()[0]}.{step}.per_core"] = round(f.per_core)
    small = results[next(iter(results))]["encode+produce"].per_core
    figures["meets_goal"] = small >= GOAL_SMALL_PER_CORE
    report(
        "codec throughput: typed bus vs raw confluent-kafka bytes (per core = records / process CPU s)",
        ["records", "bytes", "step", "n", "per core/s", "per wall s", "CPU s"],
        rows,
        figures,
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
