"""Pickup latency with the stack as `falcon local` runs it (issue 10: "Pickup, tighter").

Target: row inserted -> Pending/Waiting with its position Message, p50 <= 0.5 s and p99 <= 1 s
at 10 inserts/s over a few hundred rows, on SQLite and MariaDB.

The stack is started by benchmarks/local_stack.py as `falcon demo` starts it (a throwaway Prefect
server, the emulator, the demo clusters, the `falcon local` child serving Falcon's deployments).
Database: SQLite under a temporary FALCON_HOME in /tmp (the `falcon local` default), or
`--db mariadb` for a throwaway MariaDB (benchmarks/mysql_server.py).

After a warm-up row shows the dispatcher is ticking, N rows (default 300) are inserted at a steady
rate (default 10/s), alternating over 2 topologies (intake spreads them over the 2 clusters), from
4 actors drawn at random with weights 4:3:2:1; every task runs 600 s in the emulator, so each of
the 4 queues is held by its first task and the rest really sit in Waiting.

Latency of a row = first time a poller thread (a separate connection, every 20 ms) sees the row
with a non-NULL reason AND a non-empty message (Waiting with its position, or already
Provisioning if it was picked in the same tick) minus the time its INSERT's commit returned,
both on this process's monotonic clock. The row's own updated_at is not used: later ticks
rewrite it whenever the position Message changes, so it does not keep the first moment.
Resolution: the 20 ms poll period plus one poll query.

Run:  .venv/bin/python benchmarks/bench_pickup_latency.py [--count 300] [--rate 10] [--db sqlite|mariadb]
"""

from __future__ import annotations

import argparse
import random
import re
import statistics
import time
from collections.abc import Hashable

import sqlalchemy as sa
from local_stack import POLL_SECONDS, Poller, Seen, insert, local_stack, percentile, run_main, wait_for

from falcon.adapters.db import repository as repo
from falcon.adapters.db.orm import JobRow
from falcon.adapters.db.session import session_scope
from falcon.domain.model import QueueKey
from falcon.domain.scheduling import WaitingTask, waiting_messages
from falcon.domain.status import Reason, Status
from falcon.settings import get_settings

TOPOLOGIES = ["2x2", "2x4"]
ACTORS = ["alice", "bob", "carol", "dave"]
ACTOR_WEIGHTS = [4, 3, 2, 1]  # uneven, and independent of the topology: every queue mixes actors
RUN_SECONDS = 600  # every queue stays held by its first task, so the rest really wait
TARGET_P50, TARGET_P99 = 0.5, 1.0
PREFIX = "pickup-"
PICKED = "picked up"  # the poller's query: rows with a reason and a Message


def picked_up_query() -> sa.Select[tuple[str, str, str]]:
    job = JobRow.__table__
    return sa.select(job.c.id, job.c.reason, job.c.message).where(
        job.c.id.like(f"{PREFIX}%"), job.c.reason.is_not(None), job.c.message != ""
    )


# --- checks and report --------------------------------------------------------------------------


def check_positions(url: str, attempts: int = 5) -> tuple[bool, str]:
    """Stored Messages equal what the pick rule gives for one snapshot, and positions are 1..k.

    Read in one transaction; the dispatcher may rewrite between reads, so a mismatch is retried.
    """
    detail = ""
    for _ in range(attempts):
        with session_scope(url) as session:
            waiting: dict[QueueKey, list[WaitingTask]] = {}
            for row in repo.waiting_rows(session):
                waiting.setdefault(row.queue, []).append(row.task)
            last = repo.last_actors(session)
            stored = dict(
                session.execute(
                    sa.select(JobRow.id, JobRow.message).where(
                        JobRow.status == Status.PENDING.value, JobRow.reason == Reason.WAITING.value
                    )
                ).all()
            )
        lines, ok = [], True
        for queue, tasks in sorted(waiting.items(), key=lambda kv: (kv[0].cluster_id, kv[0].topology)):
            expected = waiting_messages(tasks, last.get(queue), get_settings().message_locale)
            wrong = [t for t, m in expected.items() if stored.get(t) != m]
            positions = sorted(p for t in expected if (p := _position(stored.get(t))) is not None)
            contiguous = positions == list(range(1, len(tasks) + 1))
            ok = ok and not wrong and contiguous
            by_pos = sorted(expected, key=lambda t: _position(expected[t]) or 0)
            sample = [f"      {t}: {stored.get(t)}" for t in (*by_pos[:3], *by_pos[-1:])]
            lines.append(
                f"    queue {queue.cluster_id[-1]}/{queue.topology}: {len(tasks)} waiting, last pick "
                f"{last.get(queue)}, positions 1..{len(tasks)} {'contiguous' if contiguous else 'BROKEN'}, "
                f"{len(wrong)} message(s) differ from the pick rule"
            )
            lines += sample
        detail = "\n".join(lines)
        if ok:
            return True, detail
        time.sleep(0.3)
    return False, detail


def _position(message: str | None) -> int | None:
    """The queue position a Waiting Message names ("#3"), if any."""
    found = re.search(r"#(\d+)", message or "")
    return int(found.group(1)) if found else None


def report(latencies: dict[str, float], seen: dict[Hashable, Seen], cold: float, poller: Poller) -> bool:
    values = list(latencies.values())
    p50, p90, p99 = (percentile(values, q) for q in (50, 90, 99))
    first_reasons: dict[str, int] = {}
    for task_id in latencies:
        reason = seen[task_id].values[0]
        first_reasons[reason] = first_reasons.get(reason, 0) + 1
    print(f"\ncold start (falcon local launched -> warm-up row picked up): {cold:.1f} s")
    print(
        f"poller: {poller.polls} polls, median query {statistics.median(poller.poll_seconds) * 1e3:.1f} ms, "
        f"period {POLL_SECONDS * 1e3:.0f} ms"
    )
    print(f"first state seen: {', '.join(f'{k}={v}' for k, v in sorted(first_reasons.items()))}\n")
    print(f"{'rows':>5} {'p50 s':>7} {'p90 s':>7} {'p99 s':>7} {'max s':>7} {'mean s':>7}   target")
    ok = p50 <= TARGET_P50 and p99 <= TARGET_P99
    print(
        f"{len(values):>5} {p50:>7.3f} {p90:>7.3f} {p99:>7.3f} {max(values):>7.3f} "
        f"{statistics.fmean(values):>7.3f}   p50<={TARGET_P50:g}s p99<={TARGET_P99:g}s: "
        f"{'OK' if ok else 'MISS'}"
    )
    buckets = [0.25, 0.5, 0.75, 1.0, 1.5, 2.0, 3.0]
    counts = [sum(1 for v in values if v <= b) for b in buckets]
    print(
        "cumulative: "
        + "  ".join(f"<={b}s {c / len(values):.0%}" for b, c in zip(buckets, counts, strict=True))
    )
    return ok


# --- main ---------------------------------------------------------------------------------------


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--count", type=int, default=300, help="rows to insert (default %(default)s)")
    parser.add_argument("--rate", type=float, default=10.0, help="inserts per second (default %(default)s)")
    parser.add_argument("--db", choices=["sqlite", "mariadb"], default="sqlite")
    parser.add_argument(
        "--prefect-db",
        choices=["sqlite", "postgres"],
        default="sqlite",
        help="the Prefect server's own database (default %(default)s, as `falcon local` runs it)",
    )
    parser.add_argument(
        "--keep-home", action="store_true", help="keep the temporary FALCON_HOME for its logs"
    )
    args = parser.parse_args()
    with local_stack(args.db, "falcon-pickup-", args.keep_home, prefect_db=args.prefect_db) as stack:
        url, runner = stack.url, stack.runner
        poller = Poller(url, {PICKED: picked_up_query()})
        poller.start()
        try:
            warm = f"{PREFIX}warmup"
            insert(url, warm, "warmup", "4x4", RUN_SECONDS)
            wait_for(poller, PICKED, warm, runner, 180)
            cold = time.monotonic() - stack.launched
            print(
                f"dispatcher ticking after {cold:.1f}s; inserting {args.count} rows at {args.rate}/s",
                flush=True,
            )
            committed: dict[str, float] = {}
            rng = random.Random(20261129)
            t0 = time.monotonic()
            for i in range(args.count):
                time.sleep(max(0.0, t0 + i / args.rate - time.monotonic()))
                task_id = f"{PREFIX}{i:04d}"
                actor = rng.choices(ACTORS, ACTOR_WEIGHTS)[0]
                committed[task_id] = insert(url, task_id, actor, TOPOLOGIES[i % 2], RUN_SECONDS)
            late = time.monotonic() - t0 - (args.count - 1) / args.rate
            for task_id in committed:
                wait_for(poller, PICKED, task_id, runner, 30)
        finally:
            poller.stop()
        seen = poller.snapshot(PICKED)
        latencies = {t: seen[t].at - c for t, c in committed.items()}
        if late > 1:
            print(f"note: the insert loop fell {late:.1f}s behind its schedule")
        ok = report(latencies, seen, cold, poller)
        slowest = sorted(latencies, key=latencies.__getitem__)[-3:]
        print("slowest: " + ", ".join(f"{t} {latencies[t]:.2f}s" for t in slowest))

        positions_ok, detail = check_positions(url)
        print(f"\nposition messages ({'consistent with the pick rule' if positions_ok else 'MISMATCH'}):")
        print(detail)
        with session_scope(url) as session:
            statuses = session.execute(
                sa.select(JobRow.status, JobRow.reason, sa.func.count())
                .where(JobRow.id.like(f"{PREFIX}%"))
                .group_by(JobRow.status, JobRow.reason)
            ).all()
        print("rows now: " + ", ".join(f"{s}/{r or '-'}={n}" for s, r, n in statuses))
    return 0 if ok and positions_ok else 1


if __name__ == "__main__":
    run_main(main)
