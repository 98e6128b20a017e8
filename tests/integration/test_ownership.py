"""Two workers in one consumer group: every task is owned by exactly one of them."""

from __future__ import annotations

from typing import Any

from tests.integration.cluster import Cluster, wait_until
from workers.config import Settings
from workers.jobs.tables import create_table
from workers.kafka.typed import partition_for
from workers.topics import topic_spec


def test_two_workers_each_task_owned_by_exactly_one(spark: Any, settings: Settings) -> None:
    create_table(spark, settings, "sales", [{"id": 1, "amount": 5}], "id BIGINT, amount BIGINT")
    cluster = Cluster(settings, workers=2)
    try:
        names = [f"mv_{i}" for i in range(8)]
        for name in names:
            sql = f"CREATE MATERIALIZED VIEW {name} REFRESH COMPLETE ON DEMAND AS SELECT id FROM sales"
            assert cluster.sql(sql)["accepted"]
        task_ids = {f"mv:{n}" for n in names}

        def owners() -> dict[str, str] | None:
            tasks = cluster.client.tasks()
            found = {t: tasks[t]["owner"] for t in task_ids if t in tasks and tasks[t]["last_run"]}
            return found if len(found) == len(task_ids) else None

        reported = wait_until(owners, what="every task refreshed and reported")
        owned = [set(m.owned) for m in cluster.managers]
        assert owned[0].isdisjoint(owned[1])
        assert owned[0] | owned[1] == task_ids
        assert all(owned), "with 12 partitions and 2 members both must own something"
        for index, manager in enumerate(cluster.managers):
            for task_id in owned[index]:
                assert reported[task_id] == f"worker-{index}"
                partition = partition_for(task_id, topic_spec("manager").partitions)
                assert manager.partition_of[task_id] == partition
    finally:
        cluster.close()
