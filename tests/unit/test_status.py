"""`mvs status`: the live roles table."""

from __future__ import annotations

from workers.status import members_table, notes_text


def test_members_show_each_roles_health_the_active_coordinators_ddl_lag_and_each_workers_partitions() -> None:
    tasks = {
        "mv:a": {"owner": "w1"},
        "mv:b": {"owner": "w1"},
        "mv:c": {"owner": "w2"},
        "mvlog:t": {"owner": None},
    }
    away = "2026-11-22 17:00:00Z: BusError: broker away (3 in a row)"
    loop_errors = {"w1": None, "w2": away, "c2": away}
    text = members_table({"c1": [0], "c2": []}, {"w1": [0, 1, 2, 5], "w2": [3, 4]}, tasks, loop_errors, 2)
    assert text.splitlines()[0].split() == [
        "ROLE",
        "NAME",
        "STATE",
        "PARTITIONS",
        "TASKS",
        "DDL",
        "LAG",
        "LAST",
        "LOOP",
        "ERROR",
    ]
    rows = [line.split(None, 6) for line in text.splitlines()[2:]]
    assert rows == [
        ["coordinator", "c1", "active", "-", "-", "2", "-"],
        ["coordinator", "c2", "standby", "-", "-", "-", away],
        ["worker", "w1", "member", "0-2,5", "2", "-", "-"],
        ["worker", "w2", "member", "3-4", "1", "-", away],
    ]
    assert members_table({}, {}, tasks) == "no live roles"


def test_what_could_not_be_read_is_one_line_each_under_the_tables() -> None:
    assert notes_text([]) == ""
    assert notes_text(["roles: not authorized to describe group mvs.workers", "lag: x"]) == (
        "\nroles: not authorized to describe group mvs.workers\nlag: x"
    )
