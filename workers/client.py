"""The Python client: publish DDL events and read the control plane back.

    from workers.client import MvsClient
    client = MvsClient(Settings.from_env())
    result = client.execute("CREATE MATERIALIZED VIEW v REFRESH COMPLETE EVERY 30 SECONDS AS SELECT ...")
    client.tasks()      # the catalog
    client.history("mv:v")

The CLI (`mvs`) is a thin shell over this class. Any Kafka producer that writes the DdlEvent
Avro schema to the DDL topic does the same as ``publish``.
"""

from __future__ import annotations

import time
from typing import Any

from workers.catalog.store import restore_catalog
from workers.config import Settings
from workers.ddl.parser import parse_statement
from workers.kafka.typed import TypedConsumer, TypedProducer, read_to_end
from workers.topics import ddl_topic

Record = dict[str, Any]


class DdlTimeout(TimeoutError):
    pass


class MvsClient:
    def __init__(self, settings: Settings, *, issued_by: str = "mvs-client") -> None:
        self.settings = settings
        self.issued_by = issued_by
        self._producer: TypedProducer | None = None

    @property
    def producer(self) -> TypedProducer:
        if self._producer is None:
            self._producer = TypedProducer(self.settings)
        return self._producer

    def publish(self, event: Record) -> str:
        """Publish one DdlEvent; returns its event id. With ``MVS_DDL_INBOX=1`` it goes to this
        principal's inbox, and the coordinator sets ``issued_by`` (README "Security")."""
        self.producer.send(ddl_topic(self.settings), event["name"], event)
        self.producer.flush()
        return str(event["event_id"])

    def execute(self, sql: str, *, wait: bool = True, timeout_s: float = 60.0) -> Record | None:
        """Parse and publish one DDL statement; with ``wait``, return the coordinator's DdlResult."""
        event = parse_statement(sql, issued_by=self.issued_by)
        if not wait:
            self.publish(event)
            return None
        # Subscribe to the results before publishing, so the answer cannot slip past us.
        results = TypedConsumer(self.settings, group_id=None)
        try:
            results.assign("ddl.results", [0], from_beginning=False)
            results.poll(0)
            event_id = self.publish(event)
            deadline = time.monotonic() + timeout_s
            while time.monotonic() < deadline:
                message = results.poll(0.2)
                if (
                    message is not None
                    and message.value is not None
                    and message.value["event_id"] == event_id
                ):
                    return message.value
        finally:
            results.close()
        raise DdlTimeout(
            f"no answer from a coordinator within {timeout_s:.0f}s (is `mvs coordinator` running?)"
        )

    def tasks(self) -> dict[str, Record]:
        return restore_catalog(self.settings)

    def history(self, task_id: str | None = None, limit: int = 50) -> list[Record]:
        """Run records, newest last; the latest record per run id wins (RUNNING → COMPLETED)."""
        runs: dict[str, Record] = {}
        for message in read_to_end(self.settings, "runs"):
            record = message.value
            if record is not None and (task_id is None or record["task_id"] == task_id):
                runs[record["run_id"]] = record
        ordered = sorted(runs.values(), key=lambda r: (r["started_at"], r["ended_at"] or 0))
        return ordered[-limit:]

    def ddl_history(self, task_id: str | None = None, limit: int = 50) -> list[Record]:
        """Every DDL event with the coordinator's answer: the task's lifecycle, refusals included."""
        answers = {m.value["event_id"]: m.value for m in read_to_end(self.settings, "ddl.results") if m.value}
        entries = []
        for message in read_to_end(self.settings, "ddl"):
            event = message.value
            answer = answers.get(event["event_id"]) if event else None
            if event is None or (task_id is not None and (answer or {}).get("task_id") != task_id):
                continue
            entries.append(
                {
                    "at": event["issued_at"],
                    "action": event["action"],
                    "name": event["name"],
                    "sql": event["sql"],
                    "issued_by": event["issued_by"],
                    "answer": answer,
                }
            )
        return entries[-limit:]

    def close(self) -> None:
        if self._producer is not None:
            self._producer.flush()
            self._producer.close()
            self._producer = None
