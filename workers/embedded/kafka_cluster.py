"""A replicated Kafka cluster from the same broker jars: N KRaft nodes, each broker and controller.

Every node is an ``EmbeddedKafka`` of its own (its own JVM, ports and data folder), formatted with
one cluster id and one controller quorum, so any minority of nodes can die (kill -9) and the rest
keep a controller and the partition leaders. Kafka's internal topics (consumer offsets,
transactions) are replicated to every node, with ``min.insync.replicas`` one less; mvs's own topics
take the replication of ``topics/`` (``MVS_REPLICATION_FACTOR`` unset).

    python -m workers.embedded.kafka_cluster --nodes 3      # foreground, Ctrl-C stops it
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass, field
from pathlib import Path

from workers.config import CACHE_DIR
from workers.embedded.broker import EmbeddedKafka, free_port
from workers.embedded.processes import run_until_signal


def _listen_ports(count: int) -> list[int]:
    """``count`` distinct free ports (the nodes start together and connect to one another)."""
    ports: list[int] = []
    while len(ports) < count:
        ports.append(free_port(avoid=ports))
    return ports


@dataclass
class KafkaCluster:
    data_dir: Path
    nodes: int = 3
    heap: str = "384m"
    # Node i listens on base_port + 2i (clients) and + 2i + 1 (controller); None = free ports (tests).
    base_port: int | None = None
    brokers: list[EmbeddedKafka] = field(default_factory=list)

    def __post_init__(self) -> None:
        base = self.base_port
        free = _listen_ports(2 * self.nodes) if base is None else []
        ports = [
            (base + 2 * i, base + 2 * i + 1) if base is not None else (free[2 * i], free[2 * i + 1])
            for i in range(self.nodes)
        ]
        voters = ",".join(f"{i + 1}@127.0.0.1:{controller}" for i, (_, controller) in enumerate(ports))
        for i, (port, controller) in enumerate(ports):
            node = EmbeddedKafka(
                self.data_dir / f"node{i + 1}",
                port=port,
                controller_port=controller,
                heap=self.heap,
                node_id=i + 1,
                voters=voters,
                internal_replication=self.nodes,
            )
            self.brokers.append(node)

    @property
    def bootstrap_servers(self) -> str:
        return ",".join(broker.bootstrap_servers for broker in self.brokers)

    def start(self, timeout_s: float = 120.0) -> KafkaCluster:
        cluster_id = self.brokers[0].new_cluster_id()  # used only by nodes not formatted yet
        for broker in self.brokers:
            broker.cluster_id = cluster_id
            broker.launch()
        for broker in self.brokers:
            broker.wait_started(timeout_s)
        return self

    def stop(self) -> None:
        """Stop the nodes one by one, each with a controlled shutdown while a majority of the controller
        quorum is still up to grant it. The nodes after that are killed: their controlled shutdown can
        never be granted (measured: the last node waited the full 30 s before the SIGKILL)."""
        majority = self.nodes // 2 + 1
        for stopped, broker in enumerate(self.brokers):
            if self.nodes - stopped >= majority:
                broker.stop()
            else:
                broker.kill()

    def __enter__(self) -> KafkaCluster:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m workers.embedded.kafka_cluster")
    parser.add_argument("--nodes", type=int, default=3)
    parser.add_argument("--data-dir", type=Path, default=CACHE_DIR / "kafka-cluster")
    parser.add_argument("--port", type=int, default=29092, help="node i: port + 2i, controller port + 2i + 1")
    args = parser.parse_args(argv)
    with KafkaCluster(args.data_dir, nodes=args.nodes, base_port=args.port) as cluster:
        print(f"kafka cluster of {args.nodes} serving on {cluster.bootstrap_servers}", flush=True)
        run_until_signal(lambda: True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
