"""The reconcile round's read of what changed among the running tasks (``running_changes``).

Each round reads, in its one transaction, the tasks that reached Running since its last read,
the running ones upstream set to Aborting, and how many run (README, "The round keeps the
running tasks in memory"). This fills a throwaway MariaDB (or a SQLite file) with ``--running``
running tasks, ``--waiting`` waiting and ``--done`` done ones, as the scale benchmark's full
size has them, and times that read when nothing changed (the steady round) and each of its three
statements apart, each in a transaction of its own (the round reads them as one).

Run:  .venv/bin/python benchmarks/bench_running_reads.py [--db mariadb|sqlite] [--running 1000]
      [--waiting 10000] [--done 10000] [--repeat 50]   (about 15 s)
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
from falcon.adapters.db.orm import JobRow, TaskProgressRow  # noqa: E402
from falcon.adapters.db.session import engine_for, session_scope  # noqa: E402
from falcon.domain.lifecycle import Phase  # noqa: E402
from falcon.domain.status import Status  # noqa: E402

TOPOLOGIES = ["1x1", "2x2", "2x4", "4x4"]
BATCH = 5_000


def fill(url: str, kind: str, count: int, status: Status, phase: Phase, now: datetime) -> None:
    for first in range(0, count, BATCH):
        jobs, progress = [], []
        for i in range(first, min(count, first + BATCH)):
            task_id, cluster, at = f"{kind}-{i:06d}", f"c{i % 5}", now - timedelta(minutes=10)
            jobs.append(
                {"id": task_id, "actor": f"user-{i % 20}", "name": f"job-{i}", "tpu_type": "v6e",
                 "spec": {"topology": "2x2"}, "timeout_seconds": 86400, "status": status.value,
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
    running = repo._running(TaskProgressRow.task_id)  # the parts of the round's one statement, apart
    reads: dict[str, Callable[[Any], object]] = {
        "the round's read (one statement)": lambda s: repo.running_changes(s, since),
        "  new since the last read": lambda s: repo.running_tasks(s, since),
        "  set to Aborting": lambda s: list(s.scalars(running.where(JobRow.status == Status.ABORTING.value))),
        "  how many run": lambda s: s.scalar(sa.select(sa.func.count()).select_from(running.subquery())),
    }
    with database(args.db) as url:
        upgrade(url)
        fill(url, "run", args.running, Status.RUNNING, Phase.RUNNING, now)
        fill(url, "wait", args.waiting, Status.PENDING, Phase.WAITING, now)
        fill(url, "done", args.done, Status.SUCCEEDED, Phase.DONE, now)
        if args.db == "mariadb":  # fresh statistics, as the server keeps them for a settled table
            with engine_for(url).begin() as connection:
                connection.execute(sa.text("ANALYZE TABLE job, falcon_task_progress"))
        with session_scope(url) as s:
            changes = repo.running_changes(s, since)
            assert (changes.new, changes.count) == ([], args.running), "nothing new, all counted"
        print(f"{args.db}, {args.running} running, {args.waiting} waiting, {args.done} done")
        print(f"ms per read, median / p90 of {args.repeat}")
        for label, read in reads.items():
            median, p90 = timed_in_transactions(url, read, args.repeat)
            print(f"  {label:34s} {median:6.2f} / {p90:6.2f}")


if __name__ == "__main__":
    main()
