"""How long each node-pool operation waited for its cluster: GKE runs a quota of them side by side
(``--gke-operations``), or on a stricter cluster one at a time.

A creation's wait runs from Falcon's write-ahead record of the pool to the start of GKE's create
operation (the deletions that went first, GKE's busy refusals, the create call itself); a
deletion's from the pool's mark to the start of GKE's delete operation. The replay reads GKE's
operations (``operations.list``, their ``startTime``) and Falcon's pool records after each arm,
so the table can say how much of the start goes to waiting for the cluster rather than infer
it from timelines.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime


@dataclass(frozen=True)
class Recorded:
    """A pool as Falcon's records have it: when it was recorded, and marked for deletion."""

    created_at: datetime
    deleting_at: datetime | None


@dataclass
class OperationWaits:
    """Seconds (wall, i.e. emulated) each GKE operation of one replay waited."""

    creations: list[float] = field(default_factory=list)
    deletions: list[float] = field(default_factory=list)


def operation_waits(
    operations: Iterable[Mapping[str, object]], pools: Mapping[str, Recorded]
) -> OperationWaits:
    """Each create or delete operation GKE began on a pool Falcon recorded, with its wait.

    ``operations``: GKE's Operation resources (``operationType``, ``targetLink`` ending in the
    pool's name, ``startTime``); ``pools``: Falcon's records by pool name (unique in a replay:
    named after its task). An operation on a pool with no record, or a deletion of a pool never
    marked, is left out."""
    waits = OperationWaits()
    for op in operations:
        name = str(op["targetLink"]).rsplit("/", 1)[-1]
        started = _utc(str(op["startTime"]))
        record = pools.get(name)
        if record is None:
            continue
        if op["operationType"] == "CREATE_NODE_POOL":
            waits.creations.append((started - _naive_utc(record.created_at)).total_seconds())
        elif op["operationType"] == "DELETE_NODE_POOL" and record.deleting_at is not None:
            waits.deletions.append((started - _naive_utc(record.deleting_at)).total_seconds())
    return waits


def _utc(rfc3339: str) -> datetime:
    return _naive_utc(datetime.fromisoformat(rfc3339.replace("Z", "+00:00")))


def _naive_utc(at: datetime) -> datetime:
    """Naive UTC: SQLite hands Falcon's timestamps back without their zone."""
    return at.astimezone(UTC).replace(tzinfo=None) if at.tzinfo else at
