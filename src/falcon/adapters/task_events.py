"""The TaskEvents port in production: one structured log line per task move, the audit trail of
aborts and orphans, and the metrics of ``adapters.metrics``.

A move's line reads ``event=task_moved task_id=… cluster=… queue=… from=… to=… reason=…`` on the
``falcon.events`` logger (Prefect's run logs take every ``falcon`` logger). Latencies and
durations come from the row's own times, so they hold across dispatcher restarts; the time spent
in a stage is measured from the move into it that this process saw (a stage entered before the
process started is not observed).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable, Sequence
from datetime import datetime

from falcon.adapters import metrics
from falcon.adapters.audit import audit
from falcon.domain.events import ResourceView, Stage, TaskMove
from falcon.domain.model import Cluster, ProvisioningMode, QueueKey
from falcon.domain.status import Status

logger = logging.getLogger("falcon.events")

MILESTONES = frozenset({Stage.WAITING, Stage.DISPATCHED, Stage.RUNNING})
MAX_TRACKED = 100_000  # tasks whose stage entry is remembered; the oldest are forgotten first


class PrometheusTaskEvents:
    """Log and count what the services report. ``clusters`` reads the registry, to label metrics
    and lines with cluster names rather than ids."""

    def __init__(self, clusters: Callable[[], Iterable[Cluster]]) -> None:
        self._name = metrics.ClusterLabels(clusters)
        self._entered: dict[str, tuple[Stage, datetime]] = {}
        self._lock = threading.Lock()

    def moved(self, move: TaskMove) -> None:
        cluster, topology = self._queue_labels(move.queue)
        logger.info(
            "event=task_moved task_id=%s cluster=%s queue=%s from=%s to=%s reason=%s",
            move.task_id,
            cluster or "-",
            self._name.queue(move.queue) if move.queue else "-",
            move.source,
            move.target,
            move.reason or "-",
        )
        metrics.TRANSITIONS.labels(cluster, topology, move.source, move.target).inc()
        self._observe_phase(move, cluster, topology)
        if move.created_at is not None and move.target in MILESTONES:
            since_insert = _seconds(move.created_at, move.at)
            metrics.LATENCY.labels(cluster, topology, move.target).observe(since_insert)
        if move.outcome is None:
            return
        status = move.outcome.status.value
        if move.target is Stage.RELEASING and move.dispatched_at is not None:
            ran = _seconds(move.dispatched_at, move.at)
            metrics.RUN_SECONDS.labels(cluster, topology, status).observe(ran)
        if move.target is Stage.DONE:
            reason = move.outcome.reason.value if move.outcome.reason else ""
            metrics.OUTCOMES.labels(cluster, topology, status, reason).inc()
            if move.created_at is not None:
                metrics.DURATION.labels(cluster, topology, status).observe(_seconds(move.created_at, move.at))
            if move.outcome.status is Status.ABORTED:
                audit("task_aborted", task_id=move.task_id, cluster=cluster or "-", stage=move.source)

    def pick_deferred(self, queue: QueueKey, error: str) -> None:
        cluster, topology = self._queue_labels(queue)
        queue_name = self._name.queue(queue)
        logger.info("event=pick_deferred cluster=%s queue=%s error=%r", cluster, queue_name, error)
        metrics.PICKS_DEFERRED.labels(cluster, topology).inc()

    def pool_created(self, queue: QueueKey, mode: ProvisioningMode, fallback: bool) -> None:
        decision = "fallback" if fallback else mode.value
        metrics.POOL_CREATIONS.labels(*self._queue_labels(queue), decision).inc()

    def pool_reused(self, queue: QueueKey, how: str) -> None:
        metrics.POOL_REUSES.labels(*self._queue_labels(queue), how).inc()

    def orphans_swept(self, cluster_id: str, kind: str, names: Sequence[str]) -> None:
        cluster = self._name(cluster_id)
        metrics.ORPHANS.labels(cluster, kind).inc(len(names))
        for name in names:
            audit("orphan_deleted", cluster=cluster, kind=kind, name=name)

    def resources_seen(self, view: ResourceView) -> None:
        metrics.record_view(view)

    def _queue_labels(self, queue: QueueKey | None) -> tuple[str, str]:
        return (self._name(queue.cluster_id), queue.topology) if queue else ("", "")

    def _observe_phase(self, move: TaskMove, cluster: str, topology: str) -> None:
        """The time spent in the stage the task leaves, when this process saw it enter it."""
        with self._lock:
            entered = self._entered.pop(move.task_id, None)
            if move.target is not Stage.DONE:
                self._entered[move.task_id] = (move.target, move.at)
                if len(self._entered) > MAX_TRACKED:
                    del self._entered[next(iter(self._entered))]
        if entered is not None and entered[0] is move.source:
            metrics.PHASE_SECONDS.labels(cluster, topology, move.source).observe(
                _seconds(entered[1], move.at)
            )


def _seconds(start: datetime, end: datetime) -> float:
    return max(0.0, (end - start).total_seconds())
