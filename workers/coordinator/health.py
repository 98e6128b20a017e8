"""The coordinator's own heartbeat (issue 32): whether it is active or standing by, and the last error
its loop survived, on the heartbeat topic beside the workers' (key = its name, no statuses), so
`mvs status`, the REST API and the status page show a coordinator's health where they show a
worker's. Active and standby coordinators alike send one every HEALTH_EVERY_S, and at once when
either changes. The active coordinator skips these records when it folds the workers' heartbeats.
"""

from __future__ import annotations

import logging

from workers.bus import Bus, BusProducer
from workers.kafka.typed import BusError
from workers.records import Record
from workers.sched.clock import Clock

log = logging.getLogger(__name__)
HEALTH_EVERY_S = 5.0


def coordinator_heartbeat(
    name: str, *, now_ms: int, active: bool, coordinator_epoch: int, loop_error: str | None
) -> Record:
    """A Heartbeat a coordinator sends about itself."""
    return {
        "worker_id": name,
        "sent_at": now_ms,
        "coordinator_epoch": coordinator_epoch,
        "full": True,
        "statuses": [],
        "removed": [],
        "loop_error": loop_error,
        "coordinator_active": active,
    }


def is_coordinator_heartbeat(heartbeat: Record) -> bool:
    return heartbeat.get("coordinator_active") is not None


class HealthReporter:
    """Sends the coordinator's heartbeat when due; never raises (a refused send is tried next time)."""

    def __init__(self, name: str, bus: Bus, clock: Clock) -> None:
        self.name = name
        self.bus = bus
        self.clock = clock
        self._producer: BusProducer | None = None
        self._last_sent = float("-inf")
        self._last_said: tuple[bool, str | None] | None = None

    def report(self, *, active: bool, coordinator_epoch: int, loop_error: str | None) -> None:
        said = (active, loop_error)
        now = self.clock.monotonic()
        if said == self._last_said and now - self._last_sent < HEALTH_EVERY_S:
            return
        record = coordinator_heartbeat(
            self.name,
            now_ms=self.clock.wall_ms(),
            active=active,
            coordinator_epoch=coordinator_epoch if active else 0,
            loop_error=loop_error,
        )
        try:
            if self._producer is None:
                self._producer = self.bus.producer()
            self._producer.send("coordinator", self.name, record)
            self._producer.poll(0)
        except BusError as exc:
            log.info("coordinator %s: health not sent (tried again): %s", self.name, exc)
            if exc.fatal:
                self._producer = None  # librdkafka gave up on it: a new one next time
            return
        self._last_sent, self._last_said = now, said

    def close(self) -> None:
        if self._producer is not None:
            self._producer.close(timeout_s=1.0)
