"""Pickup latency with the stack as `falcon local` runs it (issue requirement (c)).

Target: row inserted -> Pending/Waiting with its position Message, p50 <= 1 s and p99 <= 3 s.

The stack is started as `falcon demo` starts it (src/falcon/local.py): a throwaway Prefect server,
the emulator (in this process, on a thread), the two demo clusters registered, then the
`falcon local` subprocess serving the dispatcher, lifecycle and release deployments. Database:
SQLite under a temporary FALCON_HOME in /tmp (the `falcon local` default), or `--db mariadb` for
a throwaway MariaDB (benchmarks/mysql_server.py).

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
import os
import random
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from types import FrameType

import sqlalchemy as sa
from mysql_server import mariadb

from falcon.adapters.clock import utc_now
from falcon.adapters.db import repository as repo
from falcon.adapters.db.migrate import upgrade
from falcon.adapters.db.orm import JobRow
from falcon.adapters.db.session import session_scope
from falcon.domain.model import QueueKey
from falcon.domain.scheduling import WaitingTask, waiting_messages
from falcon.domain.status import Reason, Status
from falcon.local import emulator, prefect_server, register_demo_clusters, served_stack
from falcon.settings import get_settings

TOPOLOGIES = ["2x2", "2x4"]
ACTORS = ["alice", "bob", "carol", "dave"]
ACTOR_WEIGHTS = [4, 3, 2, 1]  # uneven, and independent of the topology: every queue mixes actors
POLL_SECONDS = 0.02
TARGET_P50, TARGET_P99 = 1.0, 3.0
PREFIX = "pickup-"


# --- the stack ----------------------------------------------------------------------------------


# --- inserting and observing --------------------------------------------------------------------


def insert(url: str, task_id: str, actor: str, topology: str) -> float:
    """Insert one row as upstream does; the monotonic time its commit returned."""
    spec = {
        "image": "us-docker.pkg.dev/demo/trainer:latest",
        "command": ["python", "-u", "train.py"],
        "env": {"EMULATOR_RUN_SECONDS": "600"},
        "topology": topology,
    }
    with session_scope(url) as session:
        repo.insert_task(
            session,
            task_id=task_id,
            actor=actor,
            name=f"job-{task_id.removeprefix(PREFIX)}",
            tpu_type="v6e",
            spec=spec,
            timeout_seconds=3600,
            now=utc_now(),
        )
    return time.monotonic()


@dataclass(frozen=True)
class Seen:
    at: float
    reason: str
    message: str


class Poller(threading.Thread):
    """Every POLL_SECONDS, note the first moment each bench row has a reason and a Message."""

    def __init__(self, url: str) -> None:
        super().__init__(daemon=True, name="pickup-poller")
        self.url = url
        self.seen: dict[str, Seen] = {}
        self.polls = 0
        self.poll_seconds: list[float] = []
        self._stop_event = threading.Event()
        self._lock = threading.Lock()

    def run(self) -> None:
        job = JobRow.__table__
        query = sa.select(job.c.id, job.c.reason, job.c.message).where(
            job.c.id.like(f"{PREFIX}%"), job.c.reason.is_not(None), job.c.message != ""
        )
        engine = sa.create_engine(self.url)  # its own pool: never shares a connection with the inserts
        while not self._stop_event.is_set():
            started = time.monotonic()
            try:
                with engine.connect() as conn:
                    rows = conn.execute(query).all()
            except sa.exc.OperationalError:  # e.g. SQLite busy: just poll again
                rows = []
            now = time.monotonic()
            with self._lock:
                for task_id, reason, message in rows:
                    if task_id not in self.seen:
                        self.seen[task_id] = Seen(now, reason, message)
            self.polls += 1
            self.poll_seconds.append(now - started)
            self._stop_event.wait(max(0.0, POLL_SECONDS - (time.monotonic() - started)))

    def first_seen(self, task_id: str) -> Seen | None:
        with self._lock:
            return self.seen.get(task_id)

    def stop(self) -> None:
        self._stop_event.set()
        self.join(5)


def wait_for(poller: Poller, task_id: str, runner: subprocess.Popen[bytes], seconds: float) -> Seen:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        seen = poller.first_seen(task_id)
        if seen is not None:
            return seen
        if runner.poll() is not None:
            raise RuntimeError(f"falcon local exited with {runner.returncode}; see its local.log")
        time.sleep(0.05)
    raise RuntimeError(f"{task_id} was not picked up within {seconds:.0f}s; see local.log")


# --- checks and report --------------------------------------------------------------------------


def percentile(values: list[float], q: float) -> float:
    """Nearest-rank percentile (q in 0..100)."""
    ordered = sorted(values)
    rank = max(1, min(len(ordered), round(q / 100 * len(ordered) + 0.5)))
    return ordered[rank - 1]


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
            positions = sorted(int(m.group(1)) for t in expected if (m := re.search(r"#(\d+)", stored[t])))
            contiguous = positions == list(range(1, len(tasks) + 1))
            ok = ok and not wrong and contiguous
            by_pos = sorted(expected, key=lambda t: int(re.search(r"#(\d+)", expected[t]).group(1)))  # type: ignore[union-attr]
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


def report(latencies: dict[str, float], seen: dict[str, Seen], cold: float, poller: Poller) -> bool:
    values = list(latencies.values())
    p50, p90, p99 = (percentile(values, q) for q in (50, 90, 99))
    first_reasons: dict[str, int] = {}
    for task_id in latencies:
        first_reasons[seen[task_id].reason] = first_reasons.get(seen[task_id].reason, 0) + 1
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
        f"{statistics.fmean(values):>7.3f}   p50<={TARGET_P50:.0f}s p99<={TARGET_P99:.0f}s: "
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


def _interrupt(signum: int, _frame: FrameType | None) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--count", type=int, default=300, help="rows to insert (default %(default)s)")
    parser.add_argument("--rate", type=float, default=10.0, help="inserts per second (default %(default)s)")
    parser.add_argument("--db", choices=["sqlite", "mariadb"], default="sqlite")
    parser.add_argument(
        "--keep-home", action="store_true", help="keep the temporary FALCON_HOME for its logs"
    )
    args = parser.parse_args()
    signal.signal(signal.SIGTERM, _interrupt)

    home = Path(tempfile.mkdtemp(prefix="falcon-pickup-", dir="/tmp"))
    os.environ["FALCON_HOME"] = str(home)
    os.environ.pop("FALCON_DATABASE_URL", None)
    os.environ.pop("PREFECT_API_URL", None)  # always a throwaway Prefect server of our own
    with ExitStack() as stack:
        stack.callback(_remove_home, home, args.keep_home)
        if args.db == "mariadb":
            os.environ["FALCON_DATABASE_URL"] = stack.enter_context(mariadb())
        get_settings.cache_clear()
        url = get_settings().resolved_database_url
        upgrade(url)
        started = time.monotonic()
        api_url = stack.enter_context(prefect_server(home / "prefect"))
        emulator_url = stack.enter_context(emulator(None, 0, home / "emulator"))
        register_demo_clusters()
        print(f"FALCON_HOME={home}  db={args.db}  stack up in {time.monotonic() - started:.1f}s", flush=True)
        poller = Poller(url)
        poller.start()
        stack.callback(poller.stop)
        launched = time.monotonic()
        runner = stack.enter_context(served_stack(home, api_url, emulator_url))
        warm = f"{PREFIX}warmup"
        insert(url, warm, "warmup", "4x4")
        wait_for(poller, warm, runner, 180)
        cold = time.monotonic() - launched
        print(
            f"dispatcher ticking after {cold:.1f}s; inserting {args.count} rows at {args.rate}/s", flush=True
        )

        committed: dict[str, float] = {}
        rng = random.Random(20261129)
        t0 = time.monotonic()
        for i in range(args.count):
            time.sleep(max(0.0, t0 + i / args.rate - time.monotonic()))
            task_id = f"{PREFIX}{i:04d}"
            actor = rng.choices(ACTORS, ACTOR_WEIGHTS)[0]
            committed[task_id] = insert(url, task_id, actor, TOPOLOGIES[i % 2])
        late = time.monotonic() - t0 - (args.count - 1) / args.rate
        for task_id in committed:
            wait_for(poller, task_id, runner, 30)
        poller.stop()
        seen = dict(poller.seen)
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


def _remove_home(home: Path, keep: bool) -> None:
    if keep:
        print(f"kept {home}")
        return
    shutil.rmtree(home, ignore_errors=True)


if __name__ == "__main__":
    try:
        sys.exit(main())
    except KeyboardInterrupt:
        print("\ninterrupted; stack stopped", file=sys.stderr)
        sys.exit(130)
