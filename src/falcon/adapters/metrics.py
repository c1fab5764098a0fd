"""The TidalScheduler controller's metrics on prometheus_client's default registry, which the
health server's ``/metrics`` route exports (with the process's CPU and memory collectors)."""

from __future__ import annotations

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
