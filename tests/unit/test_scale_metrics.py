"""What bench_scale.py reads from the dispatcher's /metrics page (benchmarks/scale_metrics.py), on
pages written by prometheus_client itself."""

from __future__ import annotations

import sys
from dataclasses import replace
from pathlib import Path

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

from scale_metrics import Scrape, Window, counted_since, counter_total, counters_by, histograms, quantile

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


def observed(seconds: list[float], deferred: float = 0.0, started: float | None = None) -> Scrape:
    """One /metrics scrape of a dispatcher process (started at ``started``, when the page says)
    that has ticked ``seconds`` so far."""
    registry = CollectorRegistry()
    ticks = Histogram("tick", "tick", ["part"], buckets=(0.1, 0.5, 1.0), registry=registry)
    for one in seconds:
        ticks.labels("total").observe(one)
    return Scrape({"tick/total": histograms(page(registry), "tick", "part")["total"]}, deferred, started)


def test_a_window_counts_the_ticks_between_its_first_and_last_scrape() -> None:
    window = Window(observed([0.05] * 10, deferred=2))
    window.add(observed([0.05] * 10 + [0.3] * 5, deferred=3))
    window.add(observed([0.05] * 10 + [0.3] * 5 + [0.7], deferred=7))

    ticks = window.histograms["tick/total"]
    assert (ticks.count, round(ticks.total, 6)) == (6, 2.2)
    assert dict(ticks.buckets) == {0.1: 0, 0.5: 5, 1.0: 6, float("inf"): 6}
    assert window.picks_deferred == 5
    assert window.replaced == 0


def test_a_dispatcher_replaced_inside_a_window_keeps_both_runs_ticks() -> None:
    """The old run ticked 5 more times before its last scrape; then nobody served the page; the new
    run's process counts from zero. The difference of the two ends alone would hold 2 ticks."""
    window = Window(observed([0.05] * 100))
    window.add(observed([0.05] * 100 + [0.3] * 5))
    window.add(Scrape())  # between the two runs
    window.add(observed([0.7, 0.05]))

    ticks = window.histograms["tick/total"]
    assert ticks.count == 7
    assert dict(ticks.buckets)[0.5] == 6
    assert window.replaced == 1


def test_a_scrape_read_before_the_last_one_is_not_taken_for_a_new_process() -> None:
    """Two threads scrape; one may hand in its older page after the other's newer one. Counted as
    a new process, the older page would add the process's whole history to the window."""
    window = Window(observed([0.05] * 100, started=1000.0))
    window.add(observed([0.05] * 100 + [0.3] * 5, started=1000.0))
    window.add(observed([0.05] * 100 + [0.3] * 2, started=1000.0))  # read before the last one
    window.add(observed([0.05] * 100 + [0.3] * 6, started=1000.0))

    assert window.histograms["tick/total"].count == 6
    assert window.replaced == 0


def test_a_new_process_is_told_by_its_start_time_even_with_more_ticks() -> None:
    window = Window(observed([0.05] * 3, started=1000.0))
    window.add(observed([0.05] * 3 + [0.3], started=1000.0))
    window.add(observed([0.7] * 10, started=2000.0))

    assert window.histograms["tick/total"].count == 11
    assert window.replaced == 1


def test_api_calls_are_summed_per_api_and_call_over_their_outcomes() -> None:
    registry = CollectorRegistry()
    calls = Counter("falcon_api_calls", "calls", ["api", "call", "outcome"], registry=registry)
    calls.labels("kubernetes", "list_events", "ok").inc(4)
    calls.labels("kubernetes", "list_events", "retryable").inc()
    calls.labels("gke", "list_events", "ok").inc(2)

    found = counters_by(page(registry), "falcon_api_calls", ("api", "call"))

    assert found == {"kubernetes/list_events": 5, "gke/list_events": 2}


def test_a_window_counts_the_api_calls_of_both_runs_when_the_dispatcher_is_replaced() -> None:
    def calls(ticks: list[float], made: float, started: float) -> Scrape:
        return replace(observed(ticks, started=started), api_calls={"kubernetes/list_pods": made})

    window = Window(calls([0.05] * 3, 10, started=1000.0))
    window.add(calls([0.05] * 4, 14, started=1000.0))
    window.add(calls([0.05], 3, started=2000.0))  # the new run's process counts from zero

    assert window.api_calls == {"kubernetes/list_pods": 7}
