"""Tidal warm pools: keep each queue's target of idle node pools ready (issue 9 §3).

Two halves. The dispatcher's ``Warmer`` finds, every reconcile round and at each fire, the queues
whose latest fire is not yet topped up and that are short of their target (idle pools plus warm
pools being created), and starts one warm run per such queue; it never calls GKE, so the tick
never waits on a pool. The run plans (``plan_warm_pools``: placement decided and each pool
recorded before GKE is asked, under the cluster's lock, exactly as a task's provisioning does)
and then creates (``create_warm_pools``: create, wait until ready, the pool goes idle for the
queue's tasks). Counting again under the lock is what keeps any number of runs from going past
the target, so a run started twice (a dispatcher restarted while one was alive) duplicates
nothing; a run that died leaves its pools recorded as being created, and the next run of the
queue resumes them. The reaper trims pools above the target (``reap_idle_pools``).
"""

from __future__ import annotations

import contextlib
import itertools
import logging
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping, Sequence
from datetime import datetime, timedelta

from falcon.domain.errors import ConflictError, FalconError, NotFoundError, PermanentError, TemporaryError
from falcon.domain.lifecycle import NodePool, PoolState
from falcon.domain.model import Cluster, ClusterStatus, QueueKey
from falcon.domain.node_pools import NodePoolPlan
from falcon.domain.topology import resolve_shape
from falcon.domain.warm_pools import (
    WarmRule,
    WarmTarget,
    by_queue,
    creation_held,
    needs_topping_up,
    schedulable,
    warm_deficit,
    warm_pool_name,
    warm_target,
)
from falcon.services.acquisition import (
    creating_pool,
    decide_placement,
    ensure_workload_policy,
    with_operation_error,
)
from falcon.services.context import Services
from falcon.services.pool_deletion import ask_delete
from falcon.services.ports import TaskStore

logger = logging.getLogger(__name__)


def _warm_creating(pool: NodePool) -> bool:
    """A task's pool always has its holder while it is created; a warm pool has none."""
    return pool.state is PoolState.CREATING and pool.holder_task_id is None


class Warmer:
    """The dispatcher's half: which queues need a warm run now, one live run per queue at most.

    The runs it started live in memory only: after a restart a queue may get a second run while
    the first is still alive, which the runs' own count under the cluster lock makes harmless."""

    def __init__(self, services: Services) -> None:
        self.services = services
        self._runs: dict[QueueKey, str] = {}

    def converge(
        self,
        clusters: Mapping[str, Cluster],
        rules: Sequence[WarmRule],
        targets: Mapping[QueueKey, WarmTarget],
        pools: Iterable[NodePool],
        now: datetime,
    ) -> list[str]:
        """Start a warm run for each queue short of its target, or with warm pools left being
        created (a run died); returns those queues' slot names."""
        hold = timedelta(seconds=self.services.settings.warm_retry_seconds)
        wanted = queues_to_warm(clusters, rules, targets, pools, now, hold)
        launcher, started = self.services.launcher, []
        for queue in sorted(wanted, key=lambda q: q.slot_name):
            run = self._runs.get(queue)
            if run is not None and launcher.is_alive(run):
                continue
            self._runs[queue] = launcher.start_warm(queue)
            started.append(queue.slot_name)
        self._runs = {q: run for q, run in self._runs.items() if q in wanted}
        return started


def queues_to_warm(
    clusters: Mapping[str, Cluster],
    rules: Sequence[WarmRule],
    targets: Mapping[QueueKey, WarmTarget],
    pools: Iterable[NodePool],
    now: datetime,
    hold: timedelta,
) -> set[QueueKey]:
    """Queues of active clusters short of their target (unless a failure holds them back), and
    queues whose warm pools are still being created: those need a run to follow them."""
    listed = list(pools)
    idle = Counter(p.queue for p in listed if p.state is PoolState.IDLE)
    creating = Counter(p.queue for p in listed if _warm_creating(p))
    rules_of = by_queue(rules)
    short = {
        queue
        for queue, target in targets.items()
        if _active(clusters.get(queue.cluster_id))
        and needs_topping_up(target, rules_of.get(queue, []))
        and warm_deficit(target.pools, idle[queue], creating[queue]) > 0
        and not creation_held(rules_of.get(queue, []), now, hold)
    }
    return short | {queue for queue in creating if queue.cluster_id in clusters}


def _active(cluster: Cluster | None) -> bool:
    return cluster is not None and cluster.status is ClusterStatus.ACTIVE


# -- the warm run ----------------------------------------------------------------------------------


def plan_warm_pools(services: Services, queue: QueueKey) -> list[str]:
    """Record the pools the queue is short of (placement decided as for a task's pool), and
    return every warm pool of the queue still to be created or waited for.

    A problem that retrying cannot fix (a reservation the slice cannot use, an unknown topology)
    is remembered on the active rule, which holds the queue's warming back for a while; a
    TemporaryError (Compute unavailable) is left to the run's retries."""
    store, now = services.store, services.clock.now()
    cluster = _cluster(services, queue)
    rules = [rule for rule in schedulable(store.warm_rules()) if rule.queue == queue]
    target = warm_target(rules, now)
    hold = timedelta(seconds=services.settings.warm_retry_seconds)
    if cluster is not None and _active(cluster) and target.rule and not creation_held(rules, now, hold):
        try:
            _write_ahead(services, cluster, queue, target, now)
        except (PermanentError, ValueError) as exc:  # ValueError: a regional cluster without a zone
            store.warm_rule_failed(target.rule, str(exc), now)
            logger.warning("event=warm_plan_failed rule=%s error=%s", target.rule, exc)
    creating = store.pools_in([PoolState.CREATING])
    return [p.name for p in creating if p.queue == queue and _warm_creating(p)]


def _cluster(services: Services, queue: QueueKey) -> Cluster | None:
    return next((c for c in services.store.clusters() if c.id == queue.cluster_id), None)


def _write_ahead(
    services: Services, cluster: Cluster, queue: QueueKey, target: WarmTarget, now: datetime
) -> None:
    """Count and record under the cluster's lock, one decision per pool: each sees the room the
    ones before it took, so a reservation with room for one of two gets one, flex-start the other."""
    shape = resolve_shape(cluster.tpu_type, queue.topology)
    with services.store.cluster_locked(cluster.id) as store:
        if not needs_topping_up(target, store.warm_rules()):
            return  # another run recorded this fire's pools, or a task took them since
        of_queue = [p for p in store.pools_in([PoolState.CREATING, PoolState.IDLE]) if p.queue == queue]
        idle = sum(1 for p in of_queue if p.state is PoolState.IDLE)
        creating = sum(1 for p in of_queue if _warm_creating(p))
        names = _fresh_names(store, queue, now)
        for _ in range(warm_deficit(target.pools, idle, creating)):
            decision = decide_placement(services, store, cluster, shape)
            plan = NodePoolPlan(next(names), shape, decision.mode, decision.reservation, cluster.node_zone)
            store.write_ahead_pool(creating_pool(cluster.id, plan, None), now, warm_rule=target.rule)
        assert target.rule is not None and target.fired_at is not None  # needs_topping_up held
        store.warm_rule_warmed(target.rule, target.fired_at)


def _fresh_names(store: TaskStore, queue: QueueKey, now: datetime) -> Iterator[str]:
    """Warm pool names no record has (a name is never reused, even once its pool is deleted)."""
    for index in itertools.count():
        name = warm_pool_name(queue, now, index)
        if store.pool(queue.cluster_id, name) is None:
            yield name


def create_warm_pools(services: Services, queue: QueueKey, names: Sequence[str]) -> list[str]:
    """Create the recorded warm pools and wait until each is ready (then idle for the queue's
    tasks) or failed (then deleted, its rule told why); returns the names that became ready.

    This loop owns every TemporaryError of its calls until the node-pool deadline, as a task's
    wait for its pool does; GKE's 409 on create means an earlier run asked already."""
    cluster = _cluster(services, queue)
    if cluster is None:
        return []
    clock = services.clock
    deadline = clock.now() + timedelta(seconds=services.settings.node_pool_timeout_seconds)
    plans = {name: plan for name in names if (plan := _recorded_plan(services, cluster, name)) is not None}
    unasked, ready = set(plans), []
    while plans:
        for name, plan in list(plans.items()):
            try:
                if name in unasked:
                    _create(services, cluster, plan)
                    unasked.discard(name)
                if _is_ready(services, cluster, name):
                    services.store.warm_pool_ready(cluster.id, name, clock.now())
                    ready.append(name)
                    del plans[name]
            except TemporaryError:
                continue  # GKE busy or unreachable: asked again next round
            except PermanentError as exc:
                _failed(services, cluster, name, str(exc))
                del plans[name]
        if plans and clock.now() >= deadline:
            for name in plans:
                _failed(services, cluster, name, f"node pool {name} not ready within the node-pool timeout")
            break
        if plans:
            clock.sleep(services.settings.poll_seconds)
    return ready


def _recorded_plan(services: Services, cluster: Cluster, name: str) -> NodePoolPlan | None:
    """The plan as recorded before GKE was asked; None once it is no warm pool being created."""
    record = services.store.pool(cluster.id, name)
    if record is None or not _warm_creating(record):
        return None
    shape = resolve_shape(cluster.tpu_type, record.topology)
    return NodePoolPlan(name, shape, record.mode, record.reservation, cluster.node_zone)


def _create(services: Services, cluster: Cluster, plan: NodePoolPlan) -> None:
    ensure_workload_policy(services, cluster, plan)
    with contextlib.suppress(ConflictError):
        services.node_pools.create(cluster, plan)


def _is_ready(services: Services, cluster: Cluster, name: str) -> bool:
    """True once GKE reports the pool ready; PermanentError when it is broken or gone, with the
    failed create operation's text where GKE puts stockout and quota reasons."""
    try:
        status = services.node_pools.get(cluster, name)
    except NotFoundError as exc:
        raise PermanentError(
            with_operation_error(services, cluster, name, f"node pool {name} disappeared")
        ) from exc
    if status.broken:
        detail = f"node pool {name} is {status.status}" + (f": {status.detail}" if status.detail else "")
        raise PermanentError(with_operation_error(services, cluster, name, detail))
    return status.ready


def _failed(services: Services, cluster: Cluster, name: str, error: str) -> None:
    """The pool goes (the reaper confirms the deletion each round) and its rule remembers why."""
    if services.store.warm_pool_failed(cluster.id, name, error, services.clock.now()):
        logger.warning("event=warm_pool_failed pool=%s error=%s", name, error)
        with contextlib.suppress(FalconError):
            ask_delete(services, cluster, name)
