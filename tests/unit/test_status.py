"""`mvs status`: the live roles table."""

from __future__ import annotations

from workers.status import members_table, notes_text


def test_members_show_the_active_coordinator_and_each_workers_partitions_and_tasks() -> None:
    tasks = {
        "mv:a": {"owner": "w1"},
        "mv:b": {"owner": "w1"},
        "mv:c": {"owner": "w2"},
        "mvlog:t": {"owner": None},
    }
    loop_errors = {"w1": None, "w2": "2026-11-22 17:00:00Z: BusError: broker away (3 in a row)"}
    text = members_table({"c1": [0], "c2": []}, {"w1": [0, 1, 2, 5], "w2": [3, 4]}, tasks, loop_errors)
    rows = [line.split(None, 5) for line in text.splitlines()[2:]]
    assert rows == [
        ["coordinator", "c1", "active", "-", "-", "-"],
        ["coordinator", "c2", "standby", "-", "-", "-"],
        ["worker", "w1", "member", "0-2,5", "2", "-"],
        ["worker", "w2", "member", "3-4", "1", loop_errors["w2"]],
    ]
    assert members_table({}, {}, tasks) == "no live roles"


def test_what_could_not_be_read_is_one_line_each_under_the_tables() -> None:
    assert notes_text([]) == ""
    assert notes_text(["roles: not authorized to describe group mvs.workers", "lag: x"]) == (
        "\nroles: not authorized to describe group mvs.workers\nlag: x"
    )
