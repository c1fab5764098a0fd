"""The reads of Falcon's node-pool table as its history grows.

Every pool Falcon ever created keeps its row (``falcon_node_pools``: the write-ahead record,
and the creation and deletion times the keeping policy learns from), so the table only grows:
about 1 100 rows after one full-size scale run, tens of thousands a month in production. The
reads made all the time must not grow with it. This fills a throwaway MariaDB (or a SQLite file)
with ``--history`` deleted pools over 20 queues, plus what is live: an idle pool and an
acquiring task in each queue, half of those tasks holding a pool in use, and ``--running``
pools in use by running tasks, as at the scale benchmark's full size. Then it times, per
history size:

  pools_in            the idle, creating and deleting pools (every reconcile round)
  takers_without_pool the acquiring tasks with no ready pool, per queue (every reconcile round)
  held_pool           the pool one task holds (each acquiring task's polls, every release)
  on_reservation      a cluster's live pools on its reservation (each provisioning)
  observations        the 20 queues' history the reaper prices idle pools from

Run:  .venv/bin/python benchmarks/bench_pool_history.py [--db mariadb|sqlite]
      [--history 1000,10000,100000] [--running 1000] [--repeat 30]   (about 20 s)
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import sqlalchemy as sa

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "benchmarks")]  # read_timing.py

from read_timing import database, timed_in_transactions  # noqa: E402

from falcon.adapters.clock import utc_now  # noqa: E402
from falcon.adapters.db import repository as repo  # noqa: E402
from falcon.adapters.db.migrate import upgrade  # noqa: E402
from falcon.adapters.db.orm import NodePoolRow, TaskProgressRow  # noqa: E402
from falcon.adapters.db.session import engine_for, session_scope  # noqa: E402
from falcon.domain.lifecycle import PoolState  # noqa: E402
from falcon.domain.model import QueueKey  # noqa: E402
from falcon.services.release import OBSERVED_CREATIONS, OBSERVED_GAPS  # noqa: E402

TOPOLOGIES = ["1x1", "2x2", "2x4", "4x4"]
QUEUES = [QueueKey(f"c{n // len(TOPOLOGIES)}", TOPOLOGIES[n % len(TOPOLOGIES)]) for n in range(20)]
BATCH = 5_000


def _pool(n: int, queue: QueueKey, state: PoolState, at: datetime, **values: Any) -> dict[str, Any]:
    ready = at - timedelta(seconds=n % 600)
    return {
        "cluster_id": queue.cluster_id, "name": f"falcon-{queue.topology}-{n:08d}",
        "topology": queue.topology, "machine_type": "ct6e-standard-4t", "mode": "reservation",
        "reservation": "res", "state": state.value, "created_at": ready - timedelta(seconds=40),
        "ready_at": ready, "updated_at": at, **values,
    }  # fmt: skip


def fill_live(url: str, now: datetime, running: int) -> None:
    """An idle pool and an acquiring task per queue, the even-numbered tasks holding a pool in
    use, and ``running`` pools in use by running tasks."""
    pools, tasks = [], []
    for n in range(running):
        pools.append(
            _pool(1_000 + n, QUEUES[n % len(QUEUES)], PoolState.IN_USE, now, holder_task_id=f"run-{n}")
        )
    for i, q in enumerate(QUEUES):
        pools.append(_pool(i, q, PoolState.IDLE, now, idle_since=now))
        if i % 2 == 0:
            pools.append(_pool(100 + i, q, PoolState.IN_USE, now, holder_task_id=f"acq-{i:02d}"))
        tasks.append(
            {"task_id": f"acq-{i:02d}", "phase": "acquiring", "cluster_id": q.cluster_id,
             "topology": q.topology, "attempt": 1, "updated_at": now, "queued_at": now}
        )  # fmt: skip
    with session_scope(url) as s:
        s.execute(sa.insert(NodePoolRow), pools)
        s.execute(sa.insert(TaskProgressRow), tasks)


def fill_history(url: str, start: int, end: int, now: datetime) -> None:
    """Deleted pools ``start`` .. ``end`` - 1, newest first, spread over the queues."""
    for first in range(start, end, BATCH):
        rows = []
        for n in range(first, min(end, first + BATCH)):
            gone = now - timedelta(minutes=n)
            rows.append(
                _pool(10_000_000 + n, QUEUES[n % len(QUEUES)], PoolState.DELETED, gone, deleting_at=gone,
                      deleted_at=gone + timedelta(seconds=90))
            )  # fmt: skip
        with session_scope(url) as s:
            s.execute(sa.insert(NodePoolRow), rows)


READS: dict[str, Callable[[Any], object]] = {
    "pools_in": lambda s: repo.pools_in(s, [PoolState.CREATING, PoolState.IDLE, PoolState.DELETING]),
    "takers_without_pool": repo.takers_without_pool,
    "held_pool": lambda s: repo.held_pool(s, QUEUES[2].cluster_id, "acq-02"),
    "on_reservation": lambda s: repo.pools_on_reservation(s, QUEUES[0].cluster_id, "res"),
    "observations": lambda s: repo.queue_observations(s, QUEUES, OBSERVED_GAPS, OBSERVED_CREATIONS),
}


def check(url: str) -> None:
    """The reads answer what the fill put there."""
    with session_scope(url) as s:
        assert len(repo.pools_in(s, [PoolState.CREATING, PoolState.IDLE, PoolState.DELETING])) == len(QUEUES)
        assert sum(repo.takers_without_pool(s).values()) == len(QUEUES) // 2
        held = repo.held_pool(s, QUEUES[2].cluster_id, "acq-02")
        assert held is not None and held.state is PoolState.IN_USE


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--db", choices=["mariadb", "sqlite"], default="mariadb")
    parser.add_argument("--history", default="1000,10000,100000")
    parser.add_argument("--running", type=int, default=1000)
    parser.add_argument("--repeat", type=int, default=30)
    args = parser.parse_args()
    sizes = sorted(int(n) for n in args.history.split(","))
    now = utc_now()
    with database(args.db) as url:
        upgrade(url)
        fill_live(url, now, args.running)
        print(f"{args.db}, {args.running} pools in use; ms per read, median / p90 of {args.repeat}")
        print(f"{'history':>8}  " + "  ".join(f"{name:>19}" for name in READS))
        filled = 0
        for size in sizes:
            fill_history(url, filled, size, now)
            filled = size
            if args.db == "mariadb":  # fresh statistics, as the server keeps them for a settled table
                with engine_for(url).begin() as connection:
                    connection.execute(sa.text("ANALYZE TABLE falcon_node_pools, falcon_task_progress"))
            check(url)
            cells = [timed_in_transactions(url, read, args.repeat) for read in READS.values()]
            print(f"{size:>8}  " + "  ".join(f"{m:>10.2f} / {p:>6.2f}" for m, p in cells))


if __name__ == "__main__":
    main()
