"""How long one scheduler pass spends ordering queues and writing Waiting messages.

A pass computes pick_order, queue_positions and waiting_messages for every queue. The tasks
are spread over 5 clusters x 4 topologies (20 queues) and 200 actors, skewed so that a few
actors own most tasks, as in real use. The last column divides the time by n log2 n: if it stays
flat as n grows, the pass scales as O(n log n).

Run: .venv/bin/python benchmarks/bench_scheduling.py
"""

from __future__ import annotations

import math
import random
import time
from collections.abc import Callable, Sequence
from datetime import UTC, datetime, timedelta

from falcon.domain.messages import Locale
from falcon.domain.scheduling import WaitingTask, pick_order, queue_positions, waiting_messages

SIZES = (1_000, 10_000, 100_000)
ACTORS = [f"user-{i:03d}" for i in range(200)]
QUEUES = [f"cluster-{c}/topo-{t}" for c in range(5) for t in range(4)]
REPEATS = 3
T0 = datetime(2026, 5, 1, tzinfo=UTC)

Queues = dict[str, list[WaitingTask]]
Fn = Callable[[Sequence[WaitingTask], str | None], object]


def make_queues(n: int, rng: random.Random) -> Queues:
    """n waiting tasks over the 20 queues; Zipf-ish actor weights; second-resolution ties."""
    weights = [1 / (rank + 1) for rank in range(len(ACTORS))]
    actors = rng.choices(ACTORS, weights, k=n)
    queues: Queues = {q: [] for q in QUEUES}
    for i, actor in enumerate(actors):
        when = T0 + timedelta(seconds=rng.randrange(n))
        queues[rng.choice(QUEUES)].append(WaitingTask(f"task-{i:07d}", actor, f"job-{i}", when))
    return queues


def one_pass(fn: Fn, queues: Queues) -> float:
    """Seconds for fn over every queue, as one scheduler pass would call it."""
    start = time.perf_counter()
    for tasks in queues.values():
        fn(tasks, tasks[0].actor if tasks else None)
    return time.perf_counter() - start


def best_of(fn: Fn, queues: Queues) -> float:
    return min(one_pass(fn, queues) for _ in range(REPEATS))


def zh_messages(tasks: Sequence[WaitingTask], last: str | None) -> object:
    return waiting_messages(tasks, last, Locale.ZH)


def main() -> None:
    rng = random.Random(20260501)
    functions: list[tuple[str, Fn]] = [
        ("pick_order", pick_order),
        ("queue_positions", queue_positions),
        ("waiting_messages", zh_messages),
    ]
    print(f"{'function':<18} {'layout':<18} {'n':>8} {'ms/pass':>10} {'ns/(n log2 n)':>14}")
    for n in SIZES:
        layouts = {
            "20 queues": make_queues(n, rng),
            "1 queue (worst)": {"all": _flatten(make_queues(n, rng))},
        }
        for layout, queues in layouts.items():
            for name, fn in functions:
                seconds = best_of(fn, queues)
                per = seconds * 1e9 / (n * math.log2(n))
                print(f"{name:<18} {layout:<18} {n:>8} {seconds * 1e3:>10.1f} {per:>14.1f}")


def _flatten(queues: Queues) -> list[WaitingTask]:
    return [t for tasks in queues.values() for t in tasks]


if __name__ == "__main__":
    main()
