"""What bench_scale.py reads from the dispatcher's /metrics page (benchmarks/scale_metrics.py), on
pages written by prometheus_client itself."""

from __future__ import annotations

import sys
from pathlib import Path

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

from scale_metrics import counted_since, counter_total, histograms, quantile

METRIC = "falcon_picks_deferred"


def page(registry: CollectorRegistry) -> str:
    return generate_latest(registry).decode()


def test_a_counter_is_summed_over_its_labelled_series() -> None:
    registry = CollectorRegistry()
    deferred = Counter(METRIC, "picks deferred", ["cluster", "topology"], registry=registry)
    deferred.labels("a", "2x2").inc(3)
    deferred.labels("b", "4x4").inc()
    Counter("falcon_other", "not this one", registry=registry).inc(100)

    assert counter_total(page(registry), METRIC) == 4


def test_a_labelled_counter_never_incremented_counts_zero() -> None:
    registry = CollectorRegistry()
    Counter(METRIC, "picks deferred", ["cluster", "topology"], registry=registry)

    assert counter_total(page(registry), METRIC) == 0


def test_a_counter_that_went_down_was_restarted_and_counts_from_zero() -> None:
    assert counted_since(7, 3) == 4
    assert counted_since(2, 5) == 2  # a new dispatcher process in between
    assert counted_since(2, None) == 2


def test_a_quantile_lies_in_the_bucket_that_holds_it() -> None:
    registry = CollectorRegistry()
    ticks = Histogram("tick", "tick", ["part"], buckets=(0.1, 0.5, 1.0), registry=registry)
    for seconds in (0.05,) * 98 + (0.3, 0.7):
        ticks.labels("falcon").observe(seconds)

    found = histograms(page(registry), "tick", "part")["falcon"]
    p99 = quantile(found, 0.99)

    assert found.count == 100
    assert p99 is not None and (p99.lower, p99.upper) == (0.1, 0.5)
