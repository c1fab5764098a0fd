"""Release latency with the stack as `falcon local` runs it (issue 10: "Fast release").

Target: a Job's end -> the task's terminal status, GKE's own delete-operation time excluded,
p50 <= 3 s and p99 <= 10 s; a kept pool offered to the next task as soon as the Job ends.

The stack is started by benchmarks/local_stack.py as `falcon demo` starts it (a throwaway Prefect
server, the emulator's built-in config: 3 s node-pool creates and deletes, GKE's node-pool
operations side by side up to 5 per cluster; the demo clusters; the `falcon local` child serving
Falcon's deployments), on SQLite or `--db mariadb`.

Workload: one closed-loop stream per topology (2x2, 2x4, 4x4). A stream submits a round of
1, 1, 4 or 6 tasks at once (seeded; intake spreads a round over the 2 clusters), waits until
all of them are terminal, pauses `--pause` seconds, and goes on until it has submitted its share
of `--count`. Containers run `--run-seconds` (EMULATOR_RUN_SECONDS). So within a round the next
same-queue task waits when a Job ends (the pool is kept for it), and after a round's last task
none waits (the pool is deleted, or kept by Falcon's keep-or-delete rule): each task is
classified by what happened to its pool.

Measured, all on this process's monotonic clock:
- Job end: the first Kubernetes watch event (one watch on Jobs per cluster, opened before the
  first task) showing the Job's outcome: its interim SuccessCriteriaMet or FailureTarget condition,
  or Complete or Failed. This is the earliest moment anyone can know the Job ended; the emulator
  sets the interim one at the first simulation tick (0.1 s) after the last pod terminated, the
  terminal one a tick later, as the Job controller does since Kubernetes 1.31. Its completionTime
  has only second resolution, hence the watch.
- Terminal status: the first poll (every 20 ms, a connection of its own) showing the row
  Succeeded/Failed/Aborted.
- Falcon's steps between the two, polled likewise: the outcome recorded (progress phase
  releasing), the pool marked deleting, the pool offered (idle, a new idle_since) or held by
  another task.
- GKE's delete operation: startTime and endTime of the DELETE_NODE_POOL operation on the task's
  pool (the emulator's GKE operations list, microsecond timestamps set at its 0.1 s ticks), a
  pool counted as deleted for a task when that operation started after the task's Job ended and
  before anyone else took the pool.

Reported (p50/p90/p99/max): (a) Job end -> terminal status, for kept and deleted pools;
(b) the same minus the part of GKE's delete operation that fell between the two (target);
(c) GKE's delete operation alone; (d) Job end -> the pool offered (idle, or held by another
task), and -> held by the next task for kept pools whose next task was already inserted when
the Job ended (one that came later would measure the workload, not Falcon).

Run:  .venv/bin/python benchmarks/bench_release_latency.py [--count 120] [--db sqlite|mariadb]
(the environment reaches `falcon local`: e.g. FALCON_RUNS_IN=deployments measures run-per-task).
"""

from __future__ import annotations

import argparse
import json
import random
import threading
import time
from collections.abc import Hashable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import datetime

import httpx
import sqlalchemy as sa
from local_stack import POLL_SECONDS, Poller, Seen, Stack, insert, local_stack, percentile, run_main

from falcon.adapters.db.orm import JobRow, NodePoolRow, TaskProgressRow
from falcon.adapters.db.session import session_scope
from falcon.domain.lifecycle import Phase, PoolState
from falcon.domain.status import TERMINAL
from falcon.local import DEMO_CLUSTERS

TOPOLOGIES = ["2x2", "2x4", "4x4"]
ACTORS = ["alice", "bob", "carol", "dave"]
ROUND_SIZES = [1, 1, 4, 6]  # intake spreads a round over both clusters: about half the pools are kept
NAMESPACE = "falcon-jobs"
TARGET_P50, TARGET_P99 = 3.0, 10.0
PREFIX = "release-"
TERMINAL_Q, HOLDERS_Q, RELEASING_Q, DELETING_Q, IDLE_Q = (
    "terminal",
    "holders",
    "releasing",
    "deleting",
    "idle",
)
ROUND_TIMEOUT = 600.0  # seconds a round may take before the benchmark gives up


# --- observing ----------------------------------------------------------------------------------


# A Job's outcome: the interim conditions come first, the terminal ones once every pod has gone.
ENDED = ("SuccessCriteriaMet", "FailureTarget", "Complete", "Failed")


class JobEnds(threading.Thread):
    """Watch one cluster's Jobs; note when each first shows its outcome (``ENDED``)."""

    def __init__(self, base_url: str, ends: dict[str, float], lock: threading.Lock) -> None:
        super().__init__(daemon=True, name=f"watch-{base_url.rsplit('/', 1)[-1]}")
        self.url = f"{base_url}/apis/batch/v1/namespaces/{NAMESPACE}/jobs"
        self.ends, self.lock = ends, lock
        self.ready = threading.Event()
        self.stopping = threading.Event()

    def run(self) -> None:
        with httpx.Client(timeout=httpx.Timeout(10, read=None)) as client:
            version = client.get(self.url).json()["metadata"]["resourceVersion"]
            params = {"watch": "true", "resourceVersion": version, "timeoutSeconds": "7200"}
            with client.stream("GET", self.url, params=params) as stream:
                self.ready.set()
                for line in stream.iter_lines():
                    if self.stopping.is_set():
                        return
                    if line:
                        self._note(json.loads(line), time.monotonic())

    def _note(self, event: dict[str, object], at: float) -> None:
        job = event.get("object")
        if event.get("type") not in ("ADDED", "MODIFIED") or not isinstance(job, dict):
            return
        conditions = job.get("status", {}).get("conditions") or []
        if any(c.get("type") in ENDED and c.get("status") == "True" for c in conditions):
            with self.lock:
                self.ends.setdefault(job["metadata"]["name"], at)


@dataclass(frozen=True)
class Operation:
    pool: str
    start: float  # monotonic
    end: float | None


def delete_operations(emulator_url: str, wall_to_mono: float) -> list[Operation]:
    """GKE's DELETE_NODE_POOL operations of the demo projects, times moved to the monotonic clock."""
    found = []
    for project in sorted({project for _, project, *_ in DEMO_CLUSTERS}):
        answer = httpx.get(f"{emulator_url}/v1/projects/{project}/locations/-/operations", timeout=30)
        for op in answer.json().get("operations", []):
            if op["operationType"] == "DELETE_NODE_POOL":
                end = op.get("endTime")
                found.append(
                    Operation(
                        op["targetLink"].rsplit("/", 1)[-1],
                        _mono(op["startTime"], wall_to_mono),
                        _mono(end, wall_to_mono) if end else None,
                    )
                )
    return found


def _mono(rfc3339: str, wall_to_mono: float) -> float:
    return datetime.fromisoformat(rfc3339.replace("Z", "+00:00")).timestamp() - wall_to_mono


def terminal_query() -> sa.Select[str, str]:
    return sa.select(JobRow.id, JobRow.status).where(
        JobRow.id.like(f"{PREFIX}%"), JobRow.status.in_([s.value for s in TERMINAL])
    )


def releasing_query() -> sa.Select[str]:
    """Tasks whose outcome Falcon has recorded (phase releasing, or done already)."""
    return sa.select(TaskProgressRow.task_id).where(
        TaskProgressRow.task_id.like(f"{PREFIX}%"),
        TaskProgressRow.phase.in_([Phase.RELEASING.value, Phase.DONE.value]),
    )


def deleting_query() -> sa.Select[str]:
    """Pools a release (or the reaper) has marked for deletion."""
    return sa.select(NodePoolRow.name).where(
        NodePoolRow.state.in_([PoolState.DELETING.value, PoolState.DELETED.value])
    )


def idle_query() -> sa.Select[str, datetime | None]:
    """Pools offered to their queue: each idle spell is its own (pool, idle_since)."""
    return sa.select(NodePoolRow.name, NodePoolRow.idle_since).where(
        NodePoolRow.state == PoolState.IDLE.value
    )


def holders_query() -> sa.Select[str, str | None]:
    return sa.select(NodePoolRow.name, NodePoolRow.holder_task_id).where(
        NodePoolRow.holder_task_id.is_not(None)
    )


# --- the workload -------------------------------------------------------------------------------


def stream(
    stack: Stack, poller: Poller, topology: str, count: int, args: argparse.Namespace
) -> dict[str, float]:
    """Rounds of tasks of one topology, each round submitted at once and awaited; each task's
    INSERT commit time."""
    rng = random.Random(f"{args.seed}-{topology}")
    submitted: dict[str, float] = {}
    while len(submitted) < count:
        size = min(rng.choice(ROUND_SIZES), count - len(submitted))
        batch = [f"{PREFIX}{topology}-{len(submitted) + i:03d}" for i in range(size)]
        for i, task_id in enumerate(batch):
            submitted[task_id] = insert(
                stack.url, task_id, ACTORS[i % len(ACTORS)], topology, args.run_seconds
            )
        deadline = time.monotonic() + ROUND_TIMEOUT
        while any(poller.first_seen(TERMINAL_Q, t) is None for t in batch):
            if stack.runner.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"round {batch} did not end; see local.log")
            time.sleep(0.1)
        time.sleep(args.pause)
    return submitted


# --- the measures -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Release:
    task_id: str
    status: str
    job_end: float
    releasing: float | None  # Falcon recorded the outcome (phase releasing)
    terminal: float
    marked: float | None  # the pool marked for deletion (deleted pools)
    delete: Operation | None  # GKE's deletion of the task's pool, if its release deleted it
    offered: float | None  # when the task's pool went idle or to another task (kept pools)
    taken: float | None  # when another task held the task's pool (kept pools)
    taker_waited: bool  # that task was inserted before this task's Job ended

    @property
    def total(self) -> float:
        return self.terminal - self.job_end

    @property
    def gke_part(self) -> float:
        """The part of GKE's delete operation that lies between the Job's end and the terminal status."""
        if self.delete is None:
            return 0.0
        end = self.delete.end if self.delete.end is not None else self.terminal
        return max(0.0, min(end, self.terminal) - max(self.delete.start, self.job_end))


@dataclass(frozen=True)
class Sightings:
    """What was seen, by task id, Job name or pool name, on the monotonic clock."""

    job_ends: dict[str, float]
    terminal: dict[Hashable, Seen]
    releasing: dict[Hashable, Seen]
    deleting: dict[Hashable, Seen]
    holders: dict[Hashable, Seen]  # keyed (pool, holder task)
    idle: dict[Hashable, Seen]  # keyed (pool, idle since)
    inserted: dict[str, float]  # task id -> its INSERT's commit
    operations: list[Operation]


def releases(
    rows: Sequence[tuple[str, str, str | None, str | None]], seen: Sightings
) -> tuple[list[Release], list[str]]:
    """One Release per task whose Job end and terminal status were both seen; the others' ids."""
    found, missing = [], []
    for task_id, status, job_name, pool in rows:
        job_end = seen.job_ends.get(job_name or "")
        terminal = seen.terminal.get(task_id)
        if job_end is None or terminal is None:
            missing.append(task_id)
            continue
        taken, taker = min(
            (
                (s.at, str(key[1]))
                for key, s in seen.holders.items()
                if isinstance(key, tuple) and key[0] == pool and key[1] != task_id and s.at >= job_end
            ),
            default=(None, ""),
        )
        deletion = next(
            (
                op
                for op in sorted(seen.operations, key=lambda o: o.start)
                if op.pool == pool and op.start >= job_end and (taken is None or op.start < taken)
            ),
            None,
        )
        idle = min(
            (
                s.at
                for key, s in seen.idle.items()
                if isinstance(key, tuple) and key[0] == pool and s.at >= job_end
            ),
            default=None,
        )
        offered = min((t for t in (idle, taken) if t is not None), default=None)
        releasing = seen.releasing.get(task_id)
        marked = seen.deleting.get(pool or "") if deletion else None
        found.append(
            Release(
                task_id,
                status,
                job_end,
                releasing.at if releasing else None,
                terminal.at,
                marked.at if marked else None,
                deletion,
                None if deletion else offered,
                None if deletion else taken,
                seen.inserted.get(taker, float("inf")) <= job_end,
            )
        )
    return found, missing


def _gaps(pairs: list[tuple[float | None, float | None]]) -> list[float]:
    return [b - a for a, b in pairs if a is not None and b is not None]


def _describe(r: Release) -> str:
    """One release's steps, in seconds after its Job's end."""

    def after(at: float | None) -> str:
        return "-" if at is None else f"{at - r.job_end:.2f}"

    steps = [f"releasing {after(r.releasing)}"]
    if r.delete is not None:
        end = after(r.delete.end)
        steps += [f"marked deleting {after(r.marked)}", f"GKE delete {after(r.delete.start)}..{end}"]
    else:
        steps += [f"offered {after(r.offered)}", f"taken {after(r.taken)}"]
    return f"{r.task_id}: {', '.join(steps)}, terminal {after(r.terminal)}"


def report(found: list[Release], missing: list[str], elapsed: float) -> bool:
    deleted = [r for r in found if r.delete is not None]
    kept = [r for r in found if r.delete is None]
    falcon_part = [r.total - r.gke_part for r in found]
    ops = [r.delete for r in deleted if r.delete is not None]
    lines: list[tuple[str, list[float]]] = [
        ("(a) Job end -> terminal status, all", [r.total for r in found]),
        ("    pool kept", [r.total for r in kept]),
        ("    pool deleted", [r.total for r in deleted]),
        ("(b) (a) minus GKE's delete op, all  [target]", falcon_part),
        ("    pool deleted", [r.total - r.gke_part for r in deleted]),
        ("  Job end -> outcome recorded (releasing)", _gaps([(r.job_end, r.releasing) for r in found])),
        ("  kept: releasing -> terminal", _gaps([(r.releasing, r.terminal) for r in kept])),
        ("  deleted: releasing -> pool marked deleting", _gaps([(r.releasing, r.marked) for r in deleted])),
        (
            "  deleted: marked -> GKE delete op start",
            _gaps([(r.marked, o.start) for r, o in zip(deleted, ops, strict=True)]),
        ),
        (
            "  deleted: GKE delete op end -> terminal",
            _gaps([(o.end, r.terminal) for r, o in zip(deleted, ops, strict=True)]),
        ),
        ("(c) GKE delete operation", _gaps([(o.start, o.end) for o in ops])),
        ("(d) Job end -> pool offered (idle or handed on)", _gaps([(r.job_end, r.offered) for r in kept])),
        (
            "    Job end -> pool held by a task that waited",
            _gaps([(r.job_end, r.taken) for r in kept if r.taker_waited]),
        ),
    ]
    print(f"\n{'measure':<46} {'n':>4} {'p50 s':>7} {'p90 s':>7} {'p99 s':>7} {'max s':>7}")
    for label, values in lines:
        if values:
            cells = " ".join(f"{percentile(values, q):>7.2f}" for q in (50, 90, 99))
            print(f"{label:<46} {len(values):>4} {cells} {max(values):>7.2f}")
        else:
            print(f"{label:<46} {0:>4} {'-':>7} {'-':>7} {'-':>7} {'-':>7}")
    statuses: dict[str, int] = {}
    for r in found:
        statuses[r.status] = statuses.get(r.status, 0) + 1
    never_taken = sum(1 for r in kept if r.taken is None)
    later = sum(1 for r in kept if r.taken is not None and not r.taker_waited)
    unmeasured = f"{len(missing)}{': ' + ', '.join(missing[:5]) if missing else ''}"
    print(
        f"\ntasks measured {len(found)} ({', '.join(f'{k} {v}' for k, v in sorted(statuses.items()))}); "
        f"pools deleted {len(deleted)}, kept {len(kept)} (taken by a task waiting at the Job's end "
        f"{len(kept) - never_taken - later}, by one that came later {later}, by none {never_taken}); "
        f"not measured {unmeasured}"
    )
    for r in sorted(found, key=lambda r: r.total - r.gke_part)[-3:]:
        print(f"slow: {_describe(r)}")
    ok = (
        bool(falcon_part)
        and percentile(falcon_part, 50) <= TARGET_P50
        and percentile(falcon_part, 99) <= TARGET_P99
    )
    print(
        f"target (b) p50<={TARGET_P50:g}s p99<={TARGET_P99:g}s: {'OK' if ok else 'MISS'}; "
        f"resolution: Job end 0.1 s (emulator tick), database states {POLL_SECONDS * 1e3:.0f} ms poll; "
        f"workload took {elapsed:.0f} s"
    )
    return ok and not missing


# --- main ---------------------------------------------------------------------------------------


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--count", type=int, default=120, help="tasks in all (default %(default)s)")
    parser.add_argument(
        "--run-seconds", type=float, default=3.0, help="container run time (default %(default)s)"
    )
    parser.add_argument(
        "--pause", type=float, default=4.0, help="seconds between a stream's rounds (default %(default)s)"
    )
    parser.add_argument("--seed", type=int, default=10)
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
    with local_stack(args.db, "falcon-release-", args.keep_home, prefect_db=args.prefect_db) as stack:
        ends: dict[str, float] = {}
        lock = threading.Lock()
        watchers = [
            JobEnds(f"{stack.emulator_url}/k8s/{project}/{location}/{name}", ends, lock)
            for name, project, location, *_ in DEMO_CLUSTERS
        ]
        for watcher in watchers:
            watcher.start()
            watcher.ready.wait(30)
        queries = {
            TERMINAL_Q: terminal_query(),
            RELEASING_Q: releasing_query(),
            DELETING_Q: deleting_query(),
            HOLDERS_Q: holders_query(),
            IDLE_Q: idle_query(),
        }
        poller = Poller(stack.url, queries, {HOLDERS_Q: 2, IDLE_Q: 2})
        poller.start()
        wall_to_mono = time.time() - time.monotonic()
        started = time.monotonic()
        try:
            shares = [
                args.count // len(TOPOLOGIES) + (i < args.count % len(TOPOLOGIES))
                for i in range(len(TOPOLOGIES))
            ]
            with ThreadPoolExecutor(len(TOPOLOGIES)) as pool:
                futures = [
                    pool.submit(stream, stack, poller, t, n, args)
                    for t, n in zip(TOPOLOGIES, shares, strict=True)
                ]
                inserted = {t: at for f in futures for t, at in f.result().items()}
        finally:
            poller.stop()
            for watcher in watchers:
                watcher.stopping.set()
        elapsed = time.monotonic() - started
        with session_scope(stack.url) as session:
            rows = session.execute(
                sa.select(JobRow.id, JobRow.status, JobRow.k8s_job_name, JobRow.node_pool_name).where(
                    JobRow.id.in_(inserted)
                )
            ).all()
        with lock:
            job_ends = dict(ends)
        seen = Sightings(
            job_ends,
            poller.snapshot(TERMINAL_Q),
            poller.snapshot(RELEASING_Q),
            poller.snapshot(DELETING_Q),
            poller.snapshot(HOLDERS_Q),
            poller.snapshot(IDLE_Q),
            inserted,
            delete_operations(stack.emulator_url, wall_to_mono),
        )
        found, missing = releases([(r.id, r.status, r.k8s_job_name, r.node_pool_name) for r in rows], seen)
        ok = report(found, missing, elapsed)
    return 0 if ok else 1


if __name__ == "__main__":
    run_main(main)
