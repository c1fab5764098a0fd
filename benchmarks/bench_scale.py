"""Falcon at scale on one machine (issue 10): N tasks Running and M waiting over Q queues.

The stack is the one `falcon local` runs: a throwaway MariaDB (benchmarks/mysql_server.py), a
Prefect server (`falcon.local.prefect_server`; its database SQLite as `falcon local` keeps it, or
with ``--prefect-db postgres`` a throwaway PostgreSQL as production runs it, whose processes are
not counted), the emulator (`falcon emulator serve`, a process
of its own so that its memory and CPU are apart from Falcon's: benchmarks/local_stack.py runs it
on a thread of the benchmark, and with the demo's two clusters), and `falcon.local.served_stack`,
the child process that serves Falcon's deployments, with ``FALCON_HEALTH_PORT`` set so the
dispatcher's ``/metrics`` can be scraped.

Workload: Q queues = C clusters x T topologies of v6e (1x1, 2x2, 2x4, 4x4: 1, 1, 2 and 4 nodes),
each cluster in its own project and zone, flex-start only (no reservation; flex capacity comes
after ``--flex-delay`` seconds), node-pool operations ``--pool-seconds`` long, one at a time per
cluster (GKE's stricter rule; it documents one per node pool), so that pools queue for GKE. Rows
are inserted with plain SQL, as upstream does:

1. *ramp*: ``--running`` rows whose containers run ``--hold-seconds``; waited for until all are
   Running (pools are created serially per cluster, one acquisition per queue at a time);
2. ``--waiting`` rows whose containers run ``--run-seconds``, inserted at once; each queue takes
   one at a time, so nearly all of them wait;
3. *steady*: a ``--steady-seconds`` window with N Running and M waiting (the held ones still run),
   opened two ticks after the last row was taken in, so that intake's last tick is not in it;
4. *drain*: until every row is terminal, or ``--drain-limit`` seconds after the waiting rows went
   in; then the portion drained and the rate are reported, and the full drain is extrapolated from
   the rate (an estimate, said so).

Measured:
* memory and CPU, sampled every ``--sample-seconds``: the sum over Falcon's processes (the
  served-stack process and every process it started: the dispatcher's run, the tidal controller's,
  flow runs) and, apart, the Prefect server's tree, the emulator's, MariaDB's and, with
  ``--prefect-db postgres``, the Prefect server's PostgreSQL's. PSS (shared pages
  split between the processes that map them) and RSS, peak and median over the steady window; CPU
  seconds per wall second over the window and at the busiest sample interval;
* the dispatcher's tick (intake, aborts, picks, launches) and, apart, its reconcile round (following
  Jobs, supervising runs, reaping, warming) and its housekeeping (orphan sweeps, the view), each a
  loop of its own: ``falcon_dispatcher_tick_seconds``, ``falcon_dispatcher_reconcile_seconds`` and
  ``falcon_dispatcher_housekeeping_seconds``
  ``{part="total"|"falcon"|"prefect"|"database"|"cpu"|"runqueue"|"gc"}`` (database: in the task
  store's transactions; cpu: the loop thread's CPU time; runqueue: its wait for a core) scraped
  from its ``/metrics`` at the window's edges;
  p50/p99 interpolated within the histogram's buckets (the bucket holding each quantile is
  printed: that is the resolution), for the steady window and for the drain;
* time to Running for the ramp, time to drain, terminal statuses; where the waiting tasks' time
  went (a queue's dispatch cycle, dispatch -> terminal beyond the run, pools created); the
  dispatcher's runs in Prefect (cancelled ones, time with none running); ERROR lines in the logs.

``--pin-falcon 0`` runs Falcon's processes on CPU 0 and everything else (the Prefect server, the
emulator, MariaDB, this benchmark) on the other CPUs, as in production where those are other
machines: on a two-core machine otherwise the tick waits for a core they keep busy.

Run (develop with a small one):
  .venv/bin/python benchmarks/bench_scale.py --running 50 --waiting 500 --queues 4
  .venv/bin/python benchmarks/bench_scale.py --running 1000 --waiting 10000 --queues 20 --json scale.json
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlparse

import httpx
import psutil
import sqlalchemy as sa
import yaml
from local_stack import prefect_api, run_main
from mysql_server import mariadb
from scale_metrics import (
    API_CALLS_METRIC,
    API_SECONDS_METRIC,
    DEFERRED_METRIC,
    GC_METRIC,
    HOUSEKEEPING_METRIC,
    MESSAGES_METRIC,
    RECONCILE_METRIC,
    STEP_METRIC,
    TICK_METRIC,
    Histogram,
    Scrape,
    Usage,
    Window,
    counter_total,
    counters_by,
    find_process,
    gauge_value,
    histograms,
    quantile,
    tree,
    usage,
)

from falcon.adapters.clock import utc_now
from falcon.adapters.db import repository as repo
from falcon.adapters.db.migrate import upgrade
from falcon.adapters.db.orm import JobRow
from falcon.adapters.db.session import session_scope
from falcon.domain.model import Cluster, ClusterStatus
from falcon.domain.status import TERMINAL, Status
from falcon.local import free_port, served_stack, stop_tree
from falcon.settings import get_settings

TOPOLOGIES = ("1x1", "2x2", "2x4", "4x4")
# (region, zone offering v6e): one cluster per region, its pools in that zone.
PLACES = (
    ("us-central1", "us-central1-b"),
    ("us-east1", "us-east1-d"),
    ("us-east5", "us-east5-b"),
    ("europe-west4", "europe-west4-a"),
    ("asia-northeast1", "asia-northeast1-b"),
)
ACTORS = tuple(f"actor-{i}" for i in range(10))
PREFIX = "scale-"
NAMESPACE = "falcon-jobs"
GIB = 1 << 30
MEMORY_GOAL = 2 * GIB
TICK_GOAL_P99 = 0.1
STATUS_POLL_SECONDS = 1.0
HANDOVER_MARGIN_SECONDS = 15.0  # a dispatcher run's start, kept out of the steady window
METRICS_PERIOD_SECONDS = 2.0  # the tick/reconcile histograms are read this often while a window is open
RAMP_SECONDS_PER_TASK = 1.0  # the default ramp limit per task to bring to Running, beyond 120 s
INTAKE_LIMIT = 120.0  # seconds for the dispatcher to take in inserted rows: beyond, it is not ticking
WINDOW_AFTER_TICKS = 2  # the steady window opens once this many ticks ended after the last row was taken in
GKE_OPERATIONS = 1  # node-pool operations per cluster at once, for the emulator and Falcon alike


# --- the workload -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Shape:
    clusters: int
    topologies: tuple[str, ...]

    @classmethod
    def of(cls, queues: int) -> Shape:
        """Q queues as clusters x topologies: up to 4 topologies per cluster, one cluster per place."""
        per_cluster = min(len(TOPOLOGIES), queues)
        clusters, rest = divmod(queues, per_cluster)
        if rest or clusters > len(PLACES):
            raise SystemExit(f"--queues must be 1-4 or a multiple of 4 up to {4 * len(PLACES)}")
        return cls(clusters, TOPOLOGIES[:per_cluster])


def emulator_config(
    shape: Shape, pool_seconds: float, flex_delay: float, pod_seconds: float
) -> dict[str, Any]:
    """One project per cluster with its log bucket writable by the Jobs' ServiceAccount, no
    reservation (flex-start has no room limit, so 1 000 pools can run at once), fast operations."""
    projects: dict[str, Any] = {}
    for i, (region, zone) in enumerate(PLACES[: shape.clusters], start=1):
        projects[f"scale-project-{i}"] = {
            "buckets": {
                f"scale-logs-{i}": {
                    "writers": [f"serviceAccount:scale-project-{i}.svc.id.goog[{NAMESPACE}/default]"]
                }
            },
            "clusters": {
                f"scale-{i}": {
                    "location": region,
                    "zones": [zone],
                    "flexStart": {"available": True, "delaySeconds": flex_delay},
                }
            },
        }
    return {
        "nodePoolProvisionSeconds": pool_seconds,
        "nodePoolDeleteSeconds": pool_seconds,
        "podStartSeconds": pod_seconds,
        "nodePoolOperationsPerCluster": GKE_OPERATIONS,
        "projects": projects,
    }


def register_clusters(url: str, shape: Shape) -> None:
    """The registry rows, as `falcon cluster add` (and the demo) write them."""
    with session_scope(url) as session:
        for i, (region, zone) in enumerate(PLACES[: shape.clusters], start=1):
            cluster = Cluster(
                id=f"scale-cluster-{i}",
                name=f"scale-{i}",
                project=f"scale-project-{i}",
                location=region,
                tpu_type="v6e",
                gcs_bucket=f"scale-logs-{i}",
                default_reservation=None,
                status=ClusterStatus.ACTIVE,
                namespace=NAMESPACE,
                zone=zone,
            )
            repo.add_cluster(session, cluster, utc_now())


def insert_rows(url: str, first: int, count: int, topologies: tuple[str, ...], run_seconds: float) -> float:
    """``count`` Pending rows by one plain multi-row INSERT per thousand, as upstream writes them;
    the monotonic time the last commit returned."""
    now = datetime.now(UTC)
    rows = [
        {
            "id": task_id(n),
            "actor": ACTORS[n % len(ACTORS)],
            "name": f"scale-{n}",
            "tpu_type": "v6e",
            "spec": {
                "image": "us-docker.pkg.dev/demo/trainer:latest",
                "command": ["python", "-u", "train.py"],
                "env": {"EMULATOR_RUN_SECONDS": f"{run_seconds:g}"},
                "topology": topologies[n % len(topologies)],
            },
            "timeout_seconds": int(run_seconds) + 86400,
            "status": Status.PENDING.value,
            "created_at": now,
            "updated_at": now,
        }
        for n in range(first, first + count)
    ]
    engine = sa.create_engine(url)
    try:
        for start in range(0, len(rows), 1000):
            with engine.begin() as conn:
                conn.execute(sa.insert(JobRow), rows[start : start + 1000])
    finally:
        engine.dispose()
    return time.monotonic()


def task_id(n: int) -> str:
    return f"{PREFIX}{n:06d}"


def status_counts(engine: sa.Engine, later_from: str) -> Counter[str]:
    """Rows by what they are doing: Running, waiting (Pending/Waiting), acquiring (the other
    Pending reasons), new (not yet taken in), each terminal status, all terminal ones, and the
    terminal ones from the id ``later_from`` on (the waiting batch)."""
    job = JobRow.__table__
    later = job.c.id >= later_from
    query = (
        sa.select(job.c.status, job.c.reason, later, sa.func.count())
        .where(job.c.id.like(f"{PREFIX}%"))
        .group_by(job.c.status, job.c.reason, later)
    )
    counts: Counter[str] = Counter()
    with engine.connect() as conn:
        for status, reason, in_later, n in conn.execute(query):
            if status == Status.PENDING.value:
                counts["new" if reason is None else "waiting" if reason == "Waiting" else "acquiring"] += n
            else:
                counts[status] += n
            if Status(status) in TERMINAL:
                counts["terminal"] += n
                counts["later_terminal"] += n if in_later else 0
    return counts


# --- the stack ----------------------------------------------------------------------------------


@contextmanager
def emulator_process(
    config: Path, data_dir: Path, log: Path
) -> Iterator[tuple[str, subprocess.Popen[bytes]]]:
    """`falcon emulator serve` in a process of its own; yields its URL and process."""
    port = free_port()
    with log.open("ab") as out:
        serve = [
            "emulator",
            "serve",
            "--port",
            str(port),
            "--config",
            str(config),
            "--data-dir",
            str(data_dir),
        ]
        proc = subprocess.Popen(
            [sys.executable, "-m", "falcon.cli", *serve],
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        try:
            url = f"http://127.0.0.1:{port}"
            deadline = time.monotonic() + 60
            while not _answers(f"{url}/healthz"):
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"the emulator did not come up; see {log}")
                time.sleep(0.2)
            yield url, proc
        finally:
            stop_tree(proc)


def _answers(url: str) -> bool:
    try:
        return httpx.get(url, timeout=2).status_code == 200
    except httpx.HTTPError:
        return False


@dataclass
class Processes:
    """The process trees whose memory is measured, found once the stack is up."""

    falcon: int  # the served-stack process: its tree is all of Falcon's processes
    prefect: int | None
    emulator: int
    mariadb: int | None
    postgres: int | None = None  # the Prefect server's database, with --prefect-db postgres

    def pin(self, falcon_cpus: set[int]) -> None:
        """Every thread of Falcon's processes on ``falcon_cpus``, and every thread of the rest of
        the stack and of this benchmark's own process (not its children: Falcon is one) on the
        other CPUs. Called again and again: threads and processes started since are pinned too
        (a new thread inherits the affinity of the one that started it, a child its parent's)."""
        rest = set(range(os.cpu_count() or 1)) - falcon_cpus
        others = [p for p in (self.prefect, self.emulator, self.mariadb, self.postgres) if p is not None]
        for process, cpus in [
            *((process, rest) for pid in others for process in tree(pid)),
            *((process, rest) for process in [psutil.Process()]),
            *((process, falcon_cpus) for process in tree(self.falcon)),
        ]:
            with contextlib.suppress(psutil.Error):
                for thread in process.threads():
                    with contextlib.suppress(OSError):  # the thread ended meanwhile
                        os.sched_setaffinity(thread.id, cpus)

    def sample(self) -> dict[str, Usage]:
        groups = {
            "falcon": self.falcon,
            "prefect": self.prefect,
            "emulator": self.emulator,
            "mariadb": self.mariadb,
            "postgres": self.postgres,
        }
        return {name: usage(tree(pid)) for name, pid in groups.items() if pid is not None}


def find_servers(api_url: str, db_url: str, prefect_db: str) -> tuple[int | None, int | None, int | None]:
    """The Prefect server's, mariadbd's and (on --prefect-db postgres) PostgreSQL's pids, by their
    command lines. PostgreSQL's is the throwaway server's (its data folder has the prefix
    tests/chaos/run.py gives it); the oldest match may be the runuser that started it as the
    postgres user, whose tree holds the server and its backends all the same."""
    port = str(urlparse(api_url).port)
    prefect = find_process("prefect", "server", port)
    sockets = parse_qs(urlparse(db_url).query).get("unix_socket", [])
    maria = find_process("mariadbd", f"--socket={sockets[0]}") if sockets else None
    postgres = find_process("postgres", "-D", "falcon-chaos-pg-") if prefect_db == "postgres" else None
    return (
        prefect.pid if prefect else None,
        maria.pid if maria else None,
        postgres.pid if postgres else None,
    )


@dataclass
class Sample:
    at: float
    phase: str
    usage: dict[str, Usage]


class Sampler(threading.Thread):
    """Every ``period`` seconds, the memory and CPU time of each process tree, tagged with the phase
    (and, with ``pin``, Falcon's processes pinned to those CPUs first, the rest to the others)."""

    def __init__(self, processes: Processes, period: float, pin: set[int] | None = None) -> None:
        super().__init__(daemon=True, name="memory-sampler")
        self.processes, self.period, self.pin = processes, period, pin
        self.phase = "start"
        self.samples: list[Sample] = []
        self._stop_event = threading.Event()

    def run(self) -> None:
        while not self._stop_event.is_set():
            started = time.monotonic()
            if self.pin is not None:
                self.processes.pin(self.pin)
            self.samples.append(Sample(started, self.phase, self.processes.sample()))
            self._stop_event.wait(max(0.0, self.period - (time.monotonic() - started)))

    def stop(self) -> None:
        self._stop_event.set()
        self.join(30)


LOOPS = {
    "tick": TICK_METRIC,
    "reconcile": RECONCILE_METRIC,
    "housekeeping": HOUSEKEEPING_METRIC,
    "messages": MESSAGES_METRIC,
}
# Each loop's steps, by the prefix the report gives them.
STEPS = {
    "tick": ("tick", ("snapshot", "intake", "schedule", "launch")),
    "round": ("reconcile", ("follow", "release", "supervise", "reap", "warm")),
    "housekeeping": ("housekeeping", ("orphan_pools", "orphan_jobs", "orphan_services", "view")),
}


def scrape(port: int) -> Scrape:
    if not port:
        return Scrape()
    try:
        answer = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=5)
    except httpx.HTTPError:
        return Scrape()
    if answer.status_code != 200:
        return Scrape()
    loops = {
        f"{loop}/{part}": histogram
        for loop, metric in LOOPS.items()
        for part, histogram in histograms(answer.text, metric, "part").items()
    }
    collections = histograms(answer.text, GC_METRIC, "generation")
    steps = {
        f"{prefix}/{step}": histogram
        for prefix, (loop, _) in STEPS.items()
        for step, histogram in histograms(answer.text, STEP_METRIC, "step", where={"loop": loop}).items()
    }
    kubernetes = histograms(answer.text, API_SECONDS_METRIC, "call", where={"api": "kubernetes"})
    return Scrape(
        loops
        | {f"gc/{generation}": histogram for generation, histogram in collections.items()}
        | steps
        | {f"k8s/{call}": histogram for call, histogram in kubernetes.items()},
        counter_total(answer.text, DEFERRED_METRIC),
        gauge_value(answer.text, "process_start_time_seconds"),
        counters_by(answer.text, API_CALLS_METRIC, ("api", "call")),
    )


# --- phases -------------------------------------------------------------------------------------


@dataclass
class Timeline:
    """Status counts over time, polled by the main thread."""

    later_from: str  # the first id of the waiting batch
    points: list[tuple[float, Counter[str]]] = field(default_factory=list)

    def poll(self, engine: sa.Engine) -> Counter[str]:
        counts = status_counts(engine, self.later_from)
        self.points.append((time.monotonic(), counts))
        return counts

    def peak(self, key: str) -> int:
        return max((c[key] for _, c in self.points), default=0)

    def first(self, key: str, at_least: int) -> float | None:
        """The first poll's time at which ``key`` counted at least ``at_least``."""
        return next((t for t, c in self.points if c[key] >= at_least), None)


def wait_until(stack: Stack, timeline: Timeline, done: Any, limit: float) -> tuple[bool, Counter[str]]:
    """Poll the rows until ``done(counts)`` or ``limit`` seconds; False on the limit."""
    deadline = time.monotonic() + limit
    shown = 0.0
    while True:
        counts = timeline.poll(stack.engine)
        if done(counts):
            return True, counts
        if stack.runner.poll() is not None:
            raise RuntimeError(f"the served stack exited with {stack.runner.returncode}; see local.log")
        if time.monotonic() > deadline:
            return False, counts
        if time.monotonic() - shown >= 15:
            print("  " + _brief(counts), flush=True)
            shown = time.monotonic()
        time.sleep(STATUS_POLL_SECONDS)


def scrape_answered(port: int, limit: float = 30.0) -> Scrape:
    """A scrape that waits out a dispatcher handover: between one dispatcher run's end and the
    next one's first tick nobody exports the histograms, and a window closed on that empty page
    would report nothing (a full-size run lost its steady window so)."""
    deadline = time.monotonic() + limit
    while True:
        page = scrape(port)
        if page.histograms or not port or time.monotonic() > deadline:
            return page
        time.sleep(0.2)


def after_ticks(port: int, ticks: int, limit: float = 60.0) -> Scrape:
    """The first scrape after ``ticks`` more ticks ended (or ``limit`` seconds). The tick that
    took in the last rows is still writing their Messages and picking when the rows read taken in;
    it ends, and is counted, a moment later: a window scraped at once would hold it."""
    first = scrape_answered(port)
    start = first.histograms.get("tick/total")
    if start is None:
        return first
    deadline = time.monotonic() + limit
    while True:
        now = scrape(port)
        ended = now.histograms.get("tick/total")
        if ended is None or ended.count >= start.count + ticks or time.monotonic() > deadline:
            return now
        time.sleep(0.05)


class Follower(threading.Thread):
    """Scrapes the dispatcher's /metrics every ``period`` seconds into the open window, so a
    dispatcher run replaced inside a window costs it at most one period of the old run's ticks."""

    def __init__(self, port: int, period: float = METRICS_PERIOD_SECONDS) -> None:
        super().__init__(daemon=True, name="metrics-follower")
        self.port, self.period = port, period
        self.windows: dict[str, Window] = {}
        self._open: Window | None = None
        self._lock = threading.Lock()
        self._stop_event = threading.Event()

    def open(self, name: str, first: Scrape | None = None) -> None:
        """Close the open window and open ``name``, both on one scrape (``first``, or one taken
        now under the lock, so that no later scrape is counted before it)."""
        with self._lock:
            first = first or scrape_answered(self.port)
            if self._open is not None:
                self._open.add(first)
                self._open.ended = time.monotonic()
            self._open = self.windows[name] = Window(first)

    def close(self) -> None:
        with self._lock:
            if self._open is not None:
                self._open.add(scrape_answered(self.port))
                self._open.ended = time.monotonic()
            self._open = None
        self._stop_event.set()
        self.join(30)

    def run(self) -> None:
        while not self._stop_event.wait(self.period):
            with self._lock:  # a scrape taken before open() must not count in the window it opens
                if self._open is not None:
                    self._open.add(scrape(self.port))


def _brief(counts: Counter[str]) -> str:
    keys = ("new", "waiting", "acquiring", "Running", *(s.value for s in TERMINAL))
    return " ".join(f"{k}={counts[k]}" for k in keys if counts[k])


# --- report -------------------------------------------------------------------------------------


def tick_table(window: dict[str, Histogram]) -> dict[str, Any]:
    """p50/p99 and the mean of each loop's parts, of the reconcile round's and housekeeping's steps
    (wall time: follow the Jobs, end the tasks whose pool the round kept, ...), of each
    generation's garbage collections and of each Kubernetes call the process made (a row's
    "ticks" are then collections or calls), over a window, with the bucket each quantile lies in."""
    table: dict[str, Any] = {}
    parts = ("total", "falcon", "prefect", "database", "cpu", "runqueue", "gc")
    rows = [
        *(f"{loop}/{part}" for loop in LOOPS for part in parts),
        *(f"{prefix}/{step}" for prefix, (_, steps) in STEPS.items() for step in steps),
        "gc/0",
        "gc/1",
        "gc/2",
        *sorted(part for part in window if part.startswith("k8s/")),
    ]
    for part in rows:
        histogram = window.get(part)
        if histogram is None or histogram.count <= 0:
            table[part] = None
            continue
        table[part] = {"ticks": int(histogram.count), "mean": histogram.total / histogram.count}
        for name, q in (("p50", 0.5), ("p99", 0.99)):
            value = quantile(histogram, q)
            table[part][name] = None if value is None else asdict(value)
    return table


def usage_table(samples: list[Sample]) -> dict[str, Any]:
    """Per process group: peak and steady-window median of the PSS and RSS sums, the most processes
    seen, and the CPU cores used (CPU seconds over wall seconds) over the steady window and at the
    busiest interval between two samples."""
    table: dict[str, Any] = {}
    for group in sorted({g for s in samples for g in s.usage}):
        tagged = [(s.phase, (s.at, s.usage[group])) for s in samples if group in s.usage]
        seen = [point for _, point in tagged]
        steady = [point for phase, point in tagged if phase == "steady"]
        pss = [u.pss for _, u in seen]
        table[group] = {
            "pss_peak": None if None in pss else max(p or 0 for p in pss),
            "pss_steady": statistics.median(u.pss or 0 for _, u in steady)
            if steady and None not in pss
            else None,
            "rss_peak": max(u.rss for _, u in seen),
            "rss_steady": statistics.median(u.rss for _, u in steady) if steady else None,
            "processes_max": max(u.processes for _, u in seen),
            "cores_steady": _cores(steady[0], steady[-1]) if len(steady) > 1 else None,
            "cores_peak": max((_cores(a, b) for a, b in itertools.pairwise(seen)), default=None),
        }
    return table


def _cores(first: tuple[float, Usage], last: tuple[float, Usage]) -> float:
    """CPU seconds used between two samples over the wall seconds between them (a process that
    exited in between takes its CPU time out: never below zero)."""
    return max(0.0, last[1].cpu_seconds - first[1].cpu_seconds) / max(1e-9, last[0] - first[0])


def _phase(label: str, seconds: float | None, note: str) -> None:
    print(f"{label:<46} {_seconds(seconds):>9}   ({note})")


def _mib(value: float | None) -> str:
    return "-" if value is None else f"{value / (1 << 20):,.0f}"


def _seconds(value: float | None) -> str:
    return "-" if value is None else f"{value:,.1f}"


def _quantile_cell(value: dict[str, float] | None) -> str:
    if value is None:
        return "-"
    return f"{value['value'] * 1e3:.1f} ({value['lower'] * 1e3:g}-{value['upper'] * 1e3:g})"


def print_report(result: dict[str, Any]) -> None:
    size, emu = result["size"], result["emulator"]
    print(
        f"\n{size['running']} running + {size['waiting']} waiting over {size['queues']} queues "
        f"({size['clusters']} clusters x {size['topologies']} v6e, flex-start), db {result['database']}, "
        f"FALCON_RUNS_IN={result['runs_in'] or '(default)'}; containers {emu['hold_seconds']:g} s / "
        f"{emu['run_seconds']:g} s, pool operations {emu['pool_seconds']:g} s"
    )
    if result.get("falcon_cpus"):
        print(f"Falcon's processes on CPUs {result['falcon_cpus']}, the rest of the stack on the others")
    ramped, steady, drain = result["ramp"], result["steady"], result["drain"]
    print(f"\n{'phase':<46} {'seconds':>9}")
    _phase("ramp: rows in -> all Running", ramped["seconds"], f"peak Running {ramped['peak_running']}")
    _phase(
        "steady window",
        steady["seconds"],
        f"at its start Running {steady['running']}, waiting {steady['waiting']}",
    )
    _phase(
        "drain: waiting rows in -> all rows terminal" if drain["complete"] else "drain: NOT complete (limit)",
        drain["seconds"],
        f"{drain['terminal']} / {drain['total']} terminal",
    )
    _phase(
        "  the waiting rows alone: all terminal",
        drain["waiting_batch_seconds"],
        f"{drain['waiting_batch_rate']:.2f} tasks/s",
    )
    if drain["estimate_seconds"] is not None:
        _phase("  full drain, EXTRAPOLATED from that rate", drain["estimate_seconds"], "an estimate")
    print(f"final statuses: {drain['statuses']}; ERROR lines/tracebacks in logs: {result['log_errors']}")
    runs = result["dispatcher_runs"]
    print(
        f"dispatcher runs: {runs['runs']} ran, {runs['cancelled']} cancelled; none running for "
        f"{runs['down_seconds']:.0f} s in all (longest gap {runs['longest_gap_seconds']:.0f} s)"
    )
    flow = result["flow"]
    print(
        f"waiting tasks: a queue dispatches one every {_seconds(flow['queue_cycle_median_seconds'])} s "
        f"(median); dispatch -> terminal takes {_seconds(flow['beyond_run_median_seconds'])} s "
        f"beyond the run (median); {flow['node_pools_created']} node pools created for "
        f"{size['running'] + size['waiting']} tasks"
    )

    columns = ("pss_peak", "pss_steady", "rss_peak", "rss_steady")
    print(
        f"\n{'MiB, cores':<10}" + "".join(f"{c:>11}" for c in columns) + f"{'processes':>10}"
        f"{'cores_steady':>13}{'cores_peak':>11}"
    )
    for group, row in result["usage"].items():
        cells = "".join(f"{_mib(row[c]):>11}" for c in columns)
        cores = "".join(
            f"{'-' if row[c] is None else format(row[c], '.2f'):>{w}}"
            for c, w in (("cores_steady", 13), ("cores_peak", 11))
        )
        print(f"{group:<10}{cells}{row['processes_max']:>10}{cores}")
    falcon = result["usage"].get("falcon", {})
    peak = falcon.get("pss_peak") or falcon.get("rss_peak")
    if peak is not None:
        verdict = "OK" if peak < MEMORY_GOAL else "MISS"
        print(f"Falcon's processes, peak {_mib(peak)} MiB against the goal < 2 048 MiB: {verdict}")

    for window in ("steady", "drain"):
        ticks = result["ticks"][window]
        header = f"{'ticks':>6} {'p50 (bucket, ms)':>24} {'p99 (bucket, ms)':>24} {'mean':>9}"
        print(f"\ndispatcher, {window:<12} {header}")
        for part, row in ticks.items():
            if row is None:
                print(f"  {part:<22} not exported")
                continue
            print(
                f"  {part:<22} {row['ticks']:>6} {_quantile_cell(row['p50']):>24} "
                f"{_quantile_cell(row['p99']):>24} {row['mean'] * 1e3:>6.1f} ms"
            )
        deferred = result.get("picks_deferred", {}).get(window)
        if deferred is not None:
            print(f"  picks deferred (Prefect answered the slot call busy, or not at all): {deferred:.0f}")
        calls = result.get("api_calls_per_second", {}).get(window)
        if calls:
            print(
                "  API calls per second: " + ", ".join(f"{call} {rate:.2f}" for call, rate in calls.items())
            )
        replaced = result.get("dispatchers_replaced", {}).get(window)
        if replaced:
            print(
                f"  the dispatcher's run was replaced {replaced} time(s) in this window: its ticks are "
                f"summed across the runs, less the old run's last {METRICS_PERIOD_SECONDS:g} s at most"
            )
    steady_falcon = result["ticks"]["steady"].get("tick/falcon")
    if steady_falcon and steady_falcon["p99"]:
        verdict = "OK" if steady_falcon["p99"]["value"] < TICK_GOAL_P99 else "MISS"
        print(f"tick without Prefect calls, steady p99 against the goal < 100 ms: {verdict}")


# --- main ---------------------------------------------------------------------------------------


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    add = parser.add_argument
    add("--running", type=int, default=1000, help="tasks brought to Running first (%(default)s)")
    add("--waiting", type=int, default=10000, help="tasks inserted once those run (%(default)s)")
    add("--queues", type=int, default=20, help="clusters x topologies: 1-4 or a multiple of 4 (%(default)s)")
    add("--db", choices=["mariadb", "sqlite"], default="mariadb")
    add(
        "--prefect-db",
        choices=["sqlite", "postgres"],
        default="sqlite",
        help="the Prefect server's database: SQLite as `falcon local` keeps it, or a throwaway PostgreSQL "
        "as production runs it (%(default)s)",
    )
    add("--runs-in", choices=["dispatcher", "deployments"], help="FALCON_RUNS_IN (default: Falcon's)")
    add(
        "--hold-seconds", type=float, help="run time of the first tasks (default: ramp limit + steady window)"
    )
    add("--run-seconds", type=float, default=5.0, help="run time of the waiting tasks (%(default)s)")
    add("--pool-seconds", type=float, default=0.2, help="emulated node-pool create/delete (%(default)s)")
    add("--flex-delay", type=float, default=0.2, help="emulated flex-start capacity delay (%(default)s)")
    add("--pod-seconds", type=float, default=0.2, help="emulated pod start (%(default)s)")
    add(
        "--poll-seconds", type=float, default=0.5, help="FALCON_POLL_SECONDS for pools and pods (%(default)s)"
    )
    add("--ramp-limit", type=float, help="seconds allowed for the ramp (default: 1 s x running + 120)")
    add("--steady-seconds", type=float, default=120.0, help="the measured window (%(default)s)")
    add("--drain-limit", type=float, default=3600.0, help="stop the drain after this (%(default)s)")
    add("--sample-seconds", type=float, default=2.0, help="memory sampling period (%(default)s)")
    add(
        "--health-port",
        type=int,
        help="FALCON_HEALTH_PORT, where the dispatcher's /metrics is scraped (default: a free port; "
        "0: off, and no tick figures)",
    )
    add("--json", type=Path, help="also write the results here")
    add("--keep-home", action="store_true", help="keep FALCON_HOME (logs; MariaDB's slow-query log)")
    add(
        "--pin-falcon",
        type=_cpus,
        metavar="CPUS",
        help="run Falcon's processes on these CPUs (e.g. 0 or 0,1) and the rest of the stack and the "
        "benchmark on the others, as where Prefect's server, MySQL and GKE are other machines "
        "(default: all share every CPU)",
    )
    return parser.parse_args()


def _cpus(text: str) -> set[int]:
    cpus = {int(cpu) for cpu in text.split(",")}
    every = set(range(os.cpu_count() or 1))
    if not cpus < every:
        raise argparse.ArgumentTypeError(f"{text}: not some but not all of the CPUs {sorted(every)}")
    return cpus


@dataclass(frozen=True)
class Plan:
    shape: Shape
    ramp_limit: float
    hold: float  # run time of the ramp's tasks: past the ramp and the steady window

    @classmethod
    def of(cls, args: argparse.Namespace) -> Plan:
        ramp_limit = args.ramp_limit or RAMP_SECONDS_PER_TASK * args.running + 120
        return cls(Shape.of(args.queues), ramp_limit, args.hold_seconds or ramp_limit + args.steady_seconds)


@dataclass
class Stack:
    home: Path
    url: str
    api_url: str
    emulator_url: str
    runner: subprocess.Popen[bytes]
    engine: sa.Engine
    sampler: Sampler
    health_port: int


@contextmanager
def scale_stack(args: argparse.Namespace, plan: Plan) -> Iterator[Stack]:
    """The stack on a fresh FALCON_HOME (and MariaDB), the clusters registered, Falcon served and
    its processes sampled; all stopped on exit."""
    home = Path(tempfile.mkdtemp(prefix="falcon-scale-", dir="/tmp"))
    health_port = free_port() if args.health_port is None else args.health_port
    os.environ.update(
        FALCON_HOME=str(home),
        FALCON_HEALTH_PORT=str(health_port),
        FALCON_POLL_SECONDS=f"{args.poll_seconds:g}",
        FALCON_GKE_OPERATIONS_PER_CLUSTER=str(GKE_OPERATIONS),
    )
    for name in ("FALCON_DATABASE_URL", "PREFECT_API_URL"):
        os.environ.pop(name, None)
    if args.runs_in:
        os.environ["FALCON_RUNS_IN"] = args.runs_in
    with ExitStack() as stack:
        stack.callback(_remove_home, home, args.keep_home)
        if args.db == "mariadb":
            slow_log = home / "mariadb-slow.log" if args.keep_home else None
            os.environ["FALCON_DATABASE_URL"] = stack.enter_context(mariadb(slow_log=slow_log))
        get_settings.cache_clear()
        url = get_settings().resolved_database_url
        upgrade(url)
        register_clusters(url, plan.shape)
        config = home / "emulator.yaml"
        timings = (args.pool_seconds, args.flex_delay, args.pod_seconds)
        config.write_text(yaml.safe_dump(emulator_config(plan.shape, *timings)))
        started = time.monotonic()
        api_url = stack.enter_context(prefect_api(home / "prefect", args.prefect_db))
        emulator_url, emulator_proc = stack.enter_context(
            emulator_process(config, home / "emulator", home / "emulator.log")
        )
        runner = stack.enter_context(served_stack(home, api_url, emulator_url))
        prefect_pid, maria_pid, postgres_pid = find_servers(api_url, url, args.prefect_db)
        processes = Processes(runner.pid, prefect_pid, emulator_proc.pid, maria_pid, postgres_pid)
        sampler = Sampler(processes, args.sample_seconds, args.pin_falcon)
        sampler.start()
        stack.callback(sampler.stop)
        engine = sa.create_engine(url)
        stack.callback(engine.dispose)
        print(
            f"FALCON_HOME={home}  stack up in {time.monotonic() - started:.1f}s; "
            f"dispatcher metrics on :{health_port}",
            flush=True,
        )
        yield Stack(home, url, api_url, emulator_url, runner, engine, sampler, health_port)


def ramp(args: argparse.Namespace, plan: Plan, stack: Stack, timeline: Timeline) -> dict[str, Any]:
    """Phase 1: the first tasks, until all of them run."""
    stack.sampler.phase = "ramp"
    print(f"ramp: {args.running} rows, containers of {plan.hold:g} s", flush=True)
    started = time.monotonic()
    insert_rows(stack.url, 0, args.running, plan.shape.topologies, plan.hold)
    if not wait_until(stack, timeline, lambda c: c["new"] < args.running, INTAKE_LIMIT)[0]:
        raise RuntimeError(f"the dispatcher took in no row within {INTAKE_LIMIT:g} s; {_why_not(stack.home)}")
    done, _ = wait_until(stack, timeline, lambda c: c["Running"] >= args.running, plan.ramp_limit)
    peak = timeline.peak("Running")
    print(f"ramp {'done' if done else 'LIMIT HIT'}: peak Running {peak}", flush=True)
    return {"seconds": time.monotonic() - started if done else None, "peak_running": peak}


def _why_not(home: Path) -> str:
    """What local.log says about a dispatcher that is not ticking."""
    log = (home / "local.log").read_text(errors="replace")
    if "Address already in use" in log:
        return (
            "a flow run could not bind FALCON_HEALTH_PORT (the dispatcher and the tidal controller both "
            f"serve it): run with --health-port 0 for no tick figures; see {home}/local.log"
        )
    return f"see {home}/local.log"


def steady_and_drain(
    args: argparse.Namespace, plan: Plan, stack: Stack, timeline: Timeline
) -> dict[str, Any]:
    """Phases 2-4: the waiting tasks in, the steady window, then the drain."""
    total = args.running + args.waiting
    print(f"waiting: {args.waiting} rows, containers of {args.run_seconds:g} s", flush=True)
    inserted = insert_rows(stack.url, args.running, args.waiting, plan.shape.topologies, args.run_seconds)
    wait_until(stack, timeline, lambda c: c["new"] == 0, INTAKE_LIMIT)
    clear_of_handover(stack.api_url, args.steady_seconds)
    stack.sampler.phase = "steady"
    follower = Follower(stack.health_port)
    follower.start()
    first = after_ticks(stack.health_port, WINDOW_AFTER_TICKS)
    steady_start = time.monotonic()
    follower.open("steady", first)
    at_start = timeline.points[-1][1]
    time.sleep(args.steady_seconds)
    steady_end = time.monotonic()
    follower.open("drain")
    stack.sampler.phase = "drain"
    print("steady window over; draining", flush=True)
    limit = max(0.0, inserted + args.drain_limit - time.monotonic())
    drained, final = wait_until(stack, timeline, lambda c: c["terminal"] >= total, limit)
    seconds = time.monotonic() - inserted
    follower.close()
    stack.sampler.stop()
    waiting_done = timeline.first("later_terminal", args.waiting)
    waiting_seconds = None if waiting_done is None else waiting_done - inserted
    rate = final["later_terminal"] / (waiting_seconds or seconds)
    left = args.waiting - final["later_terminal"]
    return {
        "steady": {
            "seconds": steady_end - steady_start,
            "running": at_start["Running"],
            "waiting": at_start["waiting"],
        },
        "drain": {
            "complete": drained,
            "seconds": seconds,
            "waiting_batch_seconds": waiting_seconds,
            "terminal": final["terminal"],
            "total": total,
            "waiting_batch_rate": rate,
            "estimate_seconds": seconds + left / rate if left and rate > 0 else None,
            "statuses": {s.value: final[s.value] for s in TERMINAL if final[s.value]},
        },
        "ticks": {name: tick_table(w.histograms) for name, w in follower.windows.items()},
        "picks_deferred": {name: w.picks_deferred for name, w in follower.windows.items()},
        "dispatchers_replaced": {name: w.replaced for name, w in follower.windows.items()},
        "api_calls_per_second": {name: _per_second(w) for name, w in follower.windows.items()},
    }


def _per_second(window: Window) -> dict[str, float]:
    """The window's API calls per second, by "<api>/<call>", most made first."""
    seconds = (window.ended or time.monotonic()) - window.began
    made = sorted(window.api_calls.items(), key=lambda item: -item[1])
    return {call: count / seconds for call, count in made if count} if seconds > 0 else {}


def flow_figures(stack: Stack, first_waiting: str, run_seconds: float) -> dict[str, Any]:
    """Where the waiting tasks' time went, from the rows and the emulator: per queue, the median gap
    between two consecutive dispatches (the queue's cycle: one acquisition at a time); the median of
    dispatch -> terminal minus the container's run time (pod start, following, release); node pools
    created against tasks run."""
    job = JobRow.__table__
    query = sa.select(job.c.cluster_id, job.c.spec, job.c.dispatched_at, job.c.finished_at).where(
        job.c.id >= first_waiting, job.c.id.like(f"{PREFIX}%"), job.c.dispatched_at.is_not(None)
    )
    with stack.engine.connect() as conn:
        rows = conn.execute(query).all()
    dispatches: dict[tuple[str, str], list[datetime]] = {}
    beyond_run: list[float] = []
    for cluster_id, spec, dispatched, finished in rows:
        dispatches.setdefault((cluster_id, spec["topology"]), []).append(dispatched)
        if finished is not None:
            beyond_run.append((finished - dispatched).total_seconds() - run_seconds)
    gaps = [
        (b - a).total_seconds() for times in dispatches.values() for a, b in itertools.pairwise(sorted(times))
    ]
    state = httpx.get(f"{stack.emulator_url}/emulator/state", timeout=30).json()
    return {
        "queue_cycle_median_seconds": statistics.median(gaps) if gaps else None,
        "beyond_run_median_seconds": statistics.median(beyond_run) if beyond_run else None,
        "node_pools_created": sum(c["counters"]["nodePoolsCreated"] for c in state["clusters"]),
    }


def clear_of_handover(api_url: str, window_seconds: float) -> None:
    """Wait out a dispatcher handover due within the window. A run loops 590 s and the next one
    starts at the 600 s interval: at full size intake ends about then, and two full-size windows
    in a row held a handover, the new run's start (its book read, every Message written) with it."""
    ahead = seconds_to_handover(api_url)
    if ahead is None or ahead > window_seconds + HANDOVER_MARGIN_SECONDS:
        return
    print(f"the dispatcher hands over in {ahead:.0f} s: the steady window opens after it", flush=True)
    time.sleep(max(0.0, ahead) + HANDOVER_MARGIN_SECONDS)


def seconds_to_handover(api_url: str) -> float | None:
    """Seconds until the dispatcher deployment's next scheduled run is due; None without one."""
    body = {
        "deployments": {"name": {"any_": ["dispatcher"]}},
        "flow_runs": {"state": {"type": {"any_": ["SCHEDULED"]}}},
        "sort": "EXPECTED_START_TIME_ASC",
        "limit": 1,
    }
    runs = httpx.post(f"{api_url}/flow_runs/filter", json=body, timeout=30).json()
    if not runs or not runs[0].get("expected_start_time"):
        return None
    due = datetime.fromisoformat(runs[0]["expected_start_time"])
    return (due - datetime.now(UTC)).total_seconds()


def dispatcher_runs(api_url: str) -> dict[str, Any]:
    """The dispatcher deployment's runs from the Prefect API: how many ran, how many were cancelled
    (a scheduled one colliding with a run still looping), and the time with none running between
    the first start and the last end (or now), with the longest such gap."""
    body = {"deployments": {"name": {"any_": ["dispatcher"]}}, "sort": "START_TIME_ASC", "limit": 200}
    runs = httpx.post(f"{api_url}/flow_runs/filter", json=body, timeout=30).json()
    spans = [
        (
            datetime.fromisoformat(r["start_time"]),
            datetime.fromisoformat(r["end_time"]) if r["end_time"] else None,
        )
        for r in runs
        if r["start_time"] and r["state_type"] != "CANCELLED"
    ]
    now = datetime.now(UTC)
    gaps, covered_until = [], spans[0][0] if spans else now
    for start, end in spans:
        gaps.append(max(0.0, (start - covered_until).total_seconds()))
        covered_until = max(covered_until, end or now)
    gaps.append(max(0.0, (now - covered_until).total_seconds()))
    return {
        "runs": len(spans),
        "cancelled": sum(1 for r in runs if r["state_type"] == "CANCELLED"),
        "down_seconds": sum(gaps),
        "longest_gap_seconds": max(gaps),
    }


def log_errors(home: Path) -> dict[str, int]:
    """ERROR lines and tracebacks in Falcon's and the emulator's logs: how often something fell over."""
    counts = {}
    for name in ("local.log", "emulator.log"):
        path = home / name
        text = path.read_text(errors="replace") if path.exists() else ""
        counts[name] = sum(
            1 for line in text.splitlines() if "| ERROR" in line or line.startswith("Traceback")
        )
    return counts


def main() -> int:
    args = parse_args()
    plan = Plan.of(args)
    with scale_stack(args, plan) as stack:
        timeline = Timeline(task_id(args.running))
        ramped = ramp(args, plan, stack, timeline)
        measured = steady_and_drain(args, plan, stack, timeline)
        result = {
            "command": " ".join(sys.argv),
            "database": args.db,
            "prefect_database": args.prefect_db,
            "runs_in": args.runs_in,
            "falcon_cpus": sorted(args.pin_falcon) if args.pin_falcon else None,
            "size": {
                "running": args.running,
                "waiting": args.waiting,
                "queues": args.queues,
                "clusters": plan.shape.clusters,
                "topologies": "/".join(plan.shape.topologies),
            },
            "emulator": {
                "pool_seconds": args.pool_seconds,
                "flex_delay": args.flex_delay,
                "pod_seconds": args.pod_seconds,
                "hold_seconds": plan.hold,
                "run_seconds": args.run_seconds,
            },
            "ramp": ramped,
            **measured,
            "usage_measure": "PSS, RSS and CPU s / wall s summed over each process tree",
            "usage": usage_table(stack.sampler.samples),
            "log_errors": log_errors(stack.home),
            "dispatcher_runs": dispatcher_runs(stack.api_url),
            "flow": flow_figures(stack, task_id(args.running), args.run_seconds),
        }
        print_report(result)
        if args.json:
            args.json.write_text(json.dumps(result, indent=2))
            print(f"\nwrote {args.json}")
    return 0


def _remove_home(home: Path, keep: bool) -> None:
    if keep:
        print(f"kept {home}")
        return
    shutil.rmtree(home, ignore_errors=True)


if __name__ == "__main__":
    run_main(main)
