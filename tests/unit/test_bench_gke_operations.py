"""The replay's operation waits: each GKE create or delete operation against Falcon's record of
its pool, by name; operations on pools without a record, and deletions of pools never marked,
left out; GKE's zoned timestamps against the records' naive UTC ones."""

from __future__ import annotations

import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

from gke_operations import Recorded, operation_waits

T0 = datetime(2026, 12, 7, 12, 0, 0)
LINK = "https://container.googleapis.com/v1/projects/p/locations/l/clusters/edge-a/nodePools/"


def op(kind: str, pool: str, started: datetime) -> dict[str, object]:
    return {
        "operationType": kind,
        "targetLink": LINK + pool,
        "startTime": started.replace(tzinfo=UTC).isoformat().replace("+00:00", "Z"),
    }


def test_each_operation_waits_from_the_pools_record_or_mark_to_its_start() -> None:
    pools = {
        "falcon-a": Recorded(T0, T0 + timedelta(seconds=30)),
        "falcon-b": Recorded(T0 + timedelta(seconds=1), None),
        "falcon-zoned": Recorded(T0.replace(tzinfo=UTC), None),
    }
    waits = operation_waits(
        [
            op("CREATE_NODE_POOL", "falcon-a", T0 + timedelta(seconds=2.5)),
            op("DELETE_NODE_POOL", "falcon-a", T0 + timedelta(seconds=34)),
            op("CREATE_NODE_POOL", "falcon-b", T0 + timedelta(seconds=1)),
            op("DELETE_NODE_POOL", "falcon-b", T0 + timedelta(seconds=9)),  # never marked: left out
            op("CREATE_NODE_POOL", "falcon-zoned", T0 + timedelta(seconds=4)),
            op("CREATE_NODE_POOL", "someone-elses", T0),  # no record: left out
            op("UPGRADE_NODES", "falcon-a", T0),  # not a creation or a deletion
        ],
        pools,
    )
    assert waits.creations == [2.5, 0.0, 4.0]
    assert waits.deletions == [4.0]


def test_no_operations_no_waits() -> None:
    waits = operation_waits([], {"falcon-a": Recorded(T0, None)})
    assert (waits.creations, waits.deletions) == ([], [])
