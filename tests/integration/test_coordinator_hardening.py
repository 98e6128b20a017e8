"""Issue 8, classes 2, 3 and 7 through the real coordinator, broker, worker, Spark and Delta: DDL from
any producer gets an answer and the coordinator keeps going; an MV never takes a base table's name;
a refused CREATE leaves nothing behind."""

from __future__ import annotations

import uuid
from typing import Any

from tests.integration.cluster import Cluster, wait_until
from tests.integration.sales import BY_REGION, caught_up, mv_rows, query_rows
from workers.demo_tables import create_table, read_table
from workers.kafka.typed import TypedProducer, read_to_end
from workers.records import Record
from workers.warehouse import latest_version


def raw_create(name: str) -> Record:
    """A CREATE_MV as a producer other than `mvs sql` may write it: valid Avro, unchecked name."""
    return {
        "schema_version": 1,
        "event_id": uuid.uuid4().hex,
        "issued_at": 0,
        "issued_by": "raw-producer",
        "action": "CREATE_MV",
        "name": name,
        "mv": {
            "query": "SELECT id FROM sales",
            "refresh_mode": "COMPLETE",
            "trigger": {"kind": "EVERY", "interval_ms": 1000},
            "base_tables": [],
        },
        "mv_log": None,
        "sql": None,
    }


def answer(cluster: Cluster, event_id: str) -> Record:
    def found() -> Record | None:
        results = read_to_end(cluster.settings, "ddl.results")
        return next((m.value for m in results if m.value and m.value["event_id"] == event_id), None)

    return wait_until(found, what=f"the answer to DDL event {event_id}")


def test_raw_events_with_bad_names_are_refused_and_the_next_ddl_applies(cluster: Cluster, spark: Any) -> None:
    producer = TypedProducer(cluster.settings)
    events = [raw_create("../escape"), raw_create("x" * 10_000), raw_create("a/b")]
    for event in events:
        producer.send("ddl", event["name"], event)
    producer.flush()
    producer.close()
    for event, why in zip(
        events, ("invalid materialized view name", "the limit is 128", "invalid"), strict=True
    ):
        refused = answer(cluster, event["event_id"])
        assert not refused["accepted"] and refused["error"]["code"] == 1001
        assert why in refused["error"]["message"]
    # The coordinator kept going: the next DDL is applied and its MV refreshes.
    assert cluster.sql(f"CREATE MATERIALIZED VIEW by_region REFRESH COMPLETE EVERY 1 SECONDS AS {BY_REGION}")[
        "accepted"
    ]
    wait_until(lambda: caught_up(cluster, "mv:by_region"), what="by_region refreshed")
    assert mv_rows(spark, cluster.settings, "by_region") == query_rows(spark, cluster.settings, BY_REGION)
    assert set(cluster.client.tasks()) == {"mv:by_region"}  # nothing of the refused events in the catalog


def test_an_mv_named_like_a_base_table_is_refused_and_the_table_is_untouched(
    cluster: Cluster, spark: Any
) -> None:
    create_table(spark, cluster.settings, "other", [{"id": 1}], "id BIGINT")
    before = sorted(tuple(r.values()) for r in read_table(spark, cluster.settings, "sales"))
    version = latest_version(cluster.settings, "sales")
    # The grammar accepts the statement (it reads another table); only the coordinator knows sales exists.
    refused = cluster.sql(
        "CREATE MATERIALIZED VIEW sales REFRESH COMPLETE EVERY 1 SECONDS AS SELECT id FROM other"
    )
    assert not refused["accepted"] and refused["error"]["code"] == 1001
    assert "a table named sales already exists" in refused["error"]["message"]
    assert cluster.task("mv:sales") is None
    # A later MV refreshes (the worker had every chance to run a refresh of "sales"): sales is unchanged.
    assert cluster.sql("CREATE MATERIALIZED VIEW probe REFRESH COMPLETE ON DEMAND AS SELECT id FROM sales")[
        "accepted"
    ]
    wait_until(lambda: caught_up(cluster, "mv:probe"), what="a later MV refreshed")
    assert latest_version(cluster.settings, "sales") == version
    assert sorted(tuple(r.values()) for r in read_table(spark, cluster.settings, "sales")) == before


def test_a_refused_create_leaves_nothing_and_a_valid_create_of_the_name_succeeds(cluster: Cluster) -> None:
    refused = cluster.sql(
        "CREATE MATERIALIZED VIEW v REFRESH COMPLETE EVERY 1 SECONDS AS SELECT * FROM nowhere"
    )
    assert not refused["accepted"] and "nowhere" in refused["error"]["message"]
    assert cluster.task("mv:v") is None
    history = cluster.client.ddl_history("mv:v")
    assert [(e["action"], e["answer"]["accepted"]) for e in history] == [("CREATE_MV", False)]
    created = cluster.sql(f"CREATE MATERIALIZED VIEW v REFRESH COMPLETE EVERY 1 SECONDS AS {BY_REGION}")
    assert created["accepted"], created
    wait_until(lambda: caught_up(cluster, "mv:v"), what="v refreshed")
    task = cluster.task("mv:v")
    assert task is not None and task["state"] == "NORMAL" and task["created_by"] == "tests"


def test_an_mv_failed_by_its_base_comes_back_with_resume(cluster: Cluster, spark: Any) -> None:
    settings = cluster.settings
    create_table(spark, settings, "items", [{"id": 1, "qty": 2}], "id BIGINT, qty BIGINT")  # v0
    query = "SELECT id, qty FROM items"
    assert cluster.sql(f"CREATE MATERIALIZED VIEW item_qty REFRESH COMPLETE EVERY 1 SECONDS AS {query}")[
        "accepted"
    ]

    def reflects(version: int) -> bool:
        task = cluster.task("mv:item_qty")
        return bool(task and task["state"] == "NORMAL" and task["checkpoint"].get("items") == version)

    wait_until(lambda: reflects(0), what="item_qty built")
    # The base is re-created without the column the view reads: a permanent error, the task FAILED.
    create_table(spark, settings, "items", [{"id": 1}], "id BIGINT")  # v1
    failed = wait_until(
        lambda: (t := cluster.task("mv:item_qty")) and t["state"] == "FAILED" and t, what="item_qty FAILED"
    )
    assert failed["error"]["code"] == 1001
    # The base comes back with its column; RESUME brings the view back under a new epoch.
    create_table(
        spark, settings, "items", [{"id": 1, "qty": 2}, {"id": 2, "qty": 5}], "id BIGINT, qty BIGINT"
    )  # v2
    assert cluster.sql("ALTER MATERIALIZED VIEW item_qty RESUME")["accepted"]
    wait_until(lambda: reflects(2), what="item_qty refreshed after RESUME")
    task = cluster.task("mv:item_qty")
    assert task is not None and task["epoch"] > failed["epoch"] and task["error"] is None
    assert sorted(tuple(r.values()) for r in read_table(spark, settings, "item_qty")) == [(1, 2), (2, 5)]
