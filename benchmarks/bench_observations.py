"""What the reaper's read of its queues' observations costs: every queue at once, or one by one.

A reconcile round prices each idle pool by what its queue was observed doing (arrival gaps,
creation and deletion times; ``repository.queue_observations``). This times that read for every
queue with an idle pool together (three statements, each a union of one index range per queue,
as the round does) against one call per queue (three statements each, as the round did before
2026-12-03 night), on a throwaway MariaDB or a SQLite file filled like the scale benchmark's
steady window: ``--arrivals`` tasks and ``--pools`` ready-then-deleted pools spread over
``--queues`` queues. Both ways must answer the same, which is checked first.

Run:  .venv/bin/python benchmarks/bench_observations.py [--db mariadb|sqlite] [--queues 20]
      [--arrivals 4400] [--pools 450] [--repeat 50] [--rounds 2]   (about 20 s)
"""

from __future__ import annotations

import argparse
import sys
from datetime import timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "benchmarks")]  # read_timing.py

from read_timing import database, timed  # noqa: E402

from falcon.adapters.clock import utc_now  # noqa: E402
from falcon.adapters.db import repository as repo  # noqa: E402
from falcon.adapters.db.migrate import upgrade  # noqa: E402
from falcon.adapters.db.orm import NodePoolRow, TaskProgressRow  # noqa: E402
from falcon.adapters.db.session import session_scope  # noqa: E402
from falcon.domain.model import QueueKey  # noqa: E402
from falcon.services.release import OBSERVED_CREATIONS, OBSERVED_GAPS  # noqa: E402

TOPOLOGIES = ["1x1", "2x2", "2x4", "4x4"]


def fill(url: str, queues: list[QueueKey], arrivals: int, pools: int) -> None:
    now = utc_now()
    with session_scope(url) as s:
        for i in range(arrivals):
            q = queues[i % len(queues)]
            at = now - timedelta(seconds=i)
            s.add(
                TaskProgressRow(
                    task_id=f"t{i:06d}", phase="done", cluster_id=q.cluster_id, topology=q.topology,
                    attempt=0, updated_at=at, queued_at=at,
                )
            )  # fmt: skip
        for i in range(pools):
            q, ready = queues[i % len(queues)], now - timedelta(seconds=i)
            s.add(
                NodePoolRow(
                    cluster_id=q.cluster_id, name=f"falcon-pool-{i:05d}", topology=q.topology,
                    machine_type="ct6e-standard-4t", mode="flex_start", state="deleted",
                    created_at=ready - timedelta(seconds=30), ready_at=ready, deleting_at=ready,
                    deleted_at=now, updated_at=now,
                )
            )  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--db", choices=["mariadb", "sqlite"], default="mariadb")
    parser.add_argument("--queues", type=int, default=20)
    parser.add_argument("--arrivals", type=int, default=4400)
    parser.add_argument("--pools", type=int, default=450)
    parser.add_argument("--repeat", type=int, default=50)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    queues = [
        QueueKey(f"c{n // len(TOPOLOGIES)}", TOPOLOGIES[n % len(TOPOLOGIES)]) for n in range(args.queues)
    ]
    with database(args.db) as url:
        upgrade(url)
        fill(url, queues, args.arrivals, args.pools)

        def together() -> object:
            with session_scope(url) as s:
                return repo.queue_observations(s, queues, OBSERVED_GAPS, OBSERVED_CREATIONS)

        def one_by_one() -> object:
            seen = {}
            for q in queues:
                with session_scope(url) as s:
                    seen.update(repo.queue_observations(s, [q], OBSERVED_GAPS, OBSERVED_CREATIONS))
            return seen

        assert together() == one_by_one(), "the two ways must answer the same"
        print(f"{args.db}, {args.queues} queues, {args.arrivals} arrivals, {args.pools} pools; ms per read")
        for round_ in range(1, args.rounds + 1):
            for label, read in (("together", together), ("one by one", one_by_one)):
                median, p90 = timed(read, args.repeat)
                print(f"  round {round_}  {label:10s}  median {median:6.1f}  p90 {p90:6.1f}")


if __name__ == "__main__":
    main()
