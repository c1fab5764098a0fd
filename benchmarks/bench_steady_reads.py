"""The reads every reconcile round and every dispatcher tick make when nothing changed.

Each round reads, in its one transaction, the tasks that reached Running since its last read,
the running ones upstream set to Aborting, and how many run (``running_changes``; README, "The
round keeps the running tasks in memory"). Each tick reads the rows upstream inserted, the rows
set to Aborting and the queues whose slot a task holds, and every 30 s the waiting tasks per
queue (``tick_reads``). Each is one statement, a UNION ALL of its parts.

This fills a throwaway MariaDB (or a SQLite file) with ``--running`` running tasks, ``--waiting``
waiting, ``--done`` done ones and an acquiring one per queue, as the scale benchmark's full size
has them, and times each read, the statements it was made of in one transaction (as Falcon made
them before), and each of those alone; every read in a transaction of its own.

Run:  .venv/bin/python benchmarks/bench_steady_reads.py [--db mariadb|sqlite] [--running 1000]
      [--waiting 10000] [--done 10000] [--repeat 50]   (about 20 s)
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Iterable
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
from falcon.adapters.db.orm import JobRow, TaskProgressRow  # noqa: E402
from falcon.adapters.db.session import engine_for, session_scope  # noqa: E402
from falcon.domain.lifecycle import Phase  # noqa: E402
from falcon.domain.status import Reason, Status  # noqa: E402

TOPOLOGIES = ["1x1", "2x2", "2x4", "4x4"]
BATCH = 5_000


def fill(
    url: str, kind: str, count: int, status: Status, phase: Phase, now: datetime, reason: Reason | None = None
) -> None:
    for first in range(0, count, BATCH):
        jobs, progress = [], []
        for i in range(first, min(count, first + BATCH)):
            task_id, cluster, at = f"{kind}-{i:06d}", f"c{i % 5}", now - timedelta(minutes=10)
            jobs.append(
                {"id": task_id, "actor": f"user-{i % 20}", "name": f"job-{i}", "tpu_type": "v6e",
                 "spec": {"topology": "2x2"}, "timeout_seconds": 86400, "status": status.value,
                 "reason": reason.value if reason else None,
                 "cluster_id": cluster, "k8s_job_name": f"falcon-{task_id}", "created_at": at,
                 "updated_at": at, "dispatched_at": at}
            )  # fmt: skip
            progress.append(
                {"task_id": task_id, "phase": phase.value, "cluster_id": cluster,
                 "topology": TOPOLOGIES[i % len(TOPOLOGIES)], "attempt": 1, "updated_at": at,
                 "queued_at": at, "running_at": at if phase is not Phase.WAITING else None}
            )  # fmt: skip
        with session_scope(url) as s:
            s.execute(sa.insert(JobRow), jobs)
            s.execute(sa.insert(TaskProgressRow), progress)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--db", choices=["mariadb", "sqlite"], default="mariadb")
    parser.add_argument("--running", type=int, default=1000)
    parser.add_argument("--waiting", type=int, default=10000)
    parser.add_argument("--done", type=int, default=10000)
    parser.add_argument("--repeat", type=int, default=50)
    args = parser.parse_args()
    now = utc_now()
    since = now - timedelta(seconds=10)  # the last read, less the overlap: nothing new since
    reads = steady_reads(now - timedelta(seconds=10))  # the last read, less the overlap
    with database(args.db) as url:
        upgrade(url)
        fill(url, "run", args.running, Status.RUNNING, Phase.RUNNING, now)
        fill(url, "wait", args.waiting, Status.PENDING, Phase.WAITING, now, Reason.WAITING)
        fill(url, "acq", len(TOPOLOGIES) * 5, Status.PENDING, Phase.ACQUIRING, now, Reason.PROVISIONING)
        fill(url, "done", args.done, Status.SUCCEEDED, Phase.DONE, now)
        if args.db == "mariadb":  # fresh statistics, as the server keeps them for a settled table
            with engine_for(url).begin() as connection:
                connection.execute(sa.text("ANALYZE TABLE job, falcon_task_progress"))
        with session_scope(url) as s:
            changes = repo.running_changes(s, since)
            assert (changes.new, changes.count) == ([], args.running), "nothing new, all counted"
            ticks = repo.tick_reads(s, 500, with_counts=True)
            assert (ticks.new, ticks.aborting, len(ticks.acquiring_queues)) == ([], [], 20), "steady"
            assert sum((ticks.waiting_counts or {}).values()) == args.waiting, "all waiting counted"
        print(f"{args.db}, {args.running} running, {args.waiting} waiting, {args.done} done")
        print(f"ms per read, median / p90 of {args.repeat}")
        for label, (together, parts) in reads.items():
            show(label + " (one statement)", url, together, args.repeat)
            show(
                f"  its {len(parts)} statements in one transaction", url, in_turn(parts.values()), args.repeat
            )
            for part, read in parts.items():
                show(f"    {part}, alone", url, read, args.repeat)


Read = Callable[[Any], object]


def steady_reads(since: datetime) -> dict[str, tuple[Read, dict[str, Read]]]:
    """Each read, as Falcon makes it, and the statements it was made of."""
    running = repo._running(TaskProgressRow.task_id)
    queue = (TaskProgressRow.cluster_id, TaskProgressRow.topology)
    waiting = TaskProgressRow.phase == Phase.WAITING.value
    aborting = JobRow.status == Status.ABORTING.value
    new = (
        sa.select(JobRow)
        .where(JobRow.status == Status.PENDING.value, JobRow.reason.is_(None))
        .order_by(JobRow.created_at, JobRow.id)
        .limit(500)
    )
    tick_parts: dict[str, Read] = {
        "new rows": lambda s: list(s.scalars(new)),
        "set to Aborting": lambda s: s.execute(
            sa.select(JobRow, TaskProgressRow.phase)
            .outerjoin(TaskProgressRow, TaskProgressRow.task_id == JobRow.id)
            .where(aborting)
        ).all(),
        "queues acquiring": lambda s: s.execute(
            sa.select(*queue).where(TaskProgressRow.phase == Phase.ACQUIRING.value).distinct()
        ).all(),
    }
    counts: dict[str, Read] = {
        "waiting per queue": lambda s: s.execute(
            sa.select(*queue, sa.func.count()).where(waiting).group_by(*queue)
        ).all(),
        "waiting set to Aborting per queue": lambda s: s.execute(
            sa.select(*queue, sa.func.count())
            .where(waiting, TaskProgressRow.task_id.in_(sa.select(JobRow.id).where(aborting)))
            .group_by(*queue)
        ).all(),
    }
    return {
        "the round's read": (
            lambda s: repo.running_changes(s, since),
            {
                "new since the last read": lambda s: repo.running_tasks(s, since),
                "set to Aborting": lambda s: list(s.scalars(running.where(aborting))),
                "how many run": lambda s: s.scalar(
                    sa.select(sa.func.count()).select_from(running.subquery())
                ),
            },
        ),
        "the tick's read": (lambda s: repo.tick_reads(s, 500, with_counts=False), tick_parts),
        "the tick's read with the counts": (
            lambda s: repo.tick_reads(s, 500, with_counts=True),
            {**tick_parts, **counts},
        ),
    }


def in_turn(reads: Iterable[Read]) -> Read:
    def read_all(session: Any) -> None:
        for read in reads:
            read(session)

    return read_all


def show(label: str, url: str, read: Read, repeat: int) -> None:
    median, p90 = timed_in_transactions(url, read, repeat)
    print(f"  {label:52s} {median:6.2f} / {p90:6.2f}")


if __name__ == "__main__":
    main()
