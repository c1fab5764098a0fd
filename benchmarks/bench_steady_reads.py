"""The reads every reconcile round and every dispatcher tick make when nothing changed.

Each round reads the tasks that reached Running since its last read, the running ones upstream
set to Aborting and how many run (README, "The round keeps the running tasks in memory"), the
acquiring and releasing tasks' progress rows with the takers without a pool among them, and the
pools it reaps and warms (``round_reads``), with the share of the running tasks it reads again
(``RunningBook``); every running task at start and after a drift. Each tick reads the rows
upstream inserted, the rows set to Aborting and the queues whose slot a task holds, and every
30 s the waiting tasks per queue (``tick_reads``). Each is one statement, a UNION ALL of its
parts, read outside a transaction (``read_scope``: the statement is its only round trip), its
statement built once.

This fills a throwaway MariaDB (or a SQLite file) with ``--running`` running tasks, ``--waiting``
waiting, ``--done`` done ones, an acquiring one per queue and an idle pool per queue, as the
scale benchmark's full size has them, and times each read as Falcon makes it, the same with its
statement built anew, the same statement in a transaction, the statements it was made of in one
transaction (as Falcon made them before), and each of those alone in a transaction of its own.

``--busy-threads N`` runs N threads that only compute beside the reads, as the dispatcher's
process has its lifecycle steps, watches and loops: a round trip then waits for the interpreter
lock when it answers, up to the switch interval (the dispatcher's 1 ms, as here, or Python's
5 ms with ``--switch-interval 0.005``), so the reads' time is mostly their number of round trips.

Run:  .venv/bin/python benchmarks/bench_steady_reads.py [--db mariadb|sqlite] [--running 1000]
      [--waiting 10000] [--done 10000] [--repeat 50] [--busy-threads 0]
      [--switch-interval 0.001]   (about 30 s)
"""

from __future__ import annotations

import argparse
import sys
import threading
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import sqlalchemy as sa

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "benchmarks")]  # read_timing.py

from read_timing import database, timed_in_reads, timed_in_transactions  # noqa: E402

from falcon.adapters.clock import utc_now  # noqa: E402
from falcon.adapters.db import repository as repo  # noqa: E402
from falcon.adapters.db.migrate import upgrade  # noqa: E402
from falcon.adapters.db.orm import JobRow, NodePoolRow, TaskProgressRow  # noqa: E402
from falcon.adapters.db.session import engine_for, session_scope  # noqa: E402
from falcon.adapters.interpreter_lock import DISPATCHER_SWITCH_INTERVAL, lock_handed_over_every  # noqa: E402
from falcon.domain.lifecycle import NodePool, Phase, PoolState  # noqa: E402
from falcon.domain.model import ProvisioningMode, RunningRead  # noqa: E402
from falcon.domain.status import Reason, Status  # noqa: E402
from falcon.services.dispatching import ROUND_POOL_STATES  # noqa: E402
from falcon.services.reconcile import SUPERVISED  # noqa: E402
from falcon.services.running_book import recheck_share  # noqa: E402

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


def idle_pools(url: str, now: datetime) -> None:
    """An idle pool per queue, as a drain keeps them between two of a queue's tasks."""
    with session_scope(url) as s:
        for i, topology in enumerate(TOPOLOGIES * 5):
            cluster, name = f"c{i % 5}", f"falcon-idle-{i}"
            mode = ProvisioningMode.FLEX_START
            kept = NodePool(cluster, name, topology, "ct6e-standard-4t", mode, None, PoolState.IN_USE, "h")
            repo.write_ahead_pool(s, kept, now)
            s.flush()
            assert repo.keep_pool(s, cluster, name, "h", now)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--db", choices=["mariadb", "sqlite"], default="mariadb")
    parser.add_argument("--running", type=int, default=1000)
    parser.add_argument("--waiting", type=int, default=10000)
    parser.add_argument("--done", type=int, default=10000)
    parser.add_argument("--repeat", type=int, default=50)
    parser.add_argument("--busy-threads", type=int, default=0)
    parser.add_argument("--switch-interval", type=float, default=DISPATCHER_SWITCH_INTERVAL)
    args = parser.parse_args()
    now = utc_now()
    since = now - timedelta(seconds=10)  # the last read, less the overlap: nothing new since
    share = recheck_share(args.running)  # the book's tasks a round reads again
    asked = RunningRead(since, tuple(f"run-{i:06d}" for i in range(share)))
    reads = steady_reads(asked)
    with database(args.db) as url:
        upgrade(url)
        fill(url, "run", args.running, Status.RUNNING, Phase.RUNNING, now)
        fill(url, "wait", args.waiting, Status.PENDING, Phase.WAITING, now, Reason.WAITING)
        fill(url, "acq", len(TOPOLOGIES) * 5, Status.PENDING, Phase.ACQUIRING, now, Reason.PROVISIONING)
        fill(url, "done", args.done, Status.SUCCEEDED, Phase.DONE, now)
        idle_pools(url, now)
        if args.db == "mariadb":  # fresh statistics, as the server keeps them for a settled table
            with engine_for(url).begin() as connection:
                connection.execute(sa.text("ANALYZE TABLE job, falcon_task_progress, falcon_node_pool"))
        with session_scope(url) as s:
            round_read = repo.round_reads(s, asked, SUPERVISED, ROUND_POOL_STATES)
            steady = (round_read.running.new, round_read.running.count, len(round_read.supervised))
            assert steady == ([], args.running, 20), "nothing new, all counted, one acquiring per queue"
            assert len(round_read.running.rechecked) == share, "the share read again"
            assert len(round_read.pools) == 20, "an idle pool per queue"
            ticks = repo.tick_reads(s, 500, with_counts=True)
            assert (ticks.new, ticks.aborting, len(ticks.acquiring_queues)) == ([], [], 20), "steady"
            assert sum((ticks.waiting_counts or {}).values()) == args.waiting, "all waiting counted"
        print(f"{args.db}, {args.running} running, {args.waiting} waiting, {args.done} done, 20 idle pools")
        beside = f"{args.busy_threads} busy threads beside, switch interval {args.switch_interval * 1e3:g} ms"
        print(f"ms per read, median / p90 of {args.repeat}, {beside}")
        with lock_handed_over_every(args.switch_interval), busy(args.busy_threads):
            for label, (together, parts) in reads.items():
                outside = timed_in_reads(url, together, args.repeat)
                show(f"{label} (one statement, outside a transaction)", outside)
                show("  the same, its statement built anew", timed_in_reads(url, anew(together), args.repeat))
                show("  the same in a transaction", timed_in_transactions(url, together, args.repeat))
                made_of = f"  its {len(parts)} statement{'s' if len(parts) > 1 else ''} in one transaction"
                show(made_of, timed_in_transactions(url, in_turn(parts.values()), args.repeat))
                for part, read in parts.items():
                    show(f"    {part}, alone", timed_in_transactions(url, read, args.repeat))


Read = Callable[[Any], object]


def anew(read: Read) -> Read:
    """``read`` with its statement built for it, as every read was before the repository kept
    the round's and the tick's statements (``_round_statement``, ``_tick_statement``)."""

    def built_anew(session: Any) -> object:
        repo._round_statement.cache_clear()
        repo._tick_statement.cache_clear()
        return read(session)

    return built_anew


def steady_reads(asked: RunningRead) -> dict[str, tuple[Read, dict[str, Read]]]:
    """Each read, as Falcon makes it, and the statements it was made of."""
    since = asked.since
    queue = (TaskProgressRow.cluster_id, TaskProgressRow.topology)
    waiting = TaskProgressRow.phase == Phase.WAITING.value
    aborting = JobRow.status == Status.ABORTING.value
    ready = sa.exists().where(
        NodePoolRow.holder_task_id == TaskProgressRow.task_id, NodePoolRow.state == PoolState.IN_USE.value
    )
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
            lambda s: repo.round_reads(s, asked, SUPERVISED, ROUND_POOL_STATES),
            {
                "running since the last read, Aborting, how many": lambda s: s.execute(
                    sa.union_all(
                        repo._of_running(sa.select(*repo._RUNNING_COLUMNS, sa.literal(0))).where(
                            TaskProgressRow.running_at >= since
                        ),
                        repo._of_running(sa.select(*repo._RUNNING_COLUMNS, sa.literal(0))).where(aborting),
                        repo._of_running(
                            sa.select(*(sa.null() for _ in repo._RUNNING_COLUMNS), sa.func.count())
                        ),
                    )
                ).all(),
                "supervised progress, with the takers": lambda s: s.execute(
                    sa.select(*repo._PROGRESS_COLUMNS, ready).where(
                        TaskProgressRow.phase.in_([p.value for p in SUPERVISED])
                    )
                ).all(),
                "pools": lambda s: repo.pools_in(s, ROUND_POOL_STATES),
            },
        ),
        "the round's read of every running task (at start, after a drift)": (
            lambda s: repo.round_reads(s, RunningRead(None), SUPERVISED, ROUND_POOL_STATES),
            {"every running task": repo.running_tasks},
        ),
        "the tick's read": (lambda s: repo.tick_reads(s, 500, with_counts=False), tick_parts),
        "the tick's read with the counts": (
            lambda s: repo.tick_reads(s, 500, with_counts=True),
            {**tick_parts, **counts},
        ),
    }


@contextmanager
def busy(threads: int) -> Iterator[None]:
    """``threads`` threads that only compute, until the block ends."""
    done = threading.Event()

    def compute() -> None:
        while not done.is_set():
            sum(range(1000))

    workers = [threading.Thread(target=compute, daemon=True) for _ in range(threads)]
    for worker in workers:
        worker.start()
    try:
        yield
    finally:
        done.set()
        for worker in workers:
            worker.join()


def in_turn(reads: Iterable[Read]) -> Read:
    def read_all(session: Any) -> None:
        for read in reads:
            read(session)

    return read_all


def show(label: str, times: tuple[float, float]) -> None:
    print(f"  {label:60s} {times[0]:6.2f} / {times[1]:6.2f}")


if __name__ == "__main__":
    main()
