"""A poison DDL record against a real broker: the coordinator's handler raises on it (injected, as a
bug would), the record goes to the dlq with the reason, the sender gets an error answer, and the
offset moves past it — the next DDL is applied, and a coordinator taking over later does not trip on
it again. No workers and no Spark: only the coordinator's loop and the bus."""

from __future__ import annotations

import threading
from collections.abc import Mapping

from tests.support.cluster import wait_until
from workers.client import MvsClient
from workers.config import Settings
from workers.coordinator.handlers import Context, Effects, handle_ddl
from workers.coordinator.service import Coordinator
from workers.kafka.admin import apply_topics
from workers.kafka.typed import read_to_end
from workers.records import Record

QUERY = "SELECT id, amount FROM sales"


def poisoned(event: Record, tasks: Mapping[str, Record], ctx: Context) -> Effects:
    if event.get("name") == "poison":
        raise RuntimeError("injected handler bug")
    return handle_ddl(event, tasks, ctx)


def only_sales_exists(name: str) -> bool:
    """The warehouse has the one base table the query reads (an MV may not be named like a table)."""
    return name == "sales"


class Running:
    """A coordinator's real loop (``LoopRole.run``) in a thread."""

    def __init__(self, coordinator: Coordinator) -> None:
        self.coordinator = coordinator
        self.stop = threading.Event()
        self.code: list[int] = []
        self.thread = threading.Thread(
            target=lambda: self.code.append(coordinator.run(self.stop)), daemon=True
        )
        self.thread.start()

    def close(self) -> int:
        self.stop.set()
        self.thread.join(60)
        assert not self.thread.is_alive()
        return self.code[0]


def test_a_poison_ddl_is_dead_lettered_answered_and_passed(settings: Settings) -> None:
    apply_topics(settings)
    client = MvsClient(settings, issued_by="test-poison")
    first = Running(Coordinator(settings, table_exists_fn=only_sales_exists, ddl_handler=poisoned))
    try:
        result = client.execute(f"CREATE MATERIALIZED VIEW poison REFRESH COMPLETE ON DEMAND AS {QUERY}")
        assert result is not None and not result["accepted"]
        assert result["error"]["code"] == 1001
        assert "injected handler bug" in result["error"]["message"]
        fine = client.execute(f"CREATE MATERIALIZED VIEW fine REFRESH COMPLETE ON DEMAND AS {QUERY}")
        assert fine is not None and fine["accepted"], fine
        (dead,) = wait_until(lambda: read_to_end(settings, "dlq"), what="the dead letter")
        assert dead.header("mvs.source.topic") == settings.topic("ddl")
        assert dead.header("mvs.error") == "RuntimeError: injected handler bug"
        assert first.coordinator.last_error is None, "the loop itself never failed"
    finally:
        assert first.close() == 0
    # A coordinator taking over goes on from the committed offset: the poison record is behind it.
    second = Running(Coordinator(settings, table_exists_fn=only_sales_exists, ddl_handler=poisoned))
    try:
        after = client.execute(f"CREATE MATERIALIZED VIEW after REFRESH COMPLETE ON DEMAND AS {QUERY}")
        assert after is not None and after["accepted"], after
        assert set(client.tasks()) == {"mv:fine", "mv:after"}
        assert len(read_to_end(settings, "dlq")) == 1, "nobody dead-lettered it twice"
    finally:
        assert second.close() == 0
        client.close()
