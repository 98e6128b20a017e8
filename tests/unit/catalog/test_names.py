"""One name rule for the grammar, the coordinator and warehouse paths (workers/catalog/names.py)."""

import pytest

from workers import warehouse
from workers.catalog import names
from workers.config import Settings
from workers.ddl import parser


def test_the_grammar_uses_the_same_pattern() -> None:
    assert parser._NAME_RE is names.NAME_RE


@pytest.mark.parametrize("name", ["sales", "_x", "a1_b", "v" * 128])
def test_valid_catalog_names(name: str) -> None:
    assert names.name_problem(name, "table") is None
    assert names.check_table_name(name) == name


@pytest.mark.parametrize(
    ("name", "why"),
    [
        ("", "cannot be empty"),
        ("../x", "invalid table name"),
        ("a/b", "invalid table name"),
        ("a\\b", "invalid table name"),
        ("a.b", "invalid table name"),
        ("é", "invalid table name"),
        ("x" * 129, "129 characters long; the limit is 128"),
        ("Sales", "use 'sales'"),
    ],
)
def test_invalid_catalog_names_say_why(name: str, why: str) -> None:
    problem = names.name_problem(name, "table")
    assert problem is not None and why in problem


def test_reserved_suffix_and_mv_log_tables() -> None:
    assert "reserved for MV log tables" in (names.mv_name_problem("t__mlog") or "")
    assert "is itself an MV log table" in (names.mv_log_table_problem("t__mlog") or "")
    assert names.mv_name_problem("t_mlog") is None


def test_messages_do_not_echo_a_huge_name() -> None:
    problem = names.name_problem("x" * 10_000, "table")
    assert problem is not None and len(problem) < 200


def test_warehouse_paths_use_the_rule() -> None:
    settings = Settings(warehouse="/wh")
    longest = "v" * names.MAX_NAME_LENGTH
    assert warehouse.table_path(settings, longest) == f"/wh/{longest}"
    assert warehouse.mlog_table_name(longest) == f"{longest}__mlog"  # fits: 134 characters
    assert warehouse.table_path(settings, f"{longest}__mlog").endswith("__mlog")
    for bad in ("../etc", "a/b", "", ".", "a$b", "a-b", "x" * (names.MAX_TABLE_NAME_LENGTH + 1)):
        with pytest.raises(names.InvalidName):
            warehouse.table_path(settings, bad)
    with pytest.raises(ValueError):  # InvalidName is a ValueError, as before
        warehouse.mlog_table_name("../x")


def test_owner_rule_settings_from_the_environment() -> None:
    settings = Settings.from_env({"MVS_OWNER_RULE": "1", "MVS_ADMIN_PRINCIPALS": "User:admin, User:ops,"})
    assert settings.owner_rule is True
    assert settings.admin_principals == frozenset({"User:admin", "User:ops"})
    assert Settings.from_env({}).owner_rule is False and Settings.from_env({}).admin_principals == frozenset()


@pytest.mark.parametrize("name", sorted(names.RESERVED_TABLE_NAMES))
def test_the_fleets_own_tables_cannot_be_mv_names(name: str) -> None:
    problem = names.mv_name_problem(name)
    assert problem is not None and "reserved" in problem
    # ...but an MV may read them, and they are valid warehouse folders
    assert names.name_problem(name, "table") is None
    assert names.check_table_name(name) == name
