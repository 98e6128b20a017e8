"""EXPLAIN before CREATE (``workers.explain``, ``mvs explain``, ``POST /explain``): over Delta tables
written by delta-rs, without Kafka or Spark. Every CREATE MATERIALIZED VIEW example of docs/GRAMMAR.md
is read from the doc itself, so the doc and this test cannot drift."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import write_deltalake
from fastapi.testclient import TestClient

from tests.support.paths import REPO
from workers import warehouse
from workers.api.app import create_app
from workers.cli import command_line as cli
from workers.config import Settings
from workers.ddl import DdlSyntaxError, parse_statement
from workers.explain import RULES, explain, explain_text

TABLES = {
    "sales": {"id": pa.int64(), "region": pa.string(), "amount": pa.int64(), "price": pa.float64()},
    "orders": {"id": pa.int64(), "amount": pa.int64(), "customer_id": pa.int64()},
    "customers": {"cid": pa.int64(), "segment": pa.string()},
}


def grammar_examples() -> list[str]:
    """The CREATE MATERIALIZED VIEW statements of the doc's "Examples" block."""
    doc = (REPO / "docs" / "GRAMMAR.md").read_text()
    block = doc.split("## Examples", 1)[1].split("```sql", 1)[1].split("```", 1)[0]
    lines = [line.split("--", 1)[0] for line in block.splitlines()]
    statements = [s.strip() for s in "\n".join(lines).split(";")]
    found = [s for s in statements if re.match(r"CREATE MATERIALIZED VIEW (?!LOG)", s)]
    assert len(found) >= 2, "the doc's examples moved: update grammar_examples"
    return found


@pytest.fixture
def settings(tmp_path: Path) -> Settings:
    settings = Settings(warehouse=str(tmp_path / "warehouse"))
    for name, columns in TABLES.items():
        schema = pa.schema(list(columns.items()))
        write_deltalake(warehouse.table_path(settings, name), schema.empty_table())
    return settings


def with_mv_log(settings: Settings, table: str) -> None:
    rows = pa.table({"_commit_version": pa.array([], pa.int64())})
    write_deltalake(warehouse.table_path(settings, warehouse.mlog_table_name(table)), rows)


@pytest.mark.parametrize("statement", grammar_examples())
def test_every_grammar_example_is_explained(settings: Settings, statement: str) -> None:
    answer = explain(settings, statement)
    event = parse_statement(statement)
    assert answer["accepted"] and answer["error"] is None
    assert (answer["name"], answer["refresh_mode"]) == (event["name"], event["mv"]["refresh_mode"])
    assert [b["table"] for b in answer["base_tables"]] == event["mv"]["base_tables"]
    plan = answer["plan"]
    assert answer["fast"] and plan is not None and answer["fast_reason"] is None
    assert plan["rules"] == [RULES[plan["kind"]]]
    assert answer["mv_logs_needed"] == event["mv"]["base_tables"]  # none has an MV log yet
    text = explain_text(answer)
    assert f"plan: {plan['kind']}" in text and "CREATE MATERIALIZED VIEW LOG ON" in text
    json.dumps(answer)


def test_an_aggregate_names_its_keys_aggregates_and_helper_state(settings: Settings) -> None:
    with_mv_log(settings, "sales")
    answer = explain(
        settings,
        "CREATE MATERIALIZED VIEW r AS SELECT region, AVG(amount) AS mean, SUM(price) AS revenue, "
        "SUM(amount * 2) AS twice FROM sales WHERE amount > 0 GROUP BY region",
    )
    plan = answer["plan"]
    assert plan is not None and plan["kind"] == "aggregate"
    assert (plan["keys"], plan["where"]) == (["region"], "amount > 0")
    assert plan["aggregates"] == ["AVG(amount) AS mean", "SUM(price) AS revenue", "SUM(amount * 2) AS twice"]
    assert answer["mv_logs_needed"] == [] and answer["base_tables"][0]["mv_log"] is True
    helper = answer["helper_state"]
    assert helper is not None and helper["table"] == "r__mvstate"
    assert helper["why"] == [
        "a row count per group: no COUNT(*) shows that a group vanished",
        "mean: AVG keeps its group's exact sum and count",
        "revenue: SUM of floating-point price keeps its exact sum",
    ]
    counted = explain(
        settings,
        "CREATE MATERIALIZED VIEW c AS SELECT region, COUNT(*) AS n, SUM(amount) AS t "
        "FROM sales GROUP BY region",
    )
    assert counted["fast"] and counted["helper_state"] is None
    assert "helper state: none" in explain_text(counted)


def test_a_join_is_analysed_with_the_columns_of_its_tables_as_the_coordinator_does(
    settings: Settings,
) -> None:
    # `segment` and `cid` are unqualified: only the Delta logs' columns say which table has them.
    statement = (
        "CREATE MATERIALIZED VIEW j REFRESH FAST AS SELECT o.id, segment FROM orders o "
        "JOIN customers c ON o.customer_id = cid"
    )
    answer = explain(settings, statement)
    plan = answer["plan"]
    assert answer["fast"] and plan is not None and plan["kind"] == "join_projection"
    assert plan["base_tables"] == ["orders", "customers"]
    assert plan["keys"] == ["orders.customer_id = customers.cid"]
    assert answer["mv_logs_needed"] == ["customers", "orders"]


@pytest.mark.parametrize(
    ("query", "construct", "reason"),
    [
        ("SELECT id, amount FROM sales LIMIT 3", "3", "LIMIT without ORDER BY"),
        ("SELECT region, amount, ROW_NUMBER() OVER (ORDER BY amount) AS n FROM sales", "ROW_NUMBER", ""),
    ],
)
def test_a_query_without_incremental_plan_says_why_and_where(
    settings: Settings, query: str, construct: str, reason: str
) -> None:
    statement = f"CREATE MATERIALIZED VIEW v REFRESH FORCE AS\n  {query}"
    answer = explain(settings, statement)
    assert answer["accepted"] and not answer["fast"] and answer["plan"] is None
    assert reason in (answer["fast_reason"] or "") and answer["mv_logs_needed"] == []
    at = answer["fast_position"]
    assert at is not None and at["line"] == 2
    assert statement[at["offset"] :].upper().startswith(construct.upper())
    # The same place a REFRESH FAST CREATE of it is refused at.
    fast = statement.replace("REFRESH FORCE", "REFRESH FAST ")
    with pytest.raises(DdlSyntaxError) as refused:
        parse_statement(fast)
    assert refused.value.position == at["offset"]
    assert "incremental: no at line 2" in explain_text(answer)


@pytest.mark.parametrize(
    ("statement", "error"),
    [
        ("CREATE MATERIALIZED VIEW v AS SELEC id FROM sales", "could not parse"),
        ("DROP MATERIALIZED VIEW v", "EXPLAIN takes a CREATE MATERIALIZED VIEW statement"),
        ("CREATE MATERIALIZED VIEW v AS SELECT id FROM sales; DROP TABLE sales", ""),
        ("CREATE MATERIALIZED VIEW v REFRESH FAST AS SELECT DISTINCT id FROM sales LIMIT 1", "REFRESH FAST"),
        ("CREATE MATERIALIZED VIEW v AS SELECT id FROM nowhere", "base table nowhere does not exist"),
    ],
)
def test_a_statement_that_would_be_refused_says_so(settings: Settings, statement: str, error: str) -> None:
    answer = explain(settings, statement)
    assert not answer["accepted"] and error in (answer["error"] or "")
    assert explain_text(answer).startswith(("REFUSED", "materialized view"))


def test_an_operator_tree_prints_its_operators_rules_and_names_its_key_counts(settings: Settings) -> None:
    for table in ("customers", "orders"):
        with_mv_log(settings, table)
    answer = explain(
        settings,
        "CREATE MATERIALIZED VIEW buyers AS SELECT segment, COUNT(*) AS n FROM customers WHERE EXISTS "
        "(SELECT * FROM orders WHERE customer_id = cid AND amount > 0) GROUP BY segment",
    )
    plan = answer["plan"]
    assert answer["fast"] and plan is not None and plan["kind"] == "tree"
    assert plan["rules"][0] == "scan customers AS customers: MV-log change rows"
    assert any(
        r.startswith("semi join (EXISTS): matching rows counted per customer_id") for r in plan["rules"]
    )
    assert plan["rules"][-1].startswith("aggregate (top)")
    counts = answer["key_counts"]
    assert counts is not None and counts["table"] == "buyers__mvkeys"
    assert counts["why"][0] == "semi join (EXISTS) on orders: its matching rows counted per customer_id"
    text = explain_text(answer)
    assert (
        "rule: semi join (EXISTS): matching rows counted" in text and "key counts: buyers__mvkeys (" in text
    )
    # A subquery that is more than its keys (a second correlation) is recomputed by key: no counts.
    other = explain(
        settings,
        "CREATE MATERIALIZED VIEW others AS SELECT cid FROM customers c WHERE EXISTS "
        "(SELECT * FROM orders o WHERE o.customer_id = c.cid AND o.amount > c.cid)",
    )
    assert other["fast"] and other["key_counts"] is None and "key counts" not in explain_text(other)


def test_mvs_explain_and_post_explain_answer_alike(
    settings: Settings, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    statement = grammar_examples()[0]
    monkeypatch.setenv("MVS_WAREHOUSE", settings.warehouse)
    monkeypatch.setenv("MVS_BOOTSTRAP_SERVERS", "127.0.0.1:1")  # never reached
    capsys.readouterr()
    assert cli.main(["explain", statement, "--output", "json"]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert printed == explain(settings, statement)
    assert cli.main(["explain", "CREATE MATERIALIZED VIEW v AS SELECT id FROM nowhere"]) == 1
    assert "REFUSED: base table nowhere does not exist" in capsys.readouterr().out
    with TestClient(create_app(settings), raise_server_exceptions=False) as api:
        answer = api.post("/explain", content=statement, headers={"content-type": "text/plain"})
        assert answer.status_code == 200 and answer.json() == printed
        refused = api.post(
            "/explain", content="DROP MATERIALIZED VIEW v", headers={"content-type": "text/plain"}
        )
        assert refused.status_code == 200 and refused.json()["accepted"] is False
