"""The benchmarks' synthetic workload (benchmarks/workload.py): seeded, exact in count, and
shaped as documented."""

from __future__ import annotations

import statistics
import sys
from collections import Counter
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

from workload import SHAPES, WorkloadParams, gap_variation, generate

SPAN = 32.0


def params(shape: str, seed: int, tasks: int = 24) -> WorkloadParams:
    return WorkloadParams(shape=shape, tasks=tasks, seed=seed, span_seconds=SPAN)


@pytest.mark.parametrize("shape", SHAPES)
def test_the_same_params_give_the_same_tasks(shape: str) -> None:
    assert generate(params(shape, 3)) == generate(params(shape, 3))
    assert generate(params(shape, 3)) != generate(params(shape, 4))


@settings(max_examples=60, deadline=None)
@given(shape=st.sampled_from(SHAPES), seed=st.integers(0, 10_000), tasks=st.integers(1, 80))
def test_every_task_arrives_once_within_the_span_in_order(shape: str, seed: int, tasks: int) -> None:
    generated = generate(params(shape, seed, tasks))
    assert len(generated) == tasks
    assert len({t.task_id for t in generated}) == tasks
    arrivals = [t.arrival for t in generated]
    assert arrivals == sorted(arrivals)
    assert arrivals[0] == 0.0 and arrivals[-1] <= SPAN + WorkloadParams.burst_spread_seconds


@pytest.mark.parametrize("seed", range(1, 41))
def test_a_trickle_never_piles_arrivals_onto_one_instant(seed: int) -> None:
    """Seed 2 once had 10 of its 24 arrivals at the span's end: a burst, not a trickle. (Two may
    share a millisecond, the arrivals' rounding.)"""
    arrivals = Counter(t.arrival for t in generate(params("trickle", seed)))
    assert max(arrivals.values()) <= 2


def test_a_trickle_is_as_bursty_as_a_poisson_stream() -> None:
    """A Poisson stream's gaps vary as much as they average (coefficient of variation 1); the old
    pile-up pushed the economics benchmark's trickle seed 2 (24 tasks) to 1.66."""
    cvs = [gap_variation(generate(params("trickle", seed, 60))) for seed in range(1, 201)]
    assert 0.85 <= statistics.fmean(cvs) <= 1.05
    assert max(cvs) < 1.6


@pytest.mark.parametrize("seed", range(1, 21))
def test_bursts_vary_more_than_a_poisson_stream(seed: int) -> None:
    assert gap_variation(generate(params("bursty", seed, 60))) > 1.0
