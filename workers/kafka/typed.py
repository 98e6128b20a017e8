"""The typed layer role code uses: records in and out as dicts, never bytes."""

from workers.kafka.consumer import Partitions, RebalanceCallback, TypedConsumer
from workers.kafka.errors import BusError
from workers.kafka.messages import Message, partition_for
from workers.kafka.producer import TypedProducer
from workers.kafka.reader import latest_by_key, read_to_end, tail

__all__ = [
    "BusError",
    "Message",
    "Partitions",
    "RebalanceCallback",
    "TypedConsumer",
    "TypedProducer",
    "latest_by_key",
    "partition_for",
    "read_to_end",
    "tail",
]
