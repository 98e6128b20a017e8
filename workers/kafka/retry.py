"""Named retry policies for Kafka calls that may fail while the cluster is briefly away.

They are ``workers.retry.RetryPolicy`` values (one retry concept, tenacity only
there): no jitter, retry only what ``is_transient`` says the cluster may answer
differently in a moment. ``policy.with_sleep(...)`` injects the sleep so tests do not wait.
"""

from __future__ import annotations

import logging

from workers.kafka.errors import is_transient
from workers.retry import RetryPolicy

__all__ = ["ADMIN_RETRY", "METADATA_RETRY", "TXN_RETRY", "WATERMARK_RETRY", "RetryPolicy", "kafka_policy"]


def kafka_policy(
    name: str, *, attempts: int, initial_s: float, max_s: float, log_level: int = logging.WARNING
) -> RetryPolicy:
    """``initial_s``, doubling, capped at ``max_s``, ``attempts`` calls in all, transient errors only."""
    return RetryPolicy(
        name,
        base_s=initial_s,
        factor=2.0,
        cap_s=max_s,
        jitter_s=0.0,
        max_attempts=attempts,
        retry_on=is_transient,
        log_level=log_level,
    )


# Topic creation / config reads: the controller may be electing or loading.
ADMIN_RETRY = kafka_policy("kafka.admin", attempts=8, initial_s=0.2, max_s=5.0)
# Waiting for metadata (a new topic's leaders, a partition count): short, frequent checks.
METADATA_RETRY = kafka_policy(
    "kafka.metadata", attempts=60, initial_s=0.05, max_s=0.5, log_level=logging.DEBUG
)
# End-offset queries, each attempt short (``consumer.WATERMARK_ATTEMPT_S``): ~1 min in all, well above
# the time a cluster takes to replace a dead partition leader (broker.session.timeout.ms, 9 s by default).
WATERMARK_RETRY = kafka_policy("kafka.watermarks", attempts=30, initial_s=0.1, max_s=1.0)
# Transaction commit/abort calls librdkafka flags retriable.
TXN_RETRY = kafka_policy("kafka.transaction", attempts=5, initial_s=0.1, max_s=2.0)
