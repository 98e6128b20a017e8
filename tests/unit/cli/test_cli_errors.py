"""`mvs` fails in one line: ``ERROR <code>: <message>`` on stderr, a non-zero exit code, no traceback
(unless --debug). The real-broker cases are in tests/integration/test_client_failures.py."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from workers.cli import command_line as cli
from workers.client import BrokerUnavailable, MvsClient, StatementError
from workers.config import Settings
from workers.kafka.errors import BusError

DEEP = "(" * 5000 + "1" + ")" * 5000


@pytest.fixture(autouse=True)
def unreachable(monkeypatch: pytest.MonkeyPatch) -> None:
    """Any command that did reach for the broker would fail: these tests must not need one."""
    monkeypatch.setenv("MVS_BOOTSTRAP_SERVERS", "127.0.0.1:1")


def one_error_line(capsys: pytest.CaptureFixture[str]) -> str:
    err = capsys.readouterr().err
    assert "Traceback" not in err
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    return lines[0]


def test_a_bad_statement_is_code_1001_and_never_reaches_the_broker(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert cli.main(["sql", "SELEC 1", "--timeout", "30"]) == cli.EXIT_STATEMENT
    assert one_error_line(capsys).startswith("ERROR 1001: expected CREATE")


def test_deep_nesting_is_a_statement_error_not_a_recursion_traceback(
    capsys: pytest.CaptureFixture[str],
) -> None:
    statement = f"CREATE MATERIALIZED VIEW v REFRESH COMPLETE ON DEMAND AS SELECT {DEEP} AS x FROM t"
    assert cli.main(["sql", statement]) == cli.EXIT_STATEMENT
    assert one_error_line(capsys).startswith("ERROR 1001: ")


def test_the_client_raises_a_typed_error_for_a_bad_statement() -> None:
    client = MvsClient(Settings(bootstrap_servers="127.0.0.1:1", embedded=False))
    with pytest.raises(StatementError) as raised:
        client.execute(f"CREATE MATERIALIZED VIEW v REFRESH COMPLETE ON DEMAND AS SELECT {DEEP} FROM t")
    assert raised.value.code == 1001


def test_a_refusal_prints_the_coordinators_code(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    answer = {"accepted": False, "task_id": None, "error": {"code": 1002, "message": "mv:v\nalready exists"}}
    monkeypatch.setattr(MvsClient, "execute", lambda *a, **k: answer)
    assert cli.main(["sql", "DROP MATERIALIZED VIEW v"]) == cli.EXIT_REFUSED
    assert one_error_line(capsys) == "ERROR 1002: mv:v already exists"


def test_a_typed_client_error_is_its_code(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    def down(*_: Any, **__: Any) -> None:
        raise BrokerUnavailable("broker unreachable at 127.0.0.1:1 (refused)")

    monkeypatch.setattr(MvsClient, "execute", down)
    assert cli.main(["sql", "DROP MATERIALIZED VIEW v"]) == cli.EXIT_UNAVAILABLE
    assert one_error_line(capsys) == "ERROR 3001: broker unreachable at 127.0.0.1:1 (refused)"


def test_an_unexpected_failure_is_one_line_and_the_traceback_only_with_debug(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken(*_: Any) -> int:
        raise KeyError("oops")

    monkeypatch.setattr(cli, "cmd_history", broken)
    assert cli.main(["history"]) != 0
    assert one_error_line(capsys).startswith("ERROR: unexpected KeyError")
    assert cli.main(["--debug", "history"]) != 0
    assert "Traceback" in capsys.readouterr().err


def test_a_command_that_hangs_is_given_up_at_its_timeout(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    release = threading.Event()

    def hangs(*_: Any) -> int:
        release.wait(30)  # a Kafka call no deadline bounds
        return 0

    monkeypatch.setattr(cli, "WATCHDOG_GRACE_S", 0.0)
    monkeypatch.setattr(cli, "cmd_sql", hangs)
    try:
        assert cli.main(["sql", "DROP MATERIALIZED VIEW v", "--timeout", "0.2"]) == cli.EXIT_UNAVAILABLE
    finally:
        release.set()
    assert one_error_line(capsys) == "ERROR 3001: broker unreachable at 127.0.0.1:1 (no answer within 0.2s)"


def test_status_notes_what_it_may_not_read_under_the_tables(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Authorization errors need a broker with ACLs; here the two calls status makes are stand-ins."""
    from workers.kafka import admin

    def connect(self: MvsClient, *_: Any) -> Settings:
        return self.settings

    def owners(settings: Settings, group: str, **_: Any) -> dict[str, list[int]]:
        if group.endswith("workers"):
            raise BusError(f"not authorized to describe group {group}", code="GROUP_AUTHORIZATION_FAILED")
        return {"c1": [0]}

    monkeypatch.setattr(MvsClient, "shown_tasks", lambda *a, **k: ({}, None))
    monkeypatch.setattr(MvsClient, "loop_errors", lambda *a, **k: {})
    monkeypatch.setattr(MvsClient, "ddl_lag", lambda *a, **k: 0)
    monkeypatch.setattr(MvsClient, "connect", connect)
    monkeypatch.setattr(admin, "group_owners", owners)
    assert cli.main(["status"]) == 0
    out = capsys.readouterr().out.strip().splitlines()
    assert out[0] == "no tasks"
    assert ["coordinator", "c1", "active", "-", "-", "0", "-"] in [line.split() for line in out]
    assert out[-1] == "roles: not authorized to describe group mvs.workers"
