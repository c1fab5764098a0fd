"""How far off is `falcon task why`'s ETA to Running? A replayed workload through a model of the queues.

The workload is benchmarks/workload.py's (bursty, trickle, daily), stretched to production's
scale: arrivals over ``--hours``, run times log-normal (median 30 min). It is replayed through a
discrete-event model of one cluster's queues, as Falcon runs them:

* one acquisition at a time per queue (cluster, topology), from its pick to all pods Running;
  waiting tasks are picked by ``domain/scheduling.pick_next`` (FIFO per actor, round-robin);
* an acquisition reuses an idle pool of its queue (pods start: ~1 min), else creates one on the
  reservation while it has room (~6 min, little spread), else a flex-start one (~15 min, a heavy
  tail: p90 ~40 min); creation times are log-normal, drawn per pool;
* a finished task's pool is kept while a task of its queue waits, and handed over to the
  acquiring task when its own pool is still being created (README, *Keeping idle node pools*);
  otherwise deleted, giving its reservation nodes back.

Each task asks ``domain/eta.estimate_to_running`` at its arrival and again 10, 30 and 60 minutes
later if it still waits, from the queue's acquisitions completed so far (exactly what `why` reads:
the last HISTORY, pick to Running), its position by ``scheduling.queue_positions`` and the current
acquisition's elapsed time. The answer is compared with when it actually ran. Reported per shape
over several seeds: how many estimates there were and the share with no estimate, the median and
p90 absolute error in minutes and in % of the actual time, and the coverage of the 80 % interval
(the share of actual times inside it). A naive baseline (position x the median acquisition, no
elapsed time) puts the errors in context.

Run: .venv/bin/python benchmarks/bench_eta.py [--seeds 1,2,3,4,5] [--tasks 150] [--json]
"""

from __future__ import annotations

import argparse
import heapq
import itertools
import json
import math
import random
import statistics
import sys
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from workload import SHAPES, SyntheticTask, WorkloadParams, generate

from falcon.domain.eta import HISTORY, Estimate, estimate_to_running
from falcon.domain.scheduling import WaitingTask, pick_next, queue_positions

T0 = datetime(2026, 12, 1, tzinfo=UTC)
RESERVATION_NODES = 8
POD_START = (60.0, 0.3)  # log-normal (median seconds, sigma): image pull and container start
CREATE = {"reservation": (360.0, 0.25), "flex-start": (900.0, 0.8)}
ASK_AFTER = (0.0, 600.0, 1800.0, 3600.0)  # seconds after arrival at which a waiting task asks
POSITIONS = (("1", 1, 1), ("2-3", 2, 3), ("4-7", 4, 7), ("8+", 8, 10**9))  # how the error grows along a queue


@dataclass
class Pool:
    queue: str
    mode: str
    nodes: int
    holder: str | None  # the task it is for; None once handed over or idle
    ready: bool = False


@dataclass
class Queue:
    waiting: list[WaitingTask] = field(default_factory=list)
    last_actor: str | None = None
    acquirer: str | None = None
    acquiring_since: float = 0.0
    acquirer_pool: Pool | None = None  # the pool being created for the acquirer, if any
    idle: list[Pool] = field(default_factory=list)
    history: list[float] = field(default_factory=list)  # acquisitions pick to Running, in seconds


@dataclass(frozen=True)
class Asked:
    task_id: str
    at: float
    moment: str  # "arrival" or "waiting"
    position: int
    elapsed: float | None  # the current acquisition's, when one runs
    estimate: Estimate | None
    naive: float | None


class Model:
    """One cluster's queues, event by event; ``asked`` and ``running_at`` are what it observed."""

    def __init__(self, tasks: Sequence[SyntheticTask], seed: int) -> None:
        self.rng = random.Random(seed * 7919)
        self.tasks = {t.task_id: t for t in tasks}
        self.queues: dict[str, Queue] = {}
        self.free_nodes = RESERVATION_NODES
        self.events: list[tuple[float, int, str, str]] = []
        self.counter = itertools.count()
        self.pools: dict[str, Pool] = {}  # by holder task
        self.creating: dict[
            str, Pool
        ] = {}  # by the task a pool is created for (a hand-over moves its holder)
        self.asked: list[Asked] = []
        self.running_at: dict[str, float] = {}
        for task in tasks:
            self.at(task.arrival, "arrive", task.task_id)
            for delay in ASK_AFTER[1:]:
                self.at(task.arrival + delay, "ask", task.task_id)

    def at(self, when: float, kind: str, task_id: str) -> None:
        heapq.heappush(self.events, (when, next(self.counter), kind, task_id))

    def run(self) -> None:
        while self.events:
            now, _, kind, task_id = heapq.heappop(self.events)
            getattr(self, f"_{kind.replace('-', '_')}")(now, task_id)

    def _queue(self, task_id: str) -> Queue:
        return self.queues.setdefault(self.tasks[task_id].topology, Queue())

    def _arrive(self, now: float, task_id: str) -> None:
        task = self.tasks[task_id]
        queue = self._queue(task_id)
        queue.waiting.append(WaitingTask(task_id, task.actor, task_id, T0 + timedelta(seconds=task.arrival)))
        self._ask(now, task_id, "arrival")
        self._pick(now, queue)

    def _ask(self, now: float, task_id: str, moment: str = "waiting") -> None:
        queue = self._queue(task_id)
        positions = queue_positions(queue.waiting, queue.last_actor)
        if task_id not in positions:
            return  # picked already: no longer waiting
        k = positions[task_id].position
        elapsed = now - queue.acquiring_since if queue.acquirer else None
        found = estimate_to_running(queue.history[-HISTORY:], k, elapsed)
        naive = k * statistics.median(queue.history[-HISTORY:]) if len(queue.history) >= 3 else None
        estimate = found if isinstance(found, Estimate) else None
        self.asked.append(Asked(task_id, now, moment, k, elapsed, estimate, naive))

    def _pick(self, now: float, queue: Queue) -> None:
        if queue.acquirer is not None or not queue.waiting:
            return
        chosen = pick_next(queue.waiting, queue.last_actor)
        assert chosen is not None
        queue.waiting.remove(chosen)
        queue.last_actor, queue.acquirer, queue.acquiring_since = chosen.actor, chosen.task_id, now
        task = self.tasks[chosen.task_id]
        if queue.idle:
            self._take(now, queue, queue.idle.pop(0))
            return
        mode = "reservation" if self.free_nodes >= task.nodes else "flex-start"
        if mode == "reservation":
            self.free_nodes -= task.nodes
        pool = Pool(task.topology, mode, task.nodes, chosen.task_id)
        queue.acquirer_pool = self.creating[chosen.task_id] = pool
        self.at(now + self._lognormal(*CREATE[mode]), "pool-ready", chosen.task_id)

    def _take(self, now: float, queue: Queue, pool: Pool) -> None:
        """The acquirer holds a ready pool: its pods start."""
        assert queue.acquirer is not None
        pool.holder = queue.acquirer
        self.pools[queue.acquirer] = pool
        queue.acquirer_pool = None
        self.at(now + self._lognormal(*POD_START), "pods-run", queue.acquirer)

    def _pool_ready(self, now: float, created_for: str) -> None:
        pool = self.creating.pop(created_for)
        pool.ready = True
        queue = self.queues[pool.queue]
        if pool.holder == created_for and queue.acquirer == created_for:
            self._take(now, queue, pool)
        else:
            self._idle(now, pool)

    def _pods_run(self, now: float, task_id: str) -> None:
        queue = self._queue(task_id)
        queue.history.append(now - queue.acquiring_since)
        self.running_at[task_id] = now
        queue.acquirer = None
        self.at(now + self.tasks[task_id].run_seconds, "finish", task_id)
        self._pick(now, queue)

    def _finish(self, now: float, task_id: str) -> None:
        pool = self.pools.pop(task_id)
        pool.holder = None
        self._idle(now, pool)

    def _idle(self, now: float, pool: Pool) -> None:
        """A ready pool nobody holds: handed over, kept for a waiter, or deleted."""
        queue = self.queues[pool.queue]
        own = queue.acquirer_pool
        if queue.acquirer is not None and own is not None and not own.ready:
            own.holder = None  # its own goes on being created, and is offered when ready
            self._take(now, queue, pool)
        elif queue.waiting:
            queue.idle.append(pool)
        elif pool.mode == "reservation":
            self.free_nodes += pool.nodes

    def _lognormal(self, median: float, sigma: float) -> float:
        return math.exp(self.rng.gauss(math.log(median), sigma))


@dataclass(frozen=True)
class Row:
    shape: str
    asked: int
    no_estimate: float
    median_error_min: float
    p90_error_min: float
    median_error_pct: float
    p90_error_pct: float
    coverage: float
    naive_median_error_min: float
    naive_p90_error_min: float
    median_actual_min: float


def replay(shape: str, seed: int, tasks: int, hours: float) -> list[tuple[Asked, float]]:
    params = WorkloadParams(
        shape=shape,
        tasks=tasks,
        seed=seed,
        span_seconds=hours * 3600,
        burst_spread_seconds=120.0,
        run_median_seconds=1800.0,
        run_clip_seconds=(300.0, 4 * 3600.0),
    )
    model = Model(generate(params), seed)
    model.run()
    return [(a, model.running_at[a.task_id] - a.at) for a in model.asked]


def summarise(shape: str, answers: list[tuple[Asked, float]]) -> Row:
    estimated = [(a, actual) for a, actual in answers if a.estimate is not None]
    errors = [abs(a.estimate.seconds - actual) for a, actual in estimated if a.estimate]
    shares = [abs(a.estimate.seconds - actual) / max(actual, 1.0) for a, actual in estimated if a.estimate]
    inside = [a.estimate.low <= actual <= a.estimate.high for a, actual in estimated if a.estimate]
    naive = [abs(a.naive - actual) for a, actual in answers if a.naive is not None]
    return Row(
        shape=shape,
        asked=len(answers),
        no_estimate=1 - len(estimated) / len(answers),
        median_error_min=_q(errors, 0.5) / 60,
        p90_error_min=_q(errors, 0.9) / 60,
        median_error_pct=100 * _q(shares, 0.5),
        p90_error_pct=100 * _q(shares, 0.9),
        coverage=sum(inside) / len(inside) if inside else float("nan"),
        naive_median_error_min=_q(naive, 0.5) / 60,
        naive_p90_error_min=_q(naive, 0.9) / 60,
        median_actual_min=_q([actual for _, actual in answers], 0.5) / 60,
    )


def _q(values: list[float], p: float) -> float:
    if not values:
        return float("nan")
    ranked = sorted(values)
    return ranked[min(len(ranked) - 1, round(p * (len(ranked) - 1)))]


def table(rows: list[Row]) -> str:
    head = (
        "| shape | estimates asked | no estimate | median abs error | p90 abs error "
        "| median error % of actual | p90 error % | 80 % interval coverage | naive median / p90 error "
        "| median actual wait |"
    )
    lines = [head, "|" + "---|" * 10]
    for r in rows:
        lines.append(
            f"| {r.shape} | {r.asked} | {r.no_estimate:.1%} | {r.median_error_min:.1f} min "
            f"| {r.p90_error_min:.1f} min | {r.median_error_pct:.0f} % | {r.p90_error_pct:.0f} % "
            f"| {r.coverage:.1%} | {r.naive_median_error_min:.1f} / {r.naive_p90_error_min:.1f} min "
            f"| {r.median_actual_min:.1f} min |"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--seeds", default="1,2,3,4,5")
    parser.add_argument("--tasks", type=int, default=150)
    parser.add_argument("--hours", type=float, default=8.0, help="arrivals spread over this long")
    parser.add_argument("--shapes", default=",".join(SHAPES))
    parser.add_argument("--json", action="store_true", help="print the rows as JSON instead of a table")
    args = parser.parse_args()
    seeds = [int(s) for s in args.seeds.split(",")]
    started = time.perf_counter()
    rows, pooled = [], []
    for shape in args.shapes.split(","):
        answers = [a for seed in seeds for a in replay(shape, seed, args.tasks, args.hours)]
        pooled += [(a, actual) for a, actual in answers]
        rows.append(summarise(shape, answers))
        by_moment = {m: [(a, x) for a, x in answers if a.moment == m] for m in ("arrival", "waiting")}
        rows += [summarise(f"{shape}, at {m}", found) for m, found in by_moment.items() if found]
    rows.append(summarise("all", pooled))
    for name, lo, hi in POSITIONS:
        rows.append(summarise(f"all, position {name}", [(a, x) for a, x in pooled if lo <= a.position <= hi]))
    seconds = time.perf_counter() - started
    if args.json:
        print(json.dumps({"seeds": seeds, "tasks": args.tasks, "hours": args.hours, "seconds": seconds,
                          "rows": [asdict(r) for r in rows]}, indent=2))  # fmt: skip
        return
    print(f"ETA to Running, {len(seeds)} seeds x {args.tasks} tasks over {args.hours:g} h per shape; "
          f"reservation {RESERVATION_NODES} nodes; {seconds:.1f} s")  # fmt: skip
    print(table(rows))


if __name__ == "__main__":
    main()
