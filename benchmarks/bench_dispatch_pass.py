"""Cost of one scheduling pass as the number of waiting tasks grows (issue requirement (a)).

Target: under 100 ms for 10k waiting tasks including the database, growth no worse than n log n.

Layout: n waiting tasks over 5 clusters x 4 topologies (20 queues) and 200 actors with Zipf-ish
weights (a few actors own most tasks), submitted_at with second resolution so ties occur. For each
n it measures:

  memory    the pure pass on pre-loaded WaitingTask lists: pick_next per queue, then
            waiting_messages of the rest, for all 20 queues (what schedule() computes)
  snapshot  loading the dispatcher's QueueBook: repo.waiting_rows + repo.last_actors, then
            QueueBook.load(rows, last_actors) (done at start and every
            FALCON_QUEUE_REFRESH_SECONDS, not every tick)
  first     one falcon.services.queueing.schedule() pass right after the load, commits included:
            20 picks and every waiting task's Message written (rows reset between repetitions)
  one frees the pass after one queue's acquiring task reached Running: 1 pick, and that queue's
            Messages rewritten (every position behind the picked task moved) — the typical busy pass
  steady    a pass with every queue busy and nothing changed: no picks, no writes (what the
            dispatcher does every 0.5 s while tasks wait)

on SQLite (file, WAL, as `falcon local` runs it) and on a throwaway MariaDB (unix socket).
A pass is what the dispatcher's tick does around schedule(): read the queues whose slot a task
holds (repo.tick_reads; the tick reads it in its snapshot), then schedule() against the
task store the dispatcher uses (falcon.adapters.db.store.SqlTaskStore: each write - one per pick,
then the Messages - its own short transaction). Slots are a fake in-memory object that always
grants: the Prefect global-concurrency-limit calls are the edge of this unit and are not measured
here. Each cell is the median of a few
repetitions; ns/(n log2 n) should stay flat (or fall) as n grows if the pass is O(n log n).

With ``--busy-threads N``, N threads of pure-Python work run beside the passes, as the
dispatcher's flow runs and reconcile round run beside its tick: each of a pass's round trips to
the database then waits for the interpreter lock, up to Python's switch interval
(``--switch-interval``, 5 ms by default).

Run:  .venv/bin/python benchmarks/bench_dispatch_pass.py [--sizes 1000,10000,100000]
      [--backends memory,sqlite,mariadb] [--profile 10000]   (cProfile of the database passes)
      [--busy-threads 1] [--switch-interval 0.001]
"""

from __future__ import annotations

import argparse
import cProfile
import io
import math
import pstats
import random
import statistics
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, cast

import sqlalchemy as sa
from mysql_server import mariadb

from falcon.adapters.db import repository as repo
from falcon.adapters.db.migrate import upgrade
from falcon.adapters.db.orm import JobRow, QueueRotationRow, TaskProgressRow
from falcon.adapters.db.session import engine_for, session_scope
from falcon.adapters.db.store import SqlTaskStore
from falcon.adapters.task_events import PrometheusTaskEvents
from falcon.domain.lifecycle import Phase
from falcon.domain.messages import Locale, Messages
from falcon.domain.model import QueueKey
from falcon.domain.scheduling import WaitingTask, pick_next, waiting_messages
from falcon.domain.status import Reason, Status
from falcon.services.queueing import QueueBook, schedule

ACTORS = [f"user-{i:03d}" for i in range(200)]
CLUSTERS = [f"00000000-0000-0000-0000-0000000000{c:02d}" for c in range(5)]
TOPOLOGIES = ["2x2", "2x4", "4x4", "4x8"]
QUEUES = [QueueKey(c, t) for c in CLUSTERS for t in TOPOLOGIES]
T0 = datetime(2026, 5, 1, tzinfo=UTC)
NOW = T0 + timedelta(days=2)
LOCALE = Locale.ZH
LEASE_SECONDS = 300
TARGET_MS_10K = 100.0
CHUNK = 5_000
ROOT = Path(__file__).resolve().parents[1]
SITE = Path(sa.__file__).resolve().parents[1]


# --- data ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Row:
    task_id: str
    actor: str
    name: str
    queue: QueueKey
    created_at: datetime


def make_rows(n: int, seed: int = 20260501) -> list[Row]:
    rng = random.Random(seed + n)
    weights = [1 / (rank + 1) for rank in range(len(ACTORS))]
    actors = rng.choices(ACTORS, weights, k=n)
    return [
        Row(
            f"task-{i:07d}",
            actor,
            f"job-{i}",
            rng.choice(QUEUES),
            T0 + timedelta(seconds=rng.randrange(n)),
        )
        for i, actor in enumerate(actors)
    ]


def by_queue(rows: list[Row]) -> dict[QueueKey, list[WaitingTask]]:
    queues: dict[QueueKey, list[WaitingTask]] = {q: [] for q in QUEUES}
    for r in rows:
        queues[r.queue].append(WaitingTask(r.task_id, r.actor, r.name, r.created_at))
    return queues


def initial_last_actors(rows: list[Row]) -> dict[QueueKey, str]:
    """Every queue has picked before (the rotation table is populated): its earliest task's actor."""
    heads: dict[QueueKey, Row] = {}
    for r in rows:
        if r.queue not in heads or (r.created_at, r.task_id) < (
            heads[r.queue].created_at,
            heads[r.queue].task_id,
        ):
            heads[r.queue] = r
    return {q: r.actor for q, r in heads.items()}


def spec_for(topology: str) -> dict[str, Any]:
    return {
        "image": "us-docker.pkg.dev/proj/trainer:latest",
        "command": ["python", "-u", "train.py"],
        "args": ["--steps", "1000"],
        "env": {"EMULATOR_RUN_SECONDS": "600"},
        "topology": topology,
    }


def _table(orm: Any) -> sa.Table:
    return cast(sa.Table, orm.__table__)


def load(url: str, rows: list[Row]) -> float:
    """Bulk-insert the rows as intake leaves them: Pending/Waiting, message '', phase waiting."""
    started = time.perf_counter()
    job, progress, rotation = _table(JobRow), _table(TaskProgressRow), _table(QueueRotationRow)
    with engine_for(url).begin() as conn:
        for lo in range(0, len(rows), CHUNK):
            chunk = rows[lo : lo + CHUNK]
            conn.execute(
                job.insert(),
                [
                    {
                        "id": r.task_id,
                        "actor": r.actor,
                        "name": r.name,
                        "tpu_type": "v6e",
                        "spec": spec_for(r.queue.topology),
                        "timeout_seconds": 3600,
                        "status": Status.PENDING.value,
                        "reason": Reason.WAITING.value,
                        "message": "",
                        "cluster_id": r.queue.cluster_id,
                        "created_at": r.created_at,
                        "updated_at": r.created_at,
                    }
                    for r in chunk
                ],
            )
            conn.execute(
                progress.insert(),
                [
                    {
                        "task_id": r.task_id,
                        "phase": Phase.WAITING.value,
                        "cluster_id": r.queue.cluster_id,
                        "topology": r.queue.topology,
                        "attempt": 0,
                        "updated_at": r.created_at,
                    }
                    for r in chunk
                ],
            )
        conn.execute(
            rotation.insert(),
            [
                {"cluster_id": q.cluster_id, "topology": q.topology, "last_actor": a, "updated_at": T0}
                for q, a in initial_last_actors(rows).items()
            ],
        )
    if url.startswith("mysql"):
        with engine_for(url).begin() as conn:
            conn.execute(sa.text("ANALYZE TABLE job, falcon_task_progress, falcon_queue_rotation"))
    return time.perf_counter() - started


def reset(url: str, rows: list[Row]) -> None:
    """Undo a first pass: picked tasks back to waiting, messages back to '', rotation restored."""
    job, progress, rotation = _table(JobRow), _table(TaskProgressRow), _table(QueueRotationRow)
    with engine_for(url).begin() as conn:
        conn.execute(
            job.update()
            .where(job.c.status == Status.PENDING.value)
            .values(reason=Reason.WAITING.value, message="")
        )
        conn.execute(
            progress.update()
            .where(progress.c.phase != Phase.WAITING.value)
            .values(phase=Phase.WAITING.value, lease_id=None, attempt=0)
        )
        conn.execute(rotation.delete())
        conn.execute(
            rotation.insert(),
            [
                {"cluster_id": q.cluster_id, "topology": q.topology, "last_actor": a, "updated_at": T0}
                for q, a in initial_last_actors(rows).items()
            ],
        )


# --- the unit's edge ----------------------------------------------------------------------------


class GrantingSlots:
    """In-memory stand-in for the Prefect concurrency limits: every acquire succeeds at once."""

    def __init__(self) -> None:
        self.leases: dict[str, str] = {}

    def ensure_limit(self, name: str, fail_fast: bool = False) -> None:
        pass

    def try_acquire(self, name: str, lease_seconds: int, fail_fast: bool = False) -> str | None:
        lease = str(uuid.uuid4())
        self.leases[lease] = name
        return lease

    def renew(self, lease_id: str, lease_seconds: int) -> bool:
        return lease_id in self.leases

    def release(self, lease_id: str, fail_fast: bool = False) -> None:
        self.leases.pop(lease_id, None)

    def active_slots(self, name: str) -> int:
        return sum(1 for n in self.leases.values() if n == name)

    def reset(self, name: str) -> None:
        self.leases = {k: v for k, v in self.leases.items() if v != name}


# --- the measurements ---------------------------------------------------------------------------


def memory_pass(queues: dict[QueueKey, list[WaitingTask]], last: dict[QueueKey, str]) -> int:
    """What schedule() computes, without I/O: one pick per queue, then every Waiting message."""
    last = dict(last)
    messages: dict[str, str] = {}
    for queue, tasks in queues.items():
        chosen = pick_next(tasks, last.get(queue))
        if chosen is not None:
            last[queue] = chosen.actor
            tasks = [t for t in tasks if t.task_id != chosen.task_id]
        messages.update(waiting_messages(tasks, last.get(queue), LOCALE))
    return len(messages)


def snapshot_read(url: str) -> QueueBook:
    book = QueueBook()
    with session_scope(url) as session:
        rows, last_actors = repo.waiting_rows(session), repo.last_actors(session)
    book.load(rows, last_actors)
    return book


def schedule_pass(url: str, book: QueueBook) -> tuple[int, int]:
    """One schedule() pass as the dispatcher's tick runs it: the acquiring queues read, then
    schedule() on the SQL task store (each write committed in its own short transaction)."""
    with session_scope(url) as session:
        acquiring = repo.tick_reads(session, 0, with_counts=False).acquiring_queues
    store = SqlTaskStore(url)
    events = PrometheusTaskEvents(store.clusters)  # each pick logged and counted, as in production
    result = schedule(store, book, GrantingSlots(), acquiring, Messages(LOCALE), NOW, LEASE_SECONDS, events)
    return len(result.picks), result.messages_written


def free_one_slot(url: str) -> None:
    """One acquiring task reaches Running: its queue's slot is free for the next pass."""
    progress = _table(TaskProgressRow)
    with engine_for(url).begin() as conn:
        task_id = conn.execute(
            sa.select(progress.c.task_id).where(progress.c.phase == Phase.ACQUIRING.value).limit(1)
        ).scalar_one()
        conn.execute(progress.update().where(progress.c.task_id == task_id).values(phase=Phase.RUNNING.value))


def timed(fn: Callable[[], object], repeats: int, before: Callable[[], object] | None = None) -> list[float]:
    samples = []
    for _ in range(repeats):
        if before is not None:
            before()
        started = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - started)
    return samples


@dataclass
class Result:
    n: int
    backend: str
    what: str
    samples: list[float]
    note: str = ""

    @property
    def median_ms(self) -> float:
        return statistics.median(self.samples) * 1e3

    @property
    def per_nlogn(self) -> float:
        return statistics.median(self.samples) * 1e9 / (self.n * math.log2(self.n))


def repeats_for(n: int) -> int:
    return 7 if n <= 10_000 else 3


def bench_memory(n: int, rows: list[Row]) -> list[Result]:
    queues, last = by_queue(rows), initial_last_actors(rows)
    memory_pass(queues, last)  # warm up
    samples = timed(lambda: memory_pass(queues, last), repeats_for(n))
    return [Result(n, "memory", "pick + messages", samples)]


def bench_db(n: int, rows: list[Row], backend: str, url: str, profile: bool) -> list[Result]:
    upgrade(url)
    loaded = load(url, rows)
    reps = repeats_for(n)
    out = []
    snapshot_read(url)  # warm the connection pool and the caches
    out.append(Result(n, backend, "snapshot read", timed(lambda: snapshot_read(url), reps)))
    info: dict[str, tuple[int, int]] = {}
    books: dict[str, QueueBook] = {}

    def fresh_book() -> None:
        reset(url, rows)
        books["b"] = snapshot_read(url)

    def run(kind: str) -> Callable[[], None]:
        def go() -> None:
            info[kind] = schedule_pass(url, books["b"])

        return go

    def record(kind: str, samples: list[float]) -> None:
        picks, written = info[kind]
        out.append(Result(n, backend, f"schedule, {kind}", samples, f"{picks} picks, {written} msgs written"))

    record("first", timed(run("first"), max(3, reps // 2), before=fresh_book))
    record("one frees", timed(run("one frees"), reps, before=lambda: free_one_slot(url)))
    record("steady", timed(run("steady"), reps))
    if profile:
        _profile(f"{backend} n={n} snapshot read", lambda: snapshot_read(url))
        fresh_book()
        _profile(f"{backend} n={n} schedule, first", run("first"))
        free_one_slot(url)
        _profile(f"{backend} n={n} schedule, one frees", run("one frees"))
        _profile(f"{backend} n={n} schedule, steady", run("steady"))
    print(f"  [{backend} n={n}: loaded in {loaded:.1f}s]", file=sys.stderr, flush=True)
    engine_for(url).dispose()
    return out


def _profile(title: str, fn: Callable[[], None]) -> None:
    prof = cProfile.Profile()
    prof.enable()
    fn()
    prof.disable()
    for order in ("cumulative", "tottime"):
        buf = io.StringIO()
        pstats.Stats(prof, stream=buf).sort_stats(order).print_stats(18)
        lines = [line for line in buf.getvalue().splitlines() if line.strip()]
        print(f"\n--- cProfile: {title} (by {order}) ---")
        print("\n".join(line.replace(str(SITE), "").replace(str(ROOT), "") for line in lines))


# --- output -------------------------------------------------------------------------------------


def print_table(results: list[Result]) -> None:
    header = (
        f"{'backend':<8} {'measurement':<17} {'n':>7} {'median ms':>10} {'min ms':>9} "
        f"{'ns/(n log2 n)':>14}  note"
    )
    print(header)
    print("-" * len(header))
    for r in results:
        print(
            f"{r.backend:<8} {r.what:<17} {r.n:>7} {r.median_ms:>10.1f} {min(r.samples) * 1e3:>9.1f} "
            f"{r.per_nlogn:>14.1f}  {r.note}"
        )


def print_verdict(results: list[Result]) -> None:
    print("\ntarget: a pass for 10k waiting tasks including the DB < 100 ms; growth <= n log n")
    for backend in ("sqlite", "mariadb"):
        at10k = {r.what: r for r in results if r.backend == backend and r.n == 10_000}
        if not at10k:
            continue
        for what in ("snapshot read", "schedule, first", "schedule, one frees", "schedule, steady"):
            r = at10k.get(what)
            if r is not None:
                ok = "OK  " if r.median_ms < TARGET_MS_10K else "MISS"
                print(f"  {ok} {backend:<8} {what:<17} n=10000: {r.median_ms:7.1f} ms")
    groups: dict[tuple[str, str], list[Result]] = {}
    for r in results:
        groups.setdefault((r.backend, r.what), []).append(r)
    print("growth: ratio of ns/(n log2 n) between the largest and the smallest n (<= ~1.5 means n log n)")
    for (backend, what), rs in groups.items():
        if len(rs) > 1:
            rs.sort(key=lambda r: r.n)
            ratio = rs[-1].per_nlogn / rs[0].per_nlogn
            print(f"  {backend:<8} {what:<17} {rs[0].n}->{rs[-1].n}: x{ratio:.2f}")


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--sizes", default="1000,10000,100000", help="comma-separated n (default %(default)s)"
    )
    parser.add_argument("--backends", default="memory,sqlite,mariadb")
    parser.add_argument("--profile", type=int, default=0, help="cProfile the database passes at this n")
    parser.add_argument(
        "--busy-threads",
        type=int,
        default=0,
        help="threads of pure-Python work beside the passes, as the dispatcher's flow runs and "
        "reconcile round are beside its tick: each round trip then waits for the interpreter lock",
    )
    parser.add_argument(
        "--switch-interval", type=float, default=None, help="sys.setswitchinterval, seconds (Python's 0.005)"
    )
    args = parser.parse_args()
    if args.switch_interval is not None:
        sys.setswitchinterval(args.switch_interval)
    for _ in range(args.busy_threads):
        threading.Thread(target=_busy, daemon=True).start()
    sizes = [int(s) for s in args.sizes.split(",") if s]
    backends = args.backends.split(",")
    print(
        "one scheduling pass: 20 queues (5 clusters x 4 topologies), 200 actors; Slots = in-memory fake "
        "that always grants (edge of the unit, not measured); "
        f"{args.busy_threads} busy threads beside, switch interval {sys.getswitchinterval() * 1e3:g} ms\n",
        flush=True,
    )
    started = time.perf_counter()
    results: list[Result] = []
    with ExitStack() as stack, tempfile.TemporaryDirectory(prefix="falcon-bench-") as tmp:
        server_url = stack.enter_context(mariadb()) if "mariadb" in backends else ""
        for n in sizes:
            rows = make_rows(n)
            if "memory" in backends:
                results += bench_memory(n, rows)
            if "sqlite" in backends:
                url = f"sqlite:///{Path(tmp) / f'falcon-{n}.db'}"
                results += bench_db(n, rows, "sqlite", url, profile=args.profile == n)
            if "mariadb" in backends:
                url = _fresh_database(server_url, f"falcon_{n}")
                results += bench_db(n, rows, "mariadb", url, profile=args.profile == n)
    print()
    print_table(results)
    print_verdict(results)
    print(f"\ntotal {time.perf_counter() - started:.0f}s")


def _busy() -> None:
    """Pure-Python work for ever: it holds the interpreter lock but for Python's switch interval."""
    total = 0
    while True:
        for i in range(1_000):
            total += i


def _fresh_database(server_url: str, name: str) -> str:
    base, _, query = server_url.partition("?")
    url = f"{base.rsplit('/', 1)[0]}/{name}?{query}"
    admin = sa.create_engine(server_url)
    with admin.begin() as conn:
        conn.execute(sa.text(f"CREATE DATABASE {name} CHARACTER SET utf8mb4 COLLATE utf8mb4_unicode_ci"))
    admin.dispose()
    return url


if __name__ == "__main__":
    main()
