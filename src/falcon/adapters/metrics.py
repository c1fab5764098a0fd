"""Falcon's metrics on prometheus_client's default registry, which the health server's
``/metrics`` route exports (with the process's CPU and memory collectors): the TidalScheduler
controller's, and the time of the dispatcher's ticks and reconcile rounds, each split into
Falcon's own work and Prefect API calls."""

from __future__ import annotations

import functools
import threading
import time
from collections.abc import Callable
from typing import ParamSpec, TypeVar

from prometheus_client import Counter, Gauge, Histogram

FIRES = Counter("falcon_tidal_fires", "fires applied to a TidalScheduler's status", ["cluster"])
FIRE_LAG = Histogram(
    "falcon_tidal_fire_lag_seconds",
    "from a fire's scheduled second to its status patch",
    buckets=(0.05, 0.1, 0.25, 0.5, 0.75, 1.0, 2.0, 5.0, 30.0, 300.0, 3600.0, 86400.0),
)
CONFLICTS = Counter("falcon_tidal_conflicts", "fires of several rules at one instant (max wins)", ["cluster"])
VALIDATION_FAILURES = Counter(
    "falcon_tidal_validation_failures", "objects newly marked Ready=False, by reason", ["cluster", "reason"]
)
OBJECTS = Gauge("falcon_tidal_objects", "TidalSchedulers the controller follows", ["cluster"])

_STEP_BUCKETS = (
    0.001, 0.002, 0.003, 0.005, 0.0075, 0.01, 0.015, 0.02, 0.03, 0.04, 0.05, 0.075,
    0.1, 0.15, 0.2, 0.3, 0.5, 0.75, 1.0, 2.0, 5.0, 10.0,
)  # fmt: skip
TICK_SECONDS = Histogram(
    "falcon_dispatcher_tick_seconds",
    "one dispatcher tick (intake, aborts, picks, launches): total, Falcon's own work (total minus"
    " Prefect), the Prefect API calls",
    ["part"],
    buckets=_STEP_BUCKETS,
)
RECONCILE_SECONDS = Histogram(
    "falcon_dispatcher_reconcile_seconds",
    "one reconcile round (follow Jobs, supervise runs, reap, warm, orphans), split as the tick's",
    ["part"],
    buckets=_STEP_BUCKETS,
)


class PrometheusTidalMetrics:
    """The controller's metrics port on the module's collectors (created once per process:
    prometheus_client refuses a second registration of a name)."""

    def fired(self, cluster: str, lag_seconds: float, conflict: bool) -> None:
        FIRES.labels(cluster).inc()
        FIRE_LAG.observe(lag_seconds)
        if conflict:
            CONFLICTS.labels(cluster).inc()

    def invalid(self, cluster: str, reason: str) -> None:
        VALIDATION_FAILURES.labels(cluster, reason).inc()

    def objects(self, cluster: str, count: int) -> None:
        OBJECTS.labels(cluster).set(count)


P = ParamSpec("P")
R = TypeVar("R")
_in_prefect = threading.local()


def prefect_call(call: Callable[P, R]) -> Callable[P, R]:
    """Count the wall time of a Prefect API call against the calling thread (see prefect_seconds)."""

    @functools.wraps(call)
    def timed(*args: P.args, **kwargs: P.kwargs) -> R:
        began = time.perf_counter()
        try:
            return call(*args, **kwargs)
        finally:
            _in_prefect.seconds = prefect_seconds() + time.perf_counter() - began

    return timed


def prefect_seconds() -> float:
    """The time this thread has spent in Prefect API calls so far."""
    return float(getattr(_in_prefect, "seconds", 0.0))


def timed_tick(tick: Callable[[], R], histogram: Histogram = TICK_SECONDS) -> Callable[[], R]:
    """``tick`` observed in ``histogram`` (falcon_dispatcher_tick_seconds), its Prefect calls apart."""

    def observed() -> R:
        began, prefect_before = time.perf_counter(), prefect_seconds()
        try:
            return tick()
        finally:
            total = time.perf_counter() - began
            prefect = prefect_seconds() - prefect_before
            histogram.labels("total").observe(total)
            histogram.labels("prefect").observe(prefect)
            histogram.labels("falcon").observe(max(0.0, total - prefect))

    return observed
