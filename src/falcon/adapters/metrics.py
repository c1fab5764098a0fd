"""Falcon's metrics on prometheus_client's default registry, which the health server's
``/metrics`` route exports (with the process's CPU and memory collectors): the TidalScheduler
controller's; the time of the dispatcher's ticks and reconcile rounds, each split into Falcon's
own work and Prefect API calls; the tasks' moves, latencies and outcomes (``task_events``); the
GKE, Compute and Kubernetes calls (``errors``); and the gauges of what the dispatcher sees
(``record_view``).

Every collector is created here, once: prometheus_client refuses a second registration of a
name, and ``infra/`` (the Grafana dashboard, the alert rules) is checked against these names.
Label ``cluster`` is the cluster's name (``ClusterLabels``), ``topology`` the queue's topology.
"""

from __future__ import annotations

import functools
import gc
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import ParamSpec, TypeVar

from prometheus_client import Counter, Gauge, Histogram

from falcon.adapters.known_clusters import KnownClusters
from falcon.domain.events import ResourceView
from falcon.domain.lifecycle import NodePool, PoolState
from falcon.domain.model import Cluster, QueueKey, queue_label

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
    " Prefect), the Prefect API calls; of Falcon's work, the database transactions; the thread's CPU"
    " time, and its wait for a core (runqueue); the process's garbage collections during it (gc)",
    ["part"],
    buckets=_STEP_BUCKETS,
)
MESSAGES_SECONDS = Histogram(
    "falcon_dispatcher_messages_seconds",
    "one write of waiting tasks' Messages, beside the tick (a pick's moved positions), split as the tick's",
    ["part"],
    buckets=_STEP_BUCKETS,
)
RECONCILE_SECONDS = Histogram(
    "falcon_dispatcher_reconcile_seconds",
    "one reconcile round (follow Jobs, supervise runs, reap, warm), split as the tick's",
    ["part"],
    buckets=_STEP_BUCKETS,
)
HOUSEKEEPING_SECONDS = Histogram(
    "falcon_dispatcher_housekeeping_seconds",
    "one turn of the dispatcher's housekeeping (orphan sweeps, the view), split as the tick's",
    ["part"],
    buckets=_STEP_BUCKETS,
)

STEP_SECONDS = Histogram(
    "falcon_dispatcher_step_seconds",
    "the steps of a tick (snapshot, intake, schedule, ...), of a reconcile round (follow: the Job"
    " lists and outcomes; release: ending the tasks whose pool the round kept; supervise, reap, warm)"
    " and of housekeeping (orphans, view), wall time",
    ["loop", "step"],
    buckets=_STEP_BUCKETS,
)


def observe_steps(loop: str, steps: Mapping[str, float]) -> None:
    """One tick's or round's steps (``Laps.phases``) into falcon_dispatcher_step_seconds."""
    for step, seconds in steps.items():
        STEP_SECONDS.labels(loop, step).observe(seconds)


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


class ThreadTime:
    """The wall time each thread has spent inside one kind of call (Prefect's API, the database),
    which a tick's histogram reports as a part of its own."""

    def __init__(self) -> None:
        self._local = threading.local()

    def seconds(self) -> float:
        """This thread's time inside the calls so far."""
        return float(getattr(self._local, "seconds", 0.0))

    @contextmanager
    def timing(self) -> Iterator[None]:
        began = time.perf_counter()
        try:
            yield
        finally:
            self._local.seconds = self.seconds() + time.perf_counter() - began


IN_PREFECT = ThreadTime()
IN_DATABASE = ThreadTime()  # a transaction of the task store, from its session's start to its commit


GC_PAUSE_SECONDS = Histogram(
    "falcon_gc_pause_seconds",
    "one collection of Python's cyclic garbage collector, which stops every thread of the process",
    ["generation"],
    buckets=_STEP_BUCKETS,
)


class CollectorPauses:
    """The wall time the cyclic garbage collector has held this process, summed (``seconds``) and
    per collection (``falcon_gc_pause_seconds``). A collection holds the interpreter lock
    whichever thread set it off, so a tick pays for one that a flow run's thread started."""

    def __init__(self) -> None:
        self._began = 0.0
        self.seconds = 0.0

    def __call__(self, phase: str, info: Mapping[str, int]) -> None:
        if phase == "start":
            self._began = time.perf_counter()
            return
        pause = time.perf_counter() - self._began
        self.seconds += pause
        GC_PAUSE_SECONDS.labels(str(info["generation"])).observe(pause)

    def install(self) -> None:
        if self not in gc.callbacks:
            gc.callbacks.append(self)


GC_PAUSES = CollectorPauses()


def prefect_call(call: Callable[P, R]) -> Callable[P, R]:
    """Count the wall time of a Prefect API call against the calling thread (``IN_PREFECT``)."""

    @functools.wraps(call)
    def timed(*args: P.args, **kwargs: P.kwargs) -> R:
        with IN_PREFECT.timing():
            return call(*args, **kwargs)

    return timed


def timed_tick(tick: Callable[[], R], histogram: Histogram = TICK_SECONDS) -> Callable[[], R]:
    """``tick`` observed in ``histogram`` (falcon_dispatcher_tick_seconds), its Prefect calls apart.

    ``falcon`` is the tick minus its Prefect calls; of it, ``database`` was spent in the task
    store's transactions. Of the whole tick, ``cpu`` is its thread's CPU time and ``runqueue`` the
    time the thread was ready but waited for a core (Linux; 0 elsewhere); ``gc`` the garbage
    collections of the process during it (once ``GC_PAUSES`` is installed). The rest of a tick is
    waiting: on the servers, or for the interpreter lock the process's other threads hold."""

    def observed() -> R:
        # Read inside out, so the CPU and run-queue intervals lie within the tick's wall time.
        began, cpu_before, queued_before = time.perf_counter(), time.thread_time(), runqueue_seconds()
        prefect_before, database_before = IN_PREFECT.seconds(), IN_DATABASE.seconds()
        gc_before = GC_PAUSES.seconds
        try:
            return tick()
        finally:
            queued, cpu = runqueue_seconds() - queued_before, time.thread_time() - cpu_before
            total = time.perf_counter() - began
            prefect = IN_PREFECT.seconds() - prefect_before
            histogram.labels("total").observe(total)
            histogram.labels("prefect").observe(prefect)
            histogram.labels("falcon").observe(max(0.0, total - prefect))
            histogram.labels("database").observe(IN_DATABASE.seconds() - database_before)
            histogram.labels("cpu").observe(cpu)
            histogram.labels("runqueue").observe(max(0.0, queued))
            histogram.labels("gc").observe(GC_PAUSES.seconds - gc_before)

    return observed


def runqueue_seconds(schedstat: Path = Path("/proc/thread-self/schedstat")) -> float:
    """The time this thread has been ready to run but waiting for a core: the second field of
    Linux's schedstat (nanoseconds); 0 where the file is missing or unreadable."""
    try:
        return int(schedstat.read_text().split()[1]) / 1e9
    except (OSError, IndexError, ValueError):
        return 0.0


# -- tasks: moves, latencies, durations, outcomes (written by task_events.PrometheusTaskEvents)

_QUEUE = ["cluster", "topology"]
# From a second (a pickup) to a day (a long training run); beyond it lands in +Inf.
_TASK_BUCKETS = (
    0.25, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1200.0, 1800.0,
    3600.0, 7200.0, 14400.0, 43200.0, 86400.0,
)  # fmt: skip
TRANSITIONS = Counter(
    "falcon_task_transitions",
    "tasks moved from one stage to the next (new, waiting, acquiring, dispatched, running, releasing, done)",
    [*_QUEUE, "from", "to"],
)
OUTCOMES = Counter(
    "falcon_task_outcomes",
    "tasks ended, by Status and Reason (Reason empty for Succeeded and Aborted)",
    [*_QUEUE, "status", "reason"],
)
LATENCY = Histogram(
    "falcon_task_latency_seconds",
    "from the row's insert to a milestone: waiting (taken in), dispatched (Job created), running",
    [*_QUEUE, "milestone"],
    buckets=_TASK_BUCKETS,
)
PHASE_SECONDS = Histogram(
    "falcon_task_phase_seconds",
    "time a task spent in a stage, observed when it leaves it, when this process saw it enter",
    [*_QUEUE, "phase"],
    buckets=_TASK_BUCKETS,
)
RUN_SECONDS = Histogram(
    "falcon_task_run_seconds",
    "from the Job's creation (dispatched_at, where the timeout starts) to the outcome known",
    [*_QUEUE, "status"],
    buckets=_TASK_BUCKETS,
)
DURATION = Histogram(
    "falcon_task_duration_seconds",
    "from the row's insert to its terminal status written",
    [*_QUEUE, "status"],
    buckets=_TASK_BUCKETS,
)

PICKS_DEFERRED = Counter(
    "falcon_picks_deferred",
    "a queue's next task due a pick, left to the next tick: the slot service (Prefect's API)"
    " answered busy (429, 5xx) or not at all",
    _QUEUE,
)

# -- node pools and orphans

POOL_CREATIONS = Counter(
    "falcon_node_pool_creations",
    "node pools recorded for creation for a task, by decision: reservation, flex_start, or"
    " fallback (flex-start because the reservation was short of room)",
    [*_QUEUE, "decision"],
)
POOL_REUSES = Counter(
    "falcon_node_pool_reuses",
    "creations avoided: a task took an idle pool (kept, warm), was handed one (hand_over) or took back"
    " one marked for deletion that GKE had not begun deleting (taken_back)",
    [*_QUEUE, "how"],
)
ORPHANS = Counter(
    "falcon_orphans_found",
    "pools, Jobs and Services found with no live task or record, and deleted",
    ["cluster", "kind"],
)

# -- GKE, Compute and Kubernetes calls (counted by errors.google_errors / kubernetes_errors)

API_CALLS = Counter(
    "falcon_api_calls",
    "GKE, Compute and Kubernetes API calls, by outcome: ok, not_found, conflict, retryable, final",
    ["api", "call", "outcome"],
)
API_ERRORS = Counter(
    "falcon_api_errors",
    "API errors by kind (the HTTP status, or timeout, connection, auth) and whether Falcon retries"
    " them: each retryable one is retried by its step until its tries or deadline run out",
    ["api", "call", "kind", "retryable"],
)
API_SECONDS = Histogram(
    "falcon_api_call_seconds", "one API call, answered or not", ["api", "call"], buckets=_STEP_BUCKETS
)

# -- what the dispatcher sees (record_view)

QUEUE_WAITING = Gauge("falcon_queue_waiting_tasks", "tasks waiting in the queue", _QUEUE)
QUEUE_ACQUIRING = Gauge(
    "falcon_queue_acquiring", "1 while one of the queue's tasks holds its slot (acquires)", _QUEUE
)
RUNNING_JOBS = Gauge("falcon_cluster_running_jobs", "Jobs of tasks in phase running", ["cluster"])
RESERVATION_FREE = Gauge(
    "falcon_reservation_free_nodes",
    "the cluster's reservation's room: count - inUseCount (nodes), as last read",
    ["cluster", "reservation"],
)
NODE_POOLS = Gauge(
    "falcon_node_pools",
    "Falcon's live node pools, by mode (reservation, flex_start) and state (creating, in_use,"
    " kept: idle after a task, warm: idle for a tidal rule, deleting)",
    ["cluster", "topology", "mode", "state"],
)

LabelSet = tuple[str, ...]


class ClusterLabels:
    """The ``cluster`` label of a cluster id: its name, or ``name@project:location`` when two
    registered clusters share the name (GKE names are unique only per project and location); an
    id the registry does not know (yet) is its own label."""

    def __init__(self, clusters: Callable[[], Iterable[Cluster]] | None = None) -> None:
        self._known = KnownClusters(clusters)

    def __call__(self, cluster_id: str) -> str:
        cluster = self._known.get(cluster_id)
        if cluster is None:
            return cluster_id
        shared = sum(c.name == cluster.name for c in self._known.all()) > 1
        return f"{cluster.name}@{cluster.project}:{cluster.location}" if shared else cluster.name

    def queue(self, queue: QueueKey) -> str:
        """The queue as tags and slots name it (``queue_label``), for log lines."""
        cluster = self._known.get(queue.cluster_id)
        return queue_label(cluster, queue.topology) if cluster else f"{queue.cluster_id}:{queue.topology}"

    def learn(self, clusters: Iterable[Cluster]) -> None:
        self._known.learn(clusters)


class ViewGauges:
    """Sets the gauges from a ResourceView, and removes the series of what the view no longer
    has (a queue emptied, a pool deleted): a scrape never sees a gap, only the old value or the
    new one."""

    def __init__(self, labels: ClusterLabels) -> None:
        self._labels = labels
        self._shown: dict[Gauge, set[LabelSet]] = {}
        self._lock = threading.Lock()

    def record(self, view: ResourceView) -> None:
        self._labels.learn(view.clusters)
        name = self._labels
        queues = set(view.waiting) | set(view.acquiring)
        with self._lock:
            self._set(QUEUE_WAITING, {_queue(name, q): view.waiting.get(q, 0) for q in queues})
            self._set(QUEUE_ACQUIRING, {_queue(name, q): int(q in view.acquiring) for q in queues})
            running = {c.id: 0 for c in view.clusters} | dict(view.running_jobs)
            self._set(RUNNING_JOBS, {(name(c),): n for c, n in running.items()})
            self._set(
                RESERVATION_FREE,
                {(name(c), r.name): r.free for c, r in view.reservations.items() if r is not None},
            )
            self._set(NODE_POOLS, _pool_counts(name, view.pools, view.warm_pools))
        for queue in view.waiting:  # a pick's first count then shows as an increase (queue-stuck alert)
            TRANSITIONS.labels(*_queue(name, queue), "waiting", "acquiring")

    def _set(self, gauge: Gauge, values: Mapping[LabelSet, float]) -> None:
        for labels, value in values.items():
            gauge.labels(*labels).set(value)
        for gone in self._shown.get(gauge, set()) - set(values):
            gauge.remove(*gone)
        self._shown[gauge] = set(values)


def _queue(name: Callable[[str], str], queue: QueueKey) -> LabelSet:
    return name(queue.cluster_id), queue.topology


def _pool_counts(
    name: Callable[[str], str], pools: Iterable[NodePool], warm: Iterable[tuple[str, str]]
) -> dict[LabelSet, float]:
    warm_names = set(warm)
    counts: dict[LabelSet, float] = {}
    for pool in pools:
        if pool.state is PoolState.DELETED:
            continue
        state = pool.state.value
        if pool.state is PoolState.IDLE:
            state = "warm" if (pool.cluster_id, pool.name) in warm_names else "kept"
        key = (name(pool.cluster_id), pool.topology, pool.mode.value, state)
        counts[key] = counts.get(key, 0) + 1
    return counts


_VIEW = ViewGauges(ClusterLabels())  # one per process, as the gauges it sets; a view names its clusters


def record_view(view: ResourceView) -> None:
    """Set the dispatcher's gauges (queue depth, acquiring queues, running Jobs per cluster,
    reservation room, node pools by mode and state) from what it sees now."""
    _VIEW.record(view)
