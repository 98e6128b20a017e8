"""`mvs status`: the live roles table."""

from __future__ import annotations

from workers.status import members_table, notes_text, status_table


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


def test_an_mv_over_mvs_shows_the_base_versions_it_reflects_beside_its_watermark() -> None:
    """Two MVs whose WATERMARK shows the same base versions are consistent with each other."""
    run = {"run_id": "r1", "state": "COMPLETED", "started_at": 1_000, "ended_at": 2_000, "rows_written": 3}
    over_mvs = {
        "task_id": "mv:b",
        "kind": "MV",
        "state": "NORMAL",
        "epoch": 1,
        "checkpoint": {"a": 3},
        "mv": {"trigger": {"kind": "ON_CHANGE", "interval_ms": None}, "base_tables": ["a"]},
        "last_run": {**run, "message": "incremental: 2 change rows applied; reflects sales@v12"},
    }
    over_base = {
        **over_mvs,
        "task_id": "mv:a",
        "checkpoint": {"sales": 12},
        "mv": {**over_mvs["mv"], "base_tables": ["sales"]},
        "last_run": {**run, "message": "incremental: 2 change rows applied"},
    }
    shown = status_table({"mv:a": over_base, "mv:b": over_mvs}, lambda _t: None, now_ms=3_000)
    assert "a@v3 (sales@v12)" in shown
    assert "sales@v12 " in shown and "(sales@v12)" not in shown.splitlines()[2]  # mv:a: as it read
