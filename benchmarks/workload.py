"""A seeded synthetic TPU workload: bursty arrivals, several actors, mixed topologies, skewed run times.

Times are in emulated seconds (the benchmark compresses real time by a constant factor).
Arrivals are a Poisson background stream plus bursts: a burst is one actor submitting several
tasks within a second or two, mostly of one topology (a sweep, a batch of evals). Run times are
log-normal, clipped, so most tasks are short and a few are long. The same (params, seed) always
gives the same list, so every arm of the benchmark replays exactly the same tasks.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, field

from falcon.domain.topology import resolve_shape

TPU_TYPE = "v6e"


@dataclass(frozen=True)
class WorkloadParams:
    tasks: int = 60
    seed: int = 7
    span_seconds: float = 90.0  # arrivals spread over about this long
    burst_share: float = 0.6  # fraction of tasks that arrive in bursts
    burst_size: tuple[int, int] = (3, 8)  # tasks per burst, uniform inclusive
    burst_spread_seconds: float = 1.5  # a burst's arrivals fall within this window
    burst_same_topology: float = 0.8  # chance a burst task has the burst's topology
    actors: tuple[str, ...] = ("alice", "bob", "carol", "dave", "erin")
    topologies: dict[str, float] = field(default_factory=lambda: {"2x2": 0.45, "2x4": 0.35, "4x4": 0.20})
    run_median_seconds: float = 8.0  # log-normal median
    run_sigma: float = 0.8  # log-normal shape
    run_clip_seconds: tuple[float, float] = (2.0, 40.0)

    def describe(self) -> str:
        topo = ", ".join(f"{t} {w:.0%}" for t, w in self.topologies.items())
        lo, hi = self.burst_size
        rlo, rhi = self.run_clip_seconds
        return (
            f"{self.tasks} tasks, seed {self.seed}, {len(self.actors)} actors, topologies {topo}; "
            f"arrivals over ~{self.span_seconds:.0f} s: {self.burst_share:.0%} in bursts of {lo}-{hi} "
            f"(one actor, within {self.burst_spread_seconds} s, "
            f"{self.burst_same_topology:.0%} same topology), the rest Poisson; "
            f"run time log-normal median {self.run_median_seconds} s, sigma {self.run_sigma}, "
            f"clipped to [{rlo}, {rhi}] s"
        )


@dataclass(frozen=True)
class SyntheticTask:
    task_id: str
    actor: str
    topology: str
    arrival: float  # emulated seconds after the replay starts
    run_seconds: float  # emulated seconds the containers run

    @property
    def nodes(self) -> int:
        return resolve_shape(TPU_TYPE, self.topology).nodes


def generate(params: WorkloadParams) -> list[SyntheticTask]:
    """The workload for params, sorted by arrival; task ids are t-000, t-001, ... in that order."""
    rng = random.Random(params.seed)
    topologies, weights = list(params.topologies), list(params.topologies.values())
    n_burst_target = round(params.tasks * params.burst_share)
    drafts: list[tuple[float, str, str]] = []

    while len(drafts) < n_burst_target:
        size = min(rng.randint(*params.burst_size), n_burst_target - len(drafts))
        start = rng.uniform(0.0, params.span_seconds * 0.9)
        actor = rng.choice(params.actors)
        main = rng.choices(topologies, weights)[0]
        for _ in range(size):
            topology = (
                main if rng.random() < params.burst_same_topology else rng.choices(topologies, weights)[0]
            )
            drafts.append((start + rng.uniform(0.0, params.burst_spread_seconds), actor, topology))

    n_background = params.tasks - len(drafts)
    rate = n_background / params.span_seconds if n_background else 0.0
    t = 0.0
    for _ in range(n_background):
        t += rng.expovariate(rate)
        drafts.append(
            (min(t, params.span_seconds), rng.choice(params.actors), rng.choices(topologies, weights)[0])
        )

    drafts.sort()
    first = drafts[0][0] if drafts else 0.0
    lo, hi = params.run_clip_seconds
    tasks = []
    for i, (arrival, actor, topology) in enumerate(drafts):
        run = math.exp(rng.gauss(math.log(params.run_median_seconds), params.run_sigma))
        tasks.append(
            SyntheticTask(
                f"t-{i:03d}", actor, topology, round(arrival - first, 3), round(min(hi, max(lo, run)), 2)
            )
        )
    return tasks


def summary(tasks: list[SyntheticTask]) -> str:
    """One line per topology: count and node-seconds of work, for the header of the report."""
    lines = []
    for topology in sorted({t.topology for t in tasks}):
        mine = [t for t in tasks if t.topology == topology]
        work = sum(t.run_seconds * t.nodes for t in mine)
        lines.append(f"{topology}: {len(mine)} tasks x {mine[0].nodes} node(s), {work:.0f} node-s of work")
    return "; ".join(lines)
