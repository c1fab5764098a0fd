"""The TidalScheduler controller (oFEP-0033 §2, §3, §7): one loop over every active cluster.

Per cluster a follower thread lists the objects and watches them from the list's
resourceVersion (a 410 Gone lists again), feeding one queue. The loop keeps one heap of wake
instants (the next fire of every object of every cluster) and sleeps until the earliest of them
or the next queued event, so a fire reaches status within moments of its scheduled second rather
than at the next poll. Evaluations run on a few worker threads per cluster and report back through
the same queue: a cluster whose API hangs delays only its own objects.

The objects' status is the only state. A restart lists everything again and evaluates each
object, so the catch-up rule (``falcon.domain.tidal.evaluate``) applies what was missed. A spec
change is evaluated at once; a deletion forgets the object (its heap entries lapse on their own).
"""

from __future__ import annotations

import heapq
import itertools
import logging
import queue
import threading
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import Any

from falcon.domain.errors import NotFoundError
from falcon.domain.model import Cluster, ClusterStatus
from falcon.domain.tidal import (
    READY,
    Fire,
    Problem,
    ResourceVersionGone,
    TidalScheduler,
    TidalStatus,
    evaluate,
    rfc3339,
)
from falcon.services.health import Verdict, liveness
from falcon.services.ports import Clock
from falcon.services.tidal_ports import TidalMetrics, TidalObjects
from falcon.settings import Settings

Log = logging.Logger | logging.LoggerAdapter[logging.Logger]
# Runs one piece of work for a cluster (on that cluster's workers in production).
Submit = Callable[[str, Callable[[], None]], None]
# Starts a long-running function (a follower) on a thread of its own in production.
Spawn = Callable[[Callable[[], None], str], None]

MAX_WAIT_SECONDS = 1.0  # the loop looks at its stop flag at least this often
FIRST_RETRY = timedelta(seconds=0.5)  # after a failed evaluation; doubled while it keeps failing


@dataclass(frozen=True)
class TidalConfig:
    catch_up: timedelta  # a fire older than this is not applied after downtime
    scale_all: bool  # patch every target's /scale, not only annotated objects'
    retry_seconds: float  # an evaluation that failed, or a missing target, is tried again after this
    cluster_refresh_seconds: float  # how often the registry's active clusters are read again

    @classmethod
    def of(cls, settings: Settings) -> TidalConfig:
        return cls(
            timedelta(seconds=settings.tidal_catch_up_seconds),
            settings.tidal_scale_targets,
            settings.tidal_retry_seconds,
            settings.tidal_cluster_refresh_seconds,
        )


@dataclass(frozen=True)
class Listed:
    """Every object of a cluster, from a (re)list: what is not here is gone."""

    cluster_id: str
    objects: Sequence[Mapping[str, Any]]


@dataclass(frozen=True)
class Watched:
    cluster_id: str
    kind: str  # ADDED, MODIFIED, DELETED
    obj: Mapping[str, Any]


@dataclass(frozen=True)
class Evaluated:
    """An evaluation came back: when to look again, and the status now written (None: failed)."""

    cluster_id: str
    key: str
    wake: datetime | None
    status: TidalStatus | None


Event = Listed | Watched | Evaluated


@dataclass
class _Tracked:
    obj: TidalScheduler
    seen: tuple[int, bool] | None = None  # (generation, scale annotation) last evaluated
    wake: datetime | None = None
    busy: bool = False  # an evaluation is out on a worker
    again: bool = False  # evaluate once more when it is back
    failures: int = 0  # evaluations failed in a row: the next is tried after FIRST_RETRY * 2**(n-1)


def follow(
    cluster: Cluster,
    objects_of: Callable[[Cluster], TidalObjects],
    sink: Callable[[Event], None],
    stop: threading.Event,
    retry_seconds: float,
    log: Log,
) -> None:
    """List, then watch from the list's resourceVersion, until ``stop``; list again after a 410
    Gone, and after any other failure once ``retry_seconds`` have passed. A cluster without the
    CRD is warned about once (then at debug level, until it is installed): most clusters of a
    registry may never run TidalSchedulers."""
    told_no_crd = False
    while not stop.is_set():
        try:
            api = objects_of(cluster)
            objects, version = api.list()
            sink(Listed(cluster.id, objects))
            while not stop.is_set():
                for kind, obj in api.watch(version, stop):
                    version = str(obj.get("metadata", {}).get("resourceVersion") or version)
                    if kind != "BOOKMARK":
                        sink(Watched(cluster.id, kind, obj))
        except ResourceVersionGone:
            log.info("event=tidal_relist cluster=%s", cluster.name)
        except NotFoundError:  # the API server does not serve the resource: no CRD there
            (log.debug if told_no_crd else log.warning)(
                "event=tidal_crd_missing cluster=%s hint='falcon tidal apply -f "
                "infra/tidal-scheduler/crd.yaml --cluster %s (or kubectl apply)'",
                cluster.name,
                cluster.name,
            )
            told_no_crd = True
            stop.wait(retry_seconds)
        except Exception as exc:  # the cluster's trouble: logged, tried again, never the others'
            log.warning("event=tidal_watch_failed cluster=%s error=%s", cluster.name, exc)
            stop.wait(retry_seconds)


class ClusterWorkers:
    """A few threads per cluster for evaluations: a slow cluster queues only its own work."""

    def __init__(self, per_cluster: int) -> None:
        self._per_cluster = per_cluster
        self._pools: dict[str, ThreadPoolExecutor] = {}

    def submit(self, cluster_id: str, work: Callable[[], None]) -> None:
        if cluster_id not in self._pools:
            self._pools[cluster_id] = ThreadPoolExecutor(self._per_cluster, f"tidal-{cluster_id[:8]}")
        self._pools[cluster_id].submit(work)

    def close(self) -> None:
        for pool in self._pools.values():
            pool.shutdown(wait=True, cancel_futures=True)


def _spawn_thread(target: Callable[[], None], name: str) -> None:
    threading.Thread(target=target, name=name, daemon=True).start()


class TidalController:
    def __init__(
        self,
        clusters: Callable[[], Sequence[Cluster]],
        objects_of: Callable[[Cluster], TidalObjects],
        clock: Clock,
        config: TidalConfig,
        metrics: TidalMetrics,
        log: Log,
        submit: Submit,
        spawn: Spawn = _spawn_thread,
    ) -> None:
        self._registry, self._objects_of, self._clock = clusters, objects_of, clock
        self._config, self._metrics, self._log = config, metrics, log
        self._submit, self._spawn = submit, spawn
        self.events: queue.Queue[Event] = queue.Queue()
        self.stop = threading.Event()
        self.last_beat = clock.monotonic()
        self._clusters: dict[str, Cluster] = {}
        self._followers: dict[str, threading.Event] = {}
        self._tracked: dict[str, dict[str, _Tracked]] = {}  # cluster id -> namespace/name -> object
        self._heap: list[tuple[datetime, int, str, str]] = []
        self._order = itertools.count()  # heap tie-breaker: entries never compare their keys' objects

    # -- the loop ---------------------------------------------------------------------------------

    def run(self, run_seconds: float) -> None:
        """Follow every active cluster for ``run_seconds`` or until ``stop`` is set."""
        deadline = self._clock.monotonic() + run_seconds
        refresh_at = self._clock.monotonic()
        try:
            while not self.stop.is_set() and (now := self._clock.monotonic()) < deadline:
                if now >= refresh_at:
                    self.sync_clusters()
                    refresh_at = now + self._config.cluster_refresh_seconds
                wake = self.run_due()
                pause = min(refresh_at, deadline) - self._clock.monotonic()
                if wake is not None:
                    pause = min(pause, (wake - self._clock.now()).total_seconds())
                self.drain(max(0.0, min(pause, MAX_WAIT_SECONDS)))
                self.last_beat = self._clock.monotonic()
        finally:
            for stop in self._followers.values():
                stop.set()

    def liveness(self, bound: float) -> Verdict:
        return liveness(self.last_beat, self._clock.monotonic(), bound)

    def drain(self, timeout: float) -> None:
        """Handle the next event, waiting up to ``timeout`` for it, then every event already queued."""
        try:
            self.handle(self.events.get(timeout=timeout) if timeout > 0 else self.events.get_nowait())
            while True:
                self.handle(self.events.get_nowait())
        except queue.Empty:
            return

    def sync_clusters(self) -> None:
        """Follow the registry's active clusters: start on new ones, forget those gone or inactive."""
        try:
            active = {c.id: c for c in self._registry() if c.status is ClusterStatus.ACTIVE}
        except Exception as exc:  # the registry's database away: keep following what we follow
            self._log.warning("event=tidal_registry_failed error=%s", exc)
            return
        for cluster_id in set(self._followers) - set(active):
            self._followers.pop(cluster_id).set()
            del self._tracked[cluster_id]
            self._metrics.objects(self._clusters.pop(cluster_id).name, 0)
        for cluster_id, cluster in active.items():
            self._clusters[cluster_id] = cluster
            if cluster_id not in self._followers:
                self._tracked[cluster_id] = {}
                stop = self._followers[cluster_id] = threading.Event()
                work = self._follower(cluster, stop)
                self._spawn(work, f"tidal-watch-{cluster.name}")

    def _follower(self, cluster: Cluster, stop: threading.Event) -> Callable[[], None]:
        def work() -> None:
            follow(cluster, self._objects_of, self.events.put, stop, self._config.retry_seconds, self._log)

        return work

    # -- events -----------------------------------------------------------------------------------

    def handle(self, event: Event) -> None:
        if event.cluster_id not in self._followers:
            return  # a cluster no longer followed: its stragglers are moot
        if isinstance(event, Listed):
            self._listed(event)
        elif isinstance(event, Watched):
            self._watched(event)
        else:
            self._evaluated(event)

    def _listed(self, event: Listed) -> None:
        fresh = [TidalScheduler.from_dict(raw) for raw in event.objects]
        keys = {obj.key for obj in fresh}
        tracked = self._tracked[event.cluster_id]
        for key in set(tracked) - keys:
            del tracked[key]
        for obj in fresh:
            self._upsert(event.cluster_id, obj)
        self._count(event.cluster_id)

    def _watched(self, event: Watched) -> None:
        obj = TidalScheduler.from_dict(event.obj)
        if event.kind == "DELETED":
            self._tracked[event.cluster_id].pop(obj.key, None)
        else:
            self._upsert(event.cluster_id, obj)
        self._count(event.cluster_id)

    def _upsert(self, cluster_id: str, obj: TidalScheduler) -> None:
        """Take the object's latest version; evaluate it now if it is new or its spec (or scale
        annotation) changed. Its own status patches come back here and change neither."""
        tracked = self._tracked[cluster_id].get(obj.key)
        if tracked is None:
            tracked = self._tracked[cluster_id][obj.key] = _Tracked(obj)
        tracked.obj = obj
        if tracked.seen != (obj.generation, obj.scale_requested):
            self._evaluate_now(cluster_id, tracked)

    def _evaluated(self, event: Evaluated) -> None:
        tracked = self._tracked[event.cluster_id].get(event.key)
        if tracked is None:
            return  # deleted while it was being evaluated
        tracked.busy = False
        wake = event.wake
        if event.status is not None:
            tracked.obj = replace(tracked.obj, status=event.status)
            tracked.failures = 0
        else:
            tracked.seen = None  # failed: what it saw is not done with
            tracked.failures += 1
            wake = self._clock.now() + self._backoff(tracked.failures)
        tracked.wake = wake
        if wake is not None:
            heapq.heappush(self._heap, (wake, next(self._order), event.cluster_id, event.key))
        if tracked.again:
            tracked.again = False
            self._evaluate_now(event.cluster_id, tracked)

    def _count(self, cluster_id: str) -> None:
        self._metrics.objects(self._clusters[cluster_id].name, len(self._tracked[cluster_id]))

    # -- evaluations ------------------------------------------------------------------------------

    def run_due(self) -> datetime | None:
        """Evaluate every object whose wake instant has come; returns the next wake instant."""
        now = self._clock.now()
        while self._heap and self._heap[0][0] <= now:
            when, _, cluster_id, key = heapq.heappop(self._heap)
            tracked = self._tracked.get(cluster_id, {}).get(key)
            if tracked is not None and tracked.wake == when:  # else a lapsed entry
                tracked.wake = None
                self._evaluate_now(cluster_id, tracked)
        return self._heap[0][0] if self._heap else None

    def _evaluate_now(self, cluster_id: str, tracked: _Tracked) -> None:
        if tracked.busy:
            tracked.again = True
            return
        tracked.busy = True
        obj = tracked.obj
        tracked.seen = (obj.generation, obj.scale_requested)
        cluster = self._clusters[cluster_id]
        self._submit(cluster_id, lambda: self.events.put(self._evaluate(cluster, obj)))

    def _evaluate(self, cluster: Cluster, obj: TidalScheduler) -> Evaluated:
        """On a worker: check the target, decide, scale if asked, write status. Any failure is
        logged and the object tried again later; status is written last, so a failed scale is
        retried with its fire (status does not yet say it was applied)."""
        now = self._clock.now()
        try:
            api = self._objects_of(cluster)
            exists = obj.target is not None and obj.target.scalable and api.target_exists(obj.target)
            result = evaluate(obj, now, exists, self._config.catch_up)
            replicas = result.status.desired_replicas
            if result.applied is not None and replicas is not None and self._scales(obj):
                self._scale(api, obj, replicas)
            if result.changed:
                api.patch_status(obj.namespace, obj.name, result.status.to_dict())
        except Exception as exc:
            self._log.warning(
                "event=tidal_evaluate_failed cluster=%s object=%s error=%s", cluster.name, obj.key, exc
            )
            return Evaluated(cluster.id, obj.key, None, None)  # the loop decides when to try again
        if result.applied is not None and result.changed:
            self._note_fire(cluster, obj, result.applied, result.status.desired_replicas)
        if result.problem is not None:
            self._note_problem(cluster, obj, result.problem)
        wake = result.wake
        if result.problem is Problem.TARGET_NOT_FOUND:
            wake = now + self._retry  # the target may be created yet
        return Evaluated(cluster.id, obj.key, wake, result.status)

    @property
    def _retry(self) -> timedelta:
        return timedelta(seconds=self._config.retry_seconds)

    def _backoff(self, failures: int) -> timedelta:
        """A failed evaluation is tried again soon: most failures are a connection the API server
        closed under a reused socket, and the fire must still reach status within a second. A
        cluster that keeps failing is asked less and less often, up to ``retry_seconds``."""
        return min(self._retry, FIRST_RETRY * (1 << min(failures - 1, 16)))

    def _scales(self, obj: TidalScheduler) -> bool:
        return self._config.scale_all or obj.scale_requested

    def _scale(self, api: TidalObjects, obj: TidalScheduler, replicas: int) -> None:
        assert obj.target is not None  # an applied fire has a valid, existing target
        if api.replicas(obj.target) != replicas:
            api.scale(obj.target, replicas)
            self._log.info(
                "event=tidal_scaled object=%s target=%s replicas=%d", obj.key, obj.target, replicas
            )

    def _note_fire(self, cluster: Cluster, obj: TidalScheduler, fire: Fire, desired: int | None) -> None:
        lag = (self._clock.now() - fire.at).total_seconds()
        self._metrics.fired(cluster.name, lag, fire.conflict)
        self._log.info(
            "event=tidal_fired cluster=%s object=%s at=%s rules=%s desired=%s lag=%.3f",
            cluster.name,
            obj.key,
            rfc3339(fire.at),
            fire.names,
            desired,
            lag,
        )

    def _note_problem(self, cluster: Cluster, obj: TidalScheduler, problem: Problem) -> None:
        before = obj.status.condition(READY)
        if before is None or before.status != "False" or before.reason != problem.value:
            self._metrics.invalid(cluster.name, problem.value)
            self._log.warning(
                "event=tidal_invalid cluster=%s object=%s reason=%s", cluster.name, obj.key, problem
            )
