"""Pipelines of MVs at the coordinator: an MV may read an MV of the catalog before its table is
built (a pipeline created in one script), an MV log may be kept on an MV, and a cycle is still
refused."""

from tests.support.coordinator_cases import TABLES, checked_ctx, mv_spec, raw_event, refusal
from workers.coordinator.effects import Context
from workers.coordinator.handlers import handle_ddl
from workers.ddl import parse_statement
from workers.records import Record


def _accept(statement: str, tasks: dict[str, Record], context: Context) -> Record:
    effects = handle_ddl(parse_statement(statement), tasks, context)
    assert effects.results[0]["accepted"], effects.results
    tasks.update(effects.catalog)  # type: ignore[arg-type]
    return effects.results[0]


def test_an_mv_over_an_mv_not_built_yet_is_accepted_and_names_its_upstream() -> None:
    tasks: dict[str, Record] = {}
    context = checked_ctx(TABLES)  # no table a: a's first refresh has not committed
    _accept("CREATE MATERIALIZED VIEW a REFRESH COMPLETE AS SELECT id, amount FROM sales", tasks, context)
    b = "CREATE MATERIALIZED VIEW b REFRESH COMPLETE AS SELECT id FROM a WHERE amount > 0"
    _accept(b, tasks, context)
    assert tasks["mv:b"]["mv"]["base_tables"] == ["a"]
    assert tasks["mv:b"]["mv"]["upstream_mvs"] == ["a"]
    assert tasks["mv:a"]["mv"]["upstream_mvs"] == []


def test_an_unknown_table_beside_an_upstream_mv_is_still_refused() -> None:
    tasks: dict[str, Record] = {}
    context = checked_ctx(TABLES)
    _accept("CREATE MATERIALIZED VIEW a REFRESH COMPLETE AS SELECT id FROM sales", tasks, context)
    event = raw_event("CREATE_MV", "b", mv=mv_spec("SELECT a.id FROM a JOIN nowhere n ON a.id = n.id"))
    error = refusal(handle_ddl(event, tasks, context))
    assert error["code"] == 1001 and "unknown base table(s): nowhere" in error["message"]


def test_a_join_over_an_unbuilt_mv_resolves_its_columns_from_the_mv_query() -> None:
    """The join's unqualified columns come from the Delta logs; an MV with no table yet gives its
    query's output names instead, so the FAST plan is the one its built table would give."""
    columns = {"orders": ("order_id", "customer", "amount")}
    context = Context(
        now_ms=1_000,
        coordinator_epoch=7,
        table_exists=lambda t: t in TABLES,
        table_columns=lambda t: columns.get(t),
    )
    tasks: dict[str, Record] = {}
    _accept(
        "CREATE MATERIALIZED VIEW big REFRESH COMPLETE AS "
        "SELECT id AS big_id, amount AS big_amount FROM sales WHERE amount > 100",
        tasks,
        context,
    )
    _accept(
        "CREATE MATERIALIZED VIEW joined REFRESH FAST AS "
        "SELECT order_id, big_amount FROM orders JOIN big ON order_id = big_id",
        tasks,
        context,
    )
    plan = tasks["mv:joined"]["mv"]["plan"]["fast_refresh"]
    assert plan["kind"] == "join_projection"
    assert {(k["left_table"], k["right_table"]) for k in plan["join_keys"]} <= {
        ("orders", "big"),
        ("big", "orders"),
    }


def test_a_cycle_through_an_unbuilt_mv_is_refused() -> None:
    tasks: dict[str, Record] = {}
    context = checked_ctx(TABLES)
    _accept("CREATE MATERIALIZED VIEW a REFRESH COMPLETE AS SELECT id FROM sales", tasks, context)
    _accept("CREATE MATERIALIZED VIEW b REFRESH COMPLETE AS SELECT id FROM a", tasks, context)
    alter = raw_event("ALTER_MV", "a", mv=mv_spec("SELECT id FROM b"))
    error = refusal(handle_ddl(alter, tasks, context))
    assert error["code"] == 1001 and "a → b → a" in error["message"]


def test_an_mv_log_on_an_mv_is_accepted_built_or_not() -> None:
    tasks: dict[str, Record] = {}
    context = checked_ctx(TABLES)
    _accept("CREATE MATERIALIZED VIEW a REFRESH COMPLETE AS SELECT id FROM sales", tasks, context)
    result = _accept("CREATE MATERIALIZED VIEW LOG ON a", tasks, context)
    assert result["task_id"] == "mvlog:a"
    assert tasks["mvlog:a"]["mv_log"]["base_table"] == "a"
    error = refusal(handle_ddl(parse_statement("CREATE MATERIALIZED VIEW LOG ON nowhere"), tasks, context))
    assert "unknown base table: nowhere" in error["message"]


def _chain(context: Context) -> dict[str, Record]:
    """sales → a → b → c, and d over a: an MV log on a and on b."""
    tasks: dict[str, Record] = {}
    for statement in (
        "CREATE MATERIALIZED VIEW a REFRESH COMPLETE AS SELECT id, amount FROM sales",
        "CREATE MATERIALIZED VIEW LOG ON a",
        "CREATE MATERIALIZED VIEW b REFRESH COMPLETE AS SELECT id FROM a",
        "CREATE MATERIALIZED VIEW LOG ON b",
        "CREATE MATERIALIZED VIEW c REFRESH COMPLETE AS SELECT count(*) AS n FROM b",
        "CREATE MATERIALIZED VIEW d REFRESH COMPLETE AS SELECT sum(amount) AS s FROM a",
    ):
        _accept(statement, tasks, context)
    return tasks


def test_dropping_an_mv_that_others_read_is_refused_with_its_readers() -> None:
    context = checked_ctx(TABLES)
    tasks = _chain(context)
    error = refusal(handle_ddl(parse_statement("DROP MATERIALIZED VIEW a"), tasks, context))
    assert error["code"] == 1001
    assert error["message"] == "a is read by b, d; drop them first or use DROP MATERIALIZED VIEW a CASCADE"
    # Readers dropped first (DROPPING counts as gone), the DROP goes through, with a's MV log.
    for reader in ("c", "b", "d"):
        _accept(f"DROP MATERIALIZED VIEW {reader}", tasks, context)
    effects = handle_ddl(parse_statement("DROP MATERIALIZED VIEW a"), tasks, context)
    assert effects.results[0]["accepted"], effects.results
    assert sorted(effects.catalog) == ["mv:a", "mvlog:a"]


def test_drop_cascade_drops_every_reader_and_their_mv_logs_under_raised_epochs() -> None:
    context = checked_ctx(TABLES)
    tasks = _chain(context)
    event = parse_statement("DROP MATERIALIZED VIEW a CASCADE")
    assert event["cascade"] is True
    effects = handle_ddl(event, tasks, context)
    assert effects.results[0]["accepted"], effects.results
    dropped = ["mv:a", "mv:b", "mv:c", "mv:d", "mvlog:a", "mvlog:b"]
    assert sorted(effects.catalog) == dropped
    for task_id, record in effects.catalog.items():
        assert record is not None and record["state"] == "DROPPING"
        assert record["epoch"] == tasks[task_id]["epoch"] + 1
    removes = {(c["task_id"], c["kind"], c["epoch"]) for c in effects.manager}
    assert removes == {(t, "REMOVE_MAINTAINER", tasks[t]["epoch"] + 1) for t in dropped}
    assert "mvlog:sales" not in effects.catalog
    assert parse_statement("DROP MATERIALIZED VIEW a")["cascade"] is None


def test_an_alter_changing_an_upstreams_columns_fails_its_readers_with_the_way_back() -> None:
    context = checked_ctx(TABLES)
    tasks = _chain(context)
    same = raw_event("ALTER_MV", "b", mv=mv_spec("SELECT id FROM a WHERE id > 0"))
    effects = handle_ddl(same, tasks, context)
    assert effects.results[0]["accepted"] and sorted(effects.catalog) == ["mv:b"]  # same columns
    tasks.update(effects.catalog)  # type: ignore[arg-type]
    changed = raw_event("ALTER_MV", "a", mv=mv_spec("SELECT id AS sale_id, amount FROM sales"))
    effects = handle_ddl(changed, tasks, context)
    assert effects.results[0]["accepted"], effects.results
    assert sorted(effects.catalog) == ["mv:a", "mv:b", "mv:d"]  # a's readers; c reads b, unchanged
    for reader in ("mv:b", "mv:d"):
        failed = effects.catalog[reader]
        assert failed is not None and failed["state"] == "FAILED"
        assert failed["epoch"] == tasks[reader]["epoch"] + 1
        assert failed["error"]["code"] == 1001
        assert "the columns of a, which this view reads, changed" in failed["error"]["message"]
        assert "id, amount → sale_id, amount" in failed["error"]["message"]
    tasks.update(effects.catalog)  # type: ignore[arg-type]
    resumed = handle_ddl(parse_statement("ALTER MATERIALIZED VIEW d RESUME"), tasks, context)
    record = resumed.catalog["mv:d"]
    assert record is not None and (record["state"], record["error"]) == ("NORMAL", None)
