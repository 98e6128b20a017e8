"""What an MV commit says about itself: the ``mvs`` object in Delta ``userMetadata``.

Pure Python (no Spark), so the coordinator can decode commit metadata it reads from the log.
The idempotent-write id follows the architecture contract: ``txnAppId = task id`` and
``txnVersion = epoch * 2**32 + sum(watermark versions)``; Delta skips a write whose txnVersion is
not above the one already recorded for that app id, which drops stale owners and replays.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from workers.jobs.request import RunRequest

EPOCH_SHIFT = 2**32

# Session confs from which MERGE and DELETE take the idempotent-write id and ``userMetadata`` (they
# have no writer options); set in a run's own session only (``session.run_session``).
TXN_APP_ID_CONF = "spark.databricks.delta.write.txnAppId"
TXN_VERSION_CONF = "spark.databricks.delta.write.txnVersion"
USER_METADATA_CONF = "spark.databricks.delta.commitInfo.userMetadata"
# How a MERGE treats its source: "none" (not copied first, one Spark job less) is right for sources held
# on the driver or checkpointed (``workers.jobs.spark.held``): deterministic, no lineage back to Delta.
MATERIALIZE_SOURCE_CONF = "spark.databricks.delta.merge.materializeSource"


@dataclass(frozen=True)
class CommitId:
    """What makes one Delta commit idempotent and says what it is: Delta's idempotent-write id
    (``app_id`` = txnAppId, ``txn_version``; a commit whose version is not above the one recorded
    for its app id is skipped) and the commit's ``userMetadata``. Spark takes it as writer options or,
    for a MERGE, session confs; delta-rs as commit properties (``workers.jobs.delta.write``)."""

    app_id: str
    txn_version: int
    metadata: str | None = None

    @classmethod
    def fence(cls, app_id: str, epoch: int, metadata: str | None = None) -> CommitId:
        """The id of an epoch's fence: ``epoch * 2**32``, above every older epoch's commit and below
        every commit of its own epoch whose watermark is past version 0 (``txn_version``)."""
        return cls(app_id, epoch * EPOCH_SHIFT, metadata)

    def writer_options(self) -> dict[str, str]:
        options = {"txnAppId": self.app_id, "txnVersion": str(self.txn_version)}
        return options if self.metadata is None else {**options, "userMetadata": self.metadata}

    def session_confs(self) -> dict[str, str]:
        confs = {TXN_APP_ID_CONF: self.app_id, TXN_VERSION_CONF: str(self.txn_version)}
        return confs if self.metadata is None else {**confs, USER_METADATA_CONF: self.metadata}


@dataclass(frozen=True)
class MvWatermark:
    """The state an MV table's content reflects, as recorded in the commit that wrote it."""

    task_id: str
    epoch: int
    run_id: str
    watermark: dict[str, int] = field(default_factory=dict)
    delta_version: int | None = None  # MV table version of the commit carrying it
    # The base tables (not MVs) at the versions the content reflects, through the MVs it reads:
    # two MVs reflecting the same versions are consistent with each other. Older commits have none:
    # their watermark, which then names base tables only.
    reflects: dict[str, int] = field(default_factory=dict)
    # What the MV's refreshes cost per technique as its owner had learnt them before this run
    # (``workers.worker.planning.CostModel.record``): a new owner goes on from there. Older commits
    # and foreign values: none.
    costs: dict[str, tuple[float, ...]] = field(default_factory=dict)
    # How the run that wrote it refreshed the MV (FAST | COMPLETE): the first FAST run after a
    # complete one rebuilds helper state, which its next owner must know too. Older commits: None.
    technique: str | None = None


TECHNIQUES = ("FAST", "COMPLETE")


def txn_version(epoch: int, watermark: Mapping[str, int]) -> int:
    """Delta txnVersion of a refresh: newer epochs always win, then further-advanced bases."""
    total = sum(watermark.values())
    if epoch < 0 or total < 0 or total >= EPOCH_SHIFT:
        raise ValueError(f"cannot encode epoch {epoch} / watermark sum {total} into a txnVersion")
    return epoch * EPOCH_SHIFT + total


def encode_user_metadata(
    task_id: str,
    epoch: int,
    run_id: str,
    watermark: Mapping[str, int],
    reflects: Mapping[str, int] | None = None,
    costs: Mapping[str, tuple[float, ...]] | None = None,
    layout: str | None = None,
    technique: str | None = None,
) -> str:
    """``layout``: what a helper table's rows mean (a top-N MV's rows table: its query), checked with
    the run before they are trusted (``workers.jobs.fast.top_n``)."""
    body: dict[str, Any] = {"task_id": task_id, "epoch": epoch, "run_id": run_id}
    body["watermark"] = dict(watermark)
    if reflects is not None and dict(reflects) != dict(watermark):
        body["reflects"] = dict(reflects)  # only where it says more than the watermark (an MV of MVs)
    if costs:
        body["costs"] = {technique: list(cost) for technique, cost in costs.items()}
    if layout is not None:
        body["layout"] = layout
    if technique is not None:
        body["technique"] = technique
    return json.dumps({"mvs": body}, sort_keys=True, separators=(",", ":"))


def run_user_metadata(
    request: RunRequest, watermark: Mapping[str, int], layout: str | None = None, technique: str | None = None
) -> str:
    """The ``userMetadata`` of ``request``'s commit (the MV's, or a helper table's with its ``layout``)
    once its result reflects ``watermark``, made by ``technique`` (FAST | COMPLETE)."""
    return encode_user_metadata(
        request.task_id,
        request.epoch,
        request.run_id,
        watermark,
        request.reflects,
        request.costs,
        layout,
        technique,
    )


def decode_user_metadata(user_metadata: str | None, delta_version: int | None = None) -> MvWatermark | None:
    """The ``mvs`` object of a commit's userMetadata, or None when absent or foreign."""
    body = json_object(user_metadata, "mvs")
    if body is None:
        return None
    try:
        return MvWatermark(
            task_id=str(body["task_id"]),
            epoch=int(body["epoch"]),
            run_id=str(body["run_id"]),
            watermark={str(k): int(v) for k, v in dict(body["watermark"]).items()},
            delta_version=delta_version,
            reflects={str(k): int(v) for k, v in dict(body.get("reflects") or body["watermark"]).items()},
            costs=_costs(body.get("costs")),
            technique=body.get("technique") if body.get("technique") in TECHNIQUES else None,
        )
    except (KeyError, TypeError, ValueError):
        return None


def _costs(value: object) -> dict[str, tuple[float, ...]]:
    """The ``costs`` of a commit's metadata: technique → (fixed ms, ms per row[, runs learnt from[,
    runs of the other technique since[, rows of the last run learnt]]]), each finite and not
    negative (older commits: the pair or the triple; the quadruple where the rows are unknown; a
    newer one's further fields are kept, and ignored by ``CostModel.restored``); anything else (a
    foreign or damaged value) is ignored as a whole: costs only inform."""
    if not isinstance(value, dict):
        return {}
    costs: dict[str, tuple[float, ...]] = {}
    for technique, cost in value.items():
        if not (isinstance(cost, list) and len(cost) >= 2):
            return {}
        if not all(isinstance(v, int | float) and not isinstance(v, bool) for v in cost):
            return {}
        numbers = tuple(float(v) for v in cost)
        if not all(0 <= v < math.inf for v in numbers):
            return {}
        costs[str(technique)] = numbers
    return costs


def json_object(text: str | None, key: str) -> dict[str, Any] | None:
    """The object under ``key`` in a JSON userMetadata string (None when absent or not JSON)."""
    if not text:
        return None
    try:
        decoded = json.loads(text)
    except ValueError:
        return None
    body = decoded.get(key) if isinstance(decoded, dict) else None
    return body if isinstance(body, dict) else None
