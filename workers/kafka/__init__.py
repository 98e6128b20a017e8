"""The Kafka bus (the only package importing confluent_kafka): typed producer/consumer,
dead letters, topic administration, readers for restore and tail."""

from workers.kafka.admin import Drift, TopicsReport, TopicStatus, apply_topics, configure_group, describe
from workers.kafka.consumer import Partitions, RebalanceCallback, TypedConsumer
from workers.kafka.errors import BusError
from workers.kafka.messages import Message, murmur2, partition_for
from workers.kafka.producer import TypedProducer
from workers.kafka.reader import latest_by_key, read_to_end, tail
from workers.kafka.retry import ADMIN_RETRY, METADATA_RETRY, TXN_RETRY, RetryPolicy

__all__ = [
    "ADMIN_RETRY",
    "METADATA_RETRY",
    "TXN_RETRY",
    "BusError",
    "Drift",
    "Message",
    "Partitions",
    "RebalanceCallback",
    "RetryPolicy",
    "TopicStatus",
    "TopicsReport",
    "TypedConsumer",
    "TypedProducer",
    "apply_topics",
    "configure_group",
    "describe",
    "latest_by_key",
    "murmur2",
    "partition_for",
    "read_to_end",
    "tail",
]
