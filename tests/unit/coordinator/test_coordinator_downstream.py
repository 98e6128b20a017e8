"""TARGET LAG DOWNSTREAM at the coordinator: an intermediate MV with no trigger of its own runs by
the tightest of its readers' triggers (``MvSpec.driven_by``), kept up to date as readers come, go
and change their schedules; nothing drives it while no reader has a schedule, and status says so."""

from tests.support.coordinator_cases import TABLES, checked_ctx
from workers.catalog.specs import effective_trigger
from workers.coordinator.effects import Context
from workers.coordinator.handlers import handle_ddl
from workers.ddl import parse_statement
from workers.records import Record
from workers.status import IDLE_DOWNSTREAM, status_table
from workers.worker.schedule import next_due

MINUTE = 60_000


def _apply(statement: str, tasks: dict[str, Record], context: Context) -> list[Record]:
    """Accept ``statement`` into ``tasks``; the manager commands it sent."""
    effects = handle_ddl(parse_statement(statement), tasks, context)
    assert effects.results[0]["accepted"], effects.results
    tasks.update(effects.catalog)  # type: ignore[arg-type]
    return effects.manager


def _driven(tasks: dict[str, Record], name: str) -> Record | None:
    driven: Record | None = tasks[f"mv:{name}"]["mv"]["driven_by"]
    return driven


def _pipeline() -> tuple[dict[str, Record], Context]:
    tasks: dict[str, Record] = {}
    context = checked_ctx(TABLES)
    _apply(
        "CREATE MATERIALIZED VIEW a REFRESH FAST TARGET LAG DOWNSTREAM AS SELECT id, amount FROM sales",
        tasks,
        context,
    )
    return tasks, context


def test_the_statement_parses_and_an_mv_nothing_reads_is_driven_by_nothing() -> None:
    tasks, _ = _pipeline()
    a = tasks["mv:a"]
    assert a["mv"]["trigger"] == {"kind": "DOWNSTREAM", "interval_ms": None}
    assert a["mv"]["driven_by"] is None
    assert effective_trigger(a["mv"])["kind"] == "ON_DEMAND"
    assert next_due(a, now=100.0, last_started=None, data_time=None, last_duration=None) is None
    assert IDLE_DOWNSTREAM in status_table(tasks, lambda _t: 0, now_ms=1_000)


def test_a_reader_drives_it_at_half_its_target_lag_under_a_new_epoch() -> None:
    tasks, context = _pipeline()
    epoch = tasks["mv:a"]["epoch"]
    sent = _apply(
        "CREATE MATERIALIZED VIEW b REFRESH FAST TARGET LAG 10 MINUTES AS SELECT id FROM a WHERE amount > 0",
        tasks,
        context,
    )
    assert _driven(tasks, "a") == {"kind": "TARGET_LAG", "interval_ms": 5 * MINUTE}
    assert tasks["mv:a"]["epoch"] == epoch + 1
    to_a = [c for c in sent if c["task_id"] == "mv:a"]
    assert [c["kind"] for c in to_a] == ["ADD_MAINTAINER"] and to_a[0]["task"] == tasks["mv:a"]
    due = next_due(tasks["mv:a"], now=100.0, last_started=90.0, data_time=0.0, last_duration=10.0)
    assert due == 5 * 60 - 10.0  # scheduled by the driven target lag, less the run's duration
    assert IDLE_DOWNSTREAM not in status_table(tasks, lambda _t: 0, now_ms=1_000)


def test_the_tightest_reader_wins_and_dropping_it_hands_back() -> None:
    tasks, context = _pipeline()
    _apply("CREATE MATERIALIZED VIEW b REFRESH FAST EVERY 2 MINUTES AS SELECT id FROM a", tasks, context)
    assert _driven(tasks, "a") == {"kind": "EVERY", "interval_ms": 2 * MINUTE}
    _apply("CREATE MATERIALIZED VIEW c REFRESH FAST ON CHANGE AS SELECT amount FROM a", tasks, context)
    assert _driven(tasks, "a") == {"kind": "ON_CHANGE", "interval_ms": None}
    _apply("DROP MATERIALIZED VIEW c", tasks, context)
    assert _driven(tasks, "a") == {"kind": "EVERY", "interval_ms": 2 * MINUTE}
    _apply("ALTER MATERIALIZED VIEW b REFRESH ON DEMAND", tasks, context)
    assert _driven(tasks, "a") is None  # a reader refreshed only when asked drives nothing


def test_a_chain_of_downstream_mvs_is_driven_from_its_end() -> None:
    tasks, context = _pipeline()
    _apply(
        "CREATE MATERIALIZED VIEW b REFRESH FAST TARGET LAG DOWNSTREAM AS SELECT id FROM a", tasks, context
    )
    assert _driven(tasks, "a") is None and _driven(tasks, "b") is None
    _apply("CREATE MATERIALIZED VIEW c REFRESH FAST TARGET LAG 8 MINUTES AS SELECT id FROM b", tasks, context)
    assert _driven(tasks, "b") == {"kind": "TARGET_LAG", "interval_ms": 4 * MINUTE}
    assert _driven(tasks, "a") == {"kind": "TARGET_LAG", "interval_ms": 2 * MINUTE}


def test_altering_an_mv_with_readers_to_downstream_is_driven_in_the_same_record() -> None:
    tasks: dict[str, Record] = {}
    context = checked_ctx(TABLES)
    _apply("CREATE MATERIALIZED VIEW a REFRESH FAST EVERY 1 HOUR AS SELECT id FROM sales", tasks, context)
    _apply("CREATE MATERIALIZED VIEW b REFRESH FAST ON CHANGE AS SELECT id FROM a", tasks, context)
    epoch = tasks["mv:a"]["epoch"]
    sent = _apply("ALTER MATERIALIZED VIEW a REFRESH TARGET LAG DOWNSTREAM", tasks, context)
    assert _driven(tasks, "a") == {"kind": "ON_CHANGE", "interval_ms": None}
    assert tasks["mv:a"]["epoch"] == epoch + 1  # the ALTER's own epoch, no second one
    assert [c["kind"] for c in sent if c["task_id"] == "mv:a"] == ["ADD_MAINTAINER"]


def test_a_producer_cannot_set_driven_by() -> None:
    tasks: dict[str, Record] = {}
    context = checked_ctx(TABLES)
    event = parse_statement("CREATE MATERIALIZED VIEW a REFRESH FAST EVERY 1 HOUR AS SELECT id FROM sales")
    event["mv"]["driven_by"] = {"kind": "ON_CHANGE", "interval_ms": None}
    effects = handle_ddl(event, tasks, context)
    assert effects.results[0]["accepted"]
    assert effects.catalog["mv:a"]["mv"]["driven_by"] is None  # type: ignore[index]
