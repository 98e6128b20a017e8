"""The change sizes FORCE plans with, read from Delta commit actions without a JVM
(``workers.jobs.delta.sizes``)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from workers.config import Settings
from workers.jobs.delta.sizes import commit_change, no_change_rows, rows_inserted_deleted


def _add(rows: int, size_bytes: int, key: str = "add") -> dict[str, object]:
    return {key: {"path": "p", "size": size_bytes, "stats": json.dumps({"numRecords": rows})}}


def _info(operation: str, **metrics: int) -> dict[str, object]:
    named = {k: str(v) for k, v in metrics.items()}
    return {"commitInfo": {"operation": operation, "operationMetrics": named}}


@pytest.mark.parametrize(
    ("actions", "expected"),
    [
        ([_info("WRITE", numOutputRows=7), _add(7, 100)], (7, 100)),  # append
        ([_info("DELETE", numDeletedRows=2), _add(98, 90), _add(100, 95, "remove")], (2, 185)),
        ([_info("UPDATE", numUpdatedRows=3), _add(100, 90), _add(100, 95, "remove")], (6, 185)),
        ([_info("MERGE", numTargetRowsInserted=1, numTargetRowsUpdated=2, numTargetRowsDeleted=3)], (8, 0)),
        ([_info("WRITE", numOutputRows=50), _add(50, 10), _add(40, 8, "remove")], (90, 18)),  # overwrite
        # no metric: the files' stats
        ([{"commitInfo": {"operation": "OPTIMIZE?"}}, _add(5, 1), _add(5, 1, "remove")], (10, 2)),
        # delta-rs's names
        (
            [{"commitInfo": {"operation": "WRITE", "operationMetrics": {"num_added_rows": 4}}}, _add(4, 3)],
            (4, 3),
        ),
    ],
)
def test_a_commits_change_rows_come_from_its_metrics_else_its_files_stats(
    actions: list[dict[str, object]], expected: tuple[int, int]
) -> None:
    assert commit_change(actions, 1) == expected  # type: ignore[arg-type]


def test_a_range_holds_no_change_row_only_when_every_commit_says_so(tmp_path: Path) -> None:
    """``no_change_rows``: read from the commit files; a data-changing file that may hold rows, a
    change data file, or a commit file that is gone (nothing known) all mean "maybe changed"."""
    local = Settings(namespace="t", warehouse=str(tmp_path))
    log = tmp_path / "base" / "_delta_log"
    log.mkdir(parents=True)
    moved = {"add": {"path": "q", "size": 1, "dataChange": False, "stats": '{"numRecords": 9}'}}
    commits: list[list[dict[str, object]]] = [
        [_info("CREATE TABLE")],
        [_info("SET TBLPROPERTIES")],  # v1: no file
        [_info("OPTIMIZE"), moved, {"remove": {"path": "p", "dataChange": False}}],  # v2: rows moved only
        [_info("DELETE", numDeletedRows=0), _add(0, 1)],  # v3: an empty data file
        [_info("WRITE", numOutputRows=1), _add(1, 10)],  # v4: a row
        [_info("DELETE"), {"remove": {"path": "q", "dataChange": True}}],  # v5: a file without stats
        [_info("UPDATE"), {"cdc": {"path": "c", "size": 1, "dataChange": False}}],  # v6: change data
    ]
    for version, actions in enumerate(commits):
        (log / f"{version:020d}.json").write_text("\n".join(json.dumps(a) for a in actions) + "\n")
    assert no_change_rows(local, "base", 0, 3) and no_change_rows(local, "base", 3, 3)
    assert not any(no_change_rows(local, "base", v - 1, v) for v in (4, 5, 6))
    assert not no_change_rows(local, "base", 0, 7)  # v7's commit file is not there


def test_rows_inserted_and_deleted_of_an_mv_commit() -> None:
    merge = {"numTargetRowsInserted": "4", "numTargetRowsUpdated": "2", "numTargetRowsDeleted": "1"}
    assert rows_inserted_deleted("MERGE", merge) == (6, 3)
    assert rows_inserted_deleted("WRITE", {"numOutputRows": "9"}) == (9, 0)
    assert rows_inserted_deleted("OPTIMIZE", {}) is None
