"""A seeded synthetic TPU workload: several actors, mixed topologies, skewed run times, one of three
arrival shapes.

Times are in emulated seconds (the benchmark compresses real time by a constant factor).
Shapes of the arrivals, so that a keep-or-delete policy is not tuned to one trace:

* bursty: a Poisson background stream plus bursts: a burst is one actor submitting several tasks
  within a second or two, mostly of one topology (a sweep, a batch of evals);
* trickle: one steady Poisson stream over the span;
* daily: a day's rhythm compressed into the span: most arrivals fall around one peak hour (normally
  distributed about it), the rest are a Poisson background over the whole span.

Run times are log-normal, clipped, so most tasks are short and a few are long. The same (params,
seed) always gives the same list, so every arm of the benchmark replays exactly the same tasks.
"""

from __future__ import annotations

import itertools
import math
import random
import statistics
from dataclasses import dataclass, field

from falcon.domain.topology import resolve_shape

TPU_TYPE = "v6e"
SHAPES = ("bursty", "trickle", "daily")


@dataclass(frozen=True)
class WorkloadParams:
    shape: str = "bursty"  # one of SHAPES
    tasks: int = 60
    seed: int = 7
    span_seconds: float = 90.0  # arrivals spread over about this long
    burst_share: float = 0.6  # fraction of tasks that arrive in bursts
    burst_size: tuple[int, int] = (3, 8)  # tasks per burst, uniform inclusive
    burst_spread_seconds: float = 1.5  # a burst's arrivals fall within this window
    burst_same_topology: float = 0.8  # chance a burst task has the burst's topology
    peak_share: float = 0.7  # daily: fraction of tasks around the peak
    peak_at: float = 0.55  # daily: the peak, as a fraction of the span
    peak_width: float = 0.12  # daily: standard deviation about the peak, as a fraction of the span
    actors: tuple[str, ...] = ("alice", "bob", "carol", "dave", "erin")
    topologies: dict[str, float] = field(default_factory=lambda: {"2x2": 0.45, "2x4": 0.35, "4x4": 0.20})
    run_median_seconds: float = 8.0  # log-normal median
    run_sigma: float = 0.8  # log-normal shape
    run_clip_seconds: tuple[float, float] = (2.0, 40.0)

    def __post_init__(self) -> None:
        if self.shape not in SHAPES:
            raise ValueError(f"shape {self.shape!r} is not one of {', '.join(SHAPES)}")

    def describe(self) -> str:
        topo = ", ".join(f"{t} {w:.0%}" for t, w in self.topologies.items())
        rlo, rhi = self.run_clip_seconds
        return (
            f"{self.shape}: {self.tasks} tasks, seed {self.seed}, {len(self.actors)} actors, "
            f"topologies {topo}; "
            f"arrivals over ~{self.span_seconds:.0f} s: {self.arrival_process()}; "
            f"run time log-normal median {self.run_median_seconds} s, sigma {self.run_sigma}, "
            f"clipped to [{rlo}, {rhi}] s"
        )

    def arrival_process(self) -> str:
        if self.shape == "trickle":
            return "one Poisson stream"
        if self.shape == "daily":
            return (
                f"{self.peak_share:.0%} normally distributed about a peak at {self.peak_at:.0%} of the span "
                f"(sd {self.peak_width:.0%} of it), the rest Poisson"
            )
        lo, hi = self.burst_size
        return (
            f"{self.burst_share:.0%} in bursts of {lo}-{hi} (one actor, within "
            f"{self.burst_spread_seconds} s, {self.burst_same_topology:.0%} same topology), the rest Poisson"
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
    n_grouped = round(params.tasks * _grouped_share(params))
    drafts = _peak(params, rng, n_grouped) if params.shape == "daily" else _bursts(params, rng, n_grouped)
    drafts += _poisson(params, rng, params.tasks - len(drafts))
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


Draft = tuple[float, str, str]  # arrival, actor, topology


def _grouped_share(params: WorkloadParams) -> float:
    """The share of tasks that arrive in bursts (bursty) or about the peak (daily)."""
    return {"bursty": params.burst_share, "daily": params.peak_share}.get(params.shape, 0.0)


def _topology(params: WorkloadParams, rng: random.Random) -> str:
    return rng.choices(list(params.topologies), list(params.topologies.values()))[0]


def _bursts(params: WorkloadParams, rng: random.Random, count: int) -> list[Draft]:
    drafts: list[Draft] = []
    while len(drafts) < count:
        size = min(rng.randint(*params.burst_size), count - len(drafts))
        start = rng.uniform(0.0, params.span_seconds * 0.9)
        actor = rng.choice(params.actors)
        main = _topology(params, rng)
        for _ in range(size):
            topology = main if rng.random() < params.burst_same_topology else _topology(params, rng)
            drafts.append((start + rng.uniform(0.0, params.burst_spread_seconds), actor, topology))
    return drafts


def _peak(params: WorkloadParams, rng: random.Random, count: int) -> list[Draft]:
    span, drafts = params.span_seconds, []
    for _ in range(count):
        at = rng.gauss(params.peak_at * span, params.peak_width * span)
        drafts.append((min(span, max(0.0, at)), rng.choice(params.actors), _topology(params, rng)))
    return drafts


def _poisson(params: WorkloadParams, rng: random.Random, count: int) -> list[Draft]:
    """count arrivals of a Poisson stream over the span: given their number, a Poisson process's
    arrival times are independent and uniform over it. (Summing exponential gaps at rate
    count/span overruns the span on about half the seeds, and clipping the overrun piled the last
    arrivals onto its end: up to 10 of 24 at one instant.)"""
    return [
        (rng.uniform(0.0, params.span_seconds), rng.choice(params.actors), _topology(params, rng))
        for _ in range(count)
    ]


def gap_variation(tasks: list[SyntheticTask]) -> float:
    """Burstiness: the coefficient of variation of the gaps between consecutive arrivals (1 for a
    Poisson stream, above 1 for bursts, below for a regular one); NaN with fewer than three tasks."""
    gaps = [b.arrival - a.arrival for a, b in itertools.pairwise(tasks)]
    if len(gaps) < 2 or statistics.fmean(gaps) == 0:
        return float("nan")
    return statistics.pstdev(gaps) / statistics.fmean(gaps)


def summary(tasks: list[SyntheticTask]) -> str:
    """One line per topology: count and node-seconds of work, for the header of the report."""
    lines = []
    for topology in sorted({t.topology for t in tasks}):
        mine = [t for t in tasks if t.topology == topology]
        work = sum(t.run_seconds * t.nodes for t in mine)
        lines.append(f"{topology}: {len(mine)} tasks x {mine[0].nodes} node(s), {work:.0f} node-s of work")
    return "; ".join(lines)
