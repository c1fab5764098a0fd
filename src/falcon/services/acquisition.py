"""Phases 3 and 4 of the design: provision a node pool, dispatch the Job, wait for its pods.

Each step is idempotent and resumable from the database plus what GKE and Kubernetes report:
names are derived from the task id, the pool is recorded before it is created (write-ahead),
creates treat 409 as 'already done'. A step that finds the task aborted, failed or timed out
raises ``TaskEnded``; the lifecycle flow then releases whatever the task holds.

Waits have one owner each. ``provision`` and ``dispatch`` make single calls and leave a
TemporaryError to their Prefect task's retries; ``wait_pool_ready`` and ``wait_pods_running``
poll, and their loop (on the clock port, until the deadline) owns every TemporaryError of
the calls they make: their Prefect tasks do not retry.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import Any

from falcon.domain.errors import (
    BusyError,
    ConflictError,
    FalconError,
    NotFoundError,
    PermanentError,
    TemporaryError,
)
from falcon.domain.events import Stage, TaskMove
from falcon.domain.job_manifest import JobTarget, render_job, render_service
from falcon.domain.lifecycle import (
    NodePool,
    Outcome,
    PoolState,
    TaskEnded,
    TaskView,
    failed,
    timed_out,
)
from falcon.domain.messages import MessageKey
from falcon.domain.model import Cluster, ProvisioningMode, is_zone, k8s_job_name_for, node_pool_name_for
from falcon.domain.node_pools import NodePoolPlan, PoolStatus, ReservationRef
from falcon.domain.scheduling import (
    ProvisioningDecision,
    ReservationCapacity,
    decide_provisioning,
)
from falcon.domain.status import Reason
from falcon.domain.topology import SliceShape, resolve_shape
from falcon.domain.workloads import (
    ClusterEvent,
    JobState,
    PodState,
    StartGrace,
    events_may_decide,
    start_failure,
)
from falcon.services.context import Services
from falcon.services.pool_deletion import take_back
from falcon.services.ports import ClusterJobs, TaskStore
from falcon.services.release import OBSERVED_CREATIONS, OBSERVED_RUNS

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class PoolChoice:
    """The pool a task runs on; ``plan`` is set while the pool may still have to be created."""

    name: str
    plan: NodePoolPlan | None


def provision(services: Services, view: TaskView, final_attempt: bool = False) -> PoolChoice:
    """Reuse an idle pool of the queue, or decide how to create one (reservation or flex-start).

    A TemporaryError (Compute unavailable, rate limited) is left to Prefect's retries; on the
    ``final_attempt`` it ends the task NodePoolFailed with the error's text instead of failing
    the run, which the dispatcher would only restart forever."""
    try:
        return _provision(services, view)
    except TemporaryError as exc:
        if final_attempt:
            raise _pool_failed(services, str(exc)) from exc
        raise


def _provision(services: Services, view: TaskView) -> PoolChoice:
    if not view.cluster.zone and not is_zone(view.cluster.location):
        no_zone = f"cluster {view.cluster.name} is regional and has no node zone (cluster add --zone)"
        raise _pool_failed(services, no_zone)
    store, task_id = services.store, view.task.id
    held = store.held_pool(view.cluster.id, task_id)  # an earlier attempt of this task got one
    if held is None:
        held, how = _take_idle(services, view)
        if held is not None:
            _took_idle(services, view, held, how)
            return PoolChoice(held.name, None)
        plan = _decide_and_write_ahead(services, view)
    elif held.state is PoolState.IN_USE:
        return PoolChoice(held.name, None)  # reused, or resumed after the pool was already ready
    else:  # resumed after a crash or retry: the create may never have reached GKE
        plan = _plan(view, held.mode, held.reservation)
    _ensure_workload_policy(services, view, plan)
    return PoolChoice(plan.name, plan)


def _take_idle(services: Services, view: TaskView) -> tuple[NodePool | None, str | None]:
    """The queue's oldest idle pool, or else one of its marked pools taken back (``taken_back``)."""
    store, now = services.store, services.clock.now()
    held = store.claim_idle_pool(view.queue, view.task.id, now)
    if held is not None:
        return held, None
    marked = _marked(services, store.queue_pools(view.queue, [PoolState.DELETING]))
    if marked and take_back(services, view.cluster, marked):
        return store.claim_idle_pool(view.queue, view.task.id, now), "taken_back"
    return None, None


def _marked(services: Services, pools: list[NodePool]) -> list[str]:
    """The names of ``pools`` marked for deletion, where the keeping policy takes them back."""
    takes_back = services.keep_policy.takes_back
    return [p.name for p in pools if p.state is PoolState.DELETING] if takes_back else []


def _took_idle(services: Services, view: TaskView, pool: NodePool, how: str | None) -> None:
    """The task took an idle pool (a creation avoided): reported, ``how`` it came to the task
    (``hand_over``, ``taken_back``; else ``warm`` or ``kept`` by its origin), and its Message
    says whose it is."""
    rule = services.store.warm_origin(pool.cluster_id, pool.name)
    services.events.pool_reused(view.queue, how or ("warm" if rule else "kept"))
    message = _reuse_message(services, pool, rule)
    _note_pending(services, view.task.id, message, Reason.PROVISIONING, pool.name)


def _reuse_message(services: Services, pool: NodePool, rule: str | None) -> str:
    """A warm pool says which tidal rule (``rule``) made it ready; a kept one only that it is reused."""
    if rule is not None:
        return services.say(MessageKey.PROVISIONING_WARM, pool=pool.name, rule=rule)
    return services.say(MessageKey.PROVISIONING_REUSE, pool=pool.name)


def _plan(view: TaskView, mode: ProvisioningMode, reservation: str | None) -> NodePoolPlan:
    return NodePoolPlan(
        name=node_pool_name_for(view.task.id, view.shape.topology),
        shape=view.shape,
        mode=mode,
        reservation=reservation,
        zone=view.cluster.node_zone,
    )


def _ensure_workload_policy(services: Services, view: TaskView, plan: NodePoolPlan) -> None:
    try:
        ensure_workload_policy(services, view.cluster, plan)
    except PermanentError as exc:
        raise _pool_failed(services, str(exc)) from exc


def ensure_workload_policy(services: Services, cluster: Cluster, plan: NodePoolPlan) -> None:
    """TPU7x multi-host: the pool's placementPolicy names a workload policy that must exist first,
    in the cluster's project and the region of the pool's zone."""
    if plan.workload_policy is not None:
        services.workload_policies.ensure(
            cluster.project, cluster.region, plan.workload_policy, plan.shape.topology
        )


def _decide_and_write_ahead(services: Services, view: TaskView) -> NodePoolPlan:
    """Choose reservation or flex-start and record the pool, as one step per cluster.

    The cluster's row lock serialises this between lifecycle runs of the cluster's queues, and
    the reservation's room excludes Falcon's own reservation pools still being created (GCE
    counts a pool against the reservation only once its nodes exist): two queues can no longer
    both claim the last room, the second getting a stockout instead of flex-start."""
    now = services.clock.now()
    with services.store.cluster_locked(view.cluster.id) as store:
        decision = _decide(services, store, view)
        plan = _plan(view, decision.mode, decision.reservation)
        store.write_ahead_pool(creating_pool(view.cluster.id, plan, view.task.id), now)
        moved = store.note_pending(
            view.task.id, _provisioning_message(services, decision), now, decision.reason, plan.name
        )
    if not moved:
        services.ensure_active(view.task.id)
    services.events.pool_created(view.queue, plan.mode, decision.reason is Reason.PROVISIONING_FALLBACK)
    return plan


def _decide(services: Services, store: TaskStore, view: TaskView) -> ProvisioningDecision:
    try:
        return decide_placement(services, store, view.cluster, view.shape)
    except PermanentError as exc:
        raise _pool_failed(services, str(exc)) from exc


def decide_placement(
    services: Services, store: TaskStore, cluster: Cluster, shape: SliceShape
) -> ProvisioningDecision:
    """Reservation or flex-start for a new pool, a task's or a warm one. Only a READY reservation
    of the slice's machine type that is short of room falls back to flex-start; one that cannot
    be read or used raises PermanentError (UnusableReservationError) naming the problem."""
    return decide_provisioning(shape.nodes, shape.machine_type, _reservation(services, store, cluster))


def _reservation(services: Services, store: TaskStore, cluster: Cluster) -> ReservationCapacity | None:
    """The cluster's reservation read in its owner's project and the pool's zone, minus the room
    Falcon's own reservation pools still being created will take."""
    if not cluster.default_reservation:
        return None
    try:
        ref = ReservationRef.parse(cluster.default_reservation, cluster.project)
        zone = cluster.node_zone
    except ValueError as exc:  # a malformed name; a regional cluster without a zone
        raise PermanentError(str(exc)) from exc
    found = services.reservations.capacity(ref, zone)  # PermanentError: not found, permission denied
    in_flight = sum(
        resolve_shape(cluster.tpu_type, p.topology).nodes
        for p in store.pools_in([PoolState.CREATING])
        if p.cluster_id == cluster.id
        and p.reservation == found.name
        and p.mode is ProvisioningMode.RESERVATION
    )
    return replace(found, in_use=found.in_use + in_flight)


def _provisioning_message(services: Services, decision: ProvisioningDecision) -> str:
    if decision.reason is Reason.PROVISIONING_FALLBACK:
        return services.say(MessageKey.PROVISIONING_FALLBACK)
    if decision.reservation:
        return services.say(MessageKey.PROVISIONING_RESERVATION, reservation=decision.reservation)
    return services.say(MessageKey.PROVISIONING_FLEX_START)


def creating_pool(cluster_id: str, plan: NodePoolPlan, holder: str | None) -> NodePool:
    """The write-ahead record of a pool about to be created: a task's (its holder), or warm (none)."""
    return NodePool(
        cluster_id=cluster_id,
        name=plan.name,
        topology=plan.shape.topology,
        machine_type=plan.shape.machine_type,
        mode=plan.mode,
        reservation=plan.reservation,
        state=PoolState.CREATING,
        holder_task_id=holder,
    )


def wait_pool_ready(services: Services, view: TaskView, choice: PoolChoice, started: datetime) -> str:
    """Create the pool if it still needs creating, then poll it until it is ready; returns the
    name of the pool the task runs on.

    That is another pool when one of the queue's pools goes idle first (a task ended, a warm
    pool came up): the task takes it at its next poll rather than wait for its own (hand-over),
    also while it waits out GKE's refusal to create (other operations hold the pool or the
    cluster), whose create is asked again only after ``FALCON_GKE_BUSY_RETRY_SECONDS``, while
    the cluster's deletions go first (``_deletions_go_first``), and while a busy pool of its
    queue is likely to free first (``_busy_pool_first``). Those refusals and
    transient errors are waited out here until the deadline; a failed pool ends the task with
    GKE's text (the pool's, and its create operation's, where GKE puts stockout and quota
    reasons)."""
    clock = services.clock
    deadline = started + timedelta(seconds=services.settings.node_pool_timeout_seconds)
    plan, refusal, status, create_at = choice.plan, None, None, clock.now()
    arrived, deferred = create_at, False
    while True:
        services.ensure_active(view.task.id)
        if (taken := _hand_over(services, view, choice.name)) is not None:
            return taken
        if plan is not None and clock.now() >= create_at:
            if _deletions_go_first(services, view, arrived, deferred) or _busy_pool_first(
                services, view, plan, arrived, deferred
            ):
                deferred = True
            else:
                if deferred or isinstance(refusal, BusyError):
                    plan = _reservation_after_all(services, view, plan)
                refusal = _try_create(services, view, plan)
                plan = plan if refusal else None
                wait = services.settings.gke_busy_retry_seconds if isinstance(refusal, BusyError) else 0.0
                create_at = clock.now() + timedelta(seconds=wait)
        if plan is None:
            status = _pool_status(services, view, choice.name)
            if status is not None and status.ready:
                services.store.pool_ready(view.cluster.id, choice.name, clock.now())
                return choice.name
        if clock.now() >= deadline:
            raise _timeout(services, _not_ready(choice.name, plan is not None, refusal, status))
        clock.sleep(services.settings.poll_seconds)


def _not_ready(name: str, unasked: bool, refusal: TemporaryError | None, status: PoolStatus | None) -> str:
    """Why the pool was not ready by the deadline, for the task's Message."""
    if refusal:
        return f"GKE kept refusing: {refusal}"
    if unasked:
        return f"node pool {name} not asked for: the cluster's deletions went first"
    return f"node pool {name} still {status.status if status else 'unknown'}"


def _hand_over(services: Services, view: TaskView, own: str) -> str | None:
    """Take an idle pool of the queue while the task's own pool is still being created, or one
    of its pools marked for deletion that GKE has not begun deleting (``take_back``); returns
    its name, or None. Rule 3 is kept: the queue's slot lets one task acquire at a time, the one
    the rule picked first, so no waiting task is passed over.

    The task lets go of its own pool in the same write: one GKE has goes on being created and is
    then idle for the queue's next task (or deleted by the usual rule); one GKE never got is
    closed. GKE is asked which it is; when it does not answer, the hand-over waits a round."""
    store = services.store
    pools = store.queue_pools(view.queue, [PoolState.IDLE, PoolState.DELETING])  # one read a poll
    idle = any(p.state is PoolState.IDLE for p in pools)
    marked = [] if idle else _marked(services, pools)
    if not idle and not marked:
        return None
    try:
        own_status: PoolStatus | None = services.node_pools.get(view.cluster, own)
    except NotFoundError:
        own_status = None
    except TemporaryError:
        return None
    if own_status is not None and own_status.ready:
        return None  # its own is ready: this round's poll takes it
    if not idle and not take_back(services, view.cluster, marked):
        return None  # nothing idle, and no marked pool GKE has not begun deleting
    taken = store.hand_over(view.queue, view.task.id, own, own_status is not None, services.clock.now())
    if taken is None:
        return None
    logger.info("event=hand_over task_id=%s pool=%s own=%s", view.task.id, taken.name, own)
    _took_idle(services, view, taken, "hand_over" if idle else "taken_back")
    return taken.name


def _deletions_go_first(services: Services, view: TaskView, arrived: datetime, deferred: bool) -> bool:
    """Does a pool of the cluster marked for deletion, not gone yet, go before this creation?

    Only on a cluster that runs one node-pool operation at a time (``FALCON_GKE_OPERATIONS_PER_CLUSTER``
    1; GKE documents one per node pool, and a deletion then holds nothing up): a pool waiting to
    be deleted is paid for until it is gone, while a creation asked later holds no nodes until it
    starts. So the deletion goes first: it costs this task a deletion's time to its start and
    saves the marked pool's nodes that long. For twice a creation's prior at most, from when the
    task ``arrived`` to create: the end of a busy spell can mark many pools at once, and the task
    must not wait for all of them; a deletion marked longer ago than that is taken as stuck.
    ``deferred``: the task waited already (it is logged once)."""
    if services.settings.gke_operations_per_cluster > 1:
        return False
    now, window = services.clock.now(), timedelta(seconds=2 * services.settings.pool_creation_prior_seconds)
    if now - arrived >= window:
        return False
    marked = services.store.deletions_marked_since(view.cluster.id, now - window)
    if marked and not deferred:
        logger.info("event=create_after_deletions task_id=%s deletions=%d", view.task.id, marked)
    return marked > 0


def _busy_pool_first(
    services: Services, view: TaskView, plan: NodePoolPlan, arrived: datetime, deferred: bool
) -> bool:
    """Does the task wait for a busy pool of its queue rather than ask GKE for its own?

    The keeping policy says (``KeepPolicy.wait_for_busy_pool``): a pool whose Job ends before a
    new one would be ready is taken by hand-over, and the creation and its deletion are saved.
    Without this, the task's own pool would be created all the same and, the task having taken
    the freed one, come up with nobody to use it. ``deferred``: the task waited already (it is
    logged once). Off unless ``FALCON_POOL_BUSY_WAIT_CHANCE`` is set."""
    if not services.keep_policy.waits_for_busy_pools:
        return False
    now = services.clock.now()
    busy = services.store.busy_pools(view.queue, OBSERVED_RUNS, now)
    if busy.empty:
        return False
    # Only its creations (and deletions) are priced: neither its arrival gaps nor the fleet's.
    seen = services.store.queue_observations([view.queue], 0, OBSERVED_CREATIONS)[view.queue]
    waits = services.keep_policy.wait_for_busy_pool(seen, plan.mode, busy, (now - arrived).total_seconds())
    if waits and not deferred:
        logger.info(
            "event=create_waits_for_busy_pool task_id=%s running=%d ending=%d",
            view.task.id,
            len(busy.running_for),
            busy.ending,
        )
    return waits


def _reservation_after_all(services: Services, view: TaskView, plan: NodePoolPlan) -> NodePoolPlan:
    """A flex-start fallback that had to wait (behind the cluster's deletions, or for GKE's one
    operation) goes to the reservation if room has come since it was decided: a deletion that
    went first often frees it, and a reservation pool is up a scale-up sooner than a flex-start
    one. Only a pool GKE does not have is replanned, so a create that reached GKE keeps its mode;
    when GKE or Compute cannot be read now, the fallback stands."""
    if plan.mode is not ProvisioningMode.FLEX_START or not view.cluster.default_reservation:
        return plan
    if not _gke_lacks(services, view.cluster, plan.name):
        return plan
    now = services.clock.now()
    try:
        with services.store.cluster_locked(view.cluster.id) as store:
            decision = decide_placement(services, store, view.cluster, view.shape)
            if decision.mode is not ProvisioningMode.RESERVATION:
                return plan
            better = _plan(view, decision.mode, decision.reservation)
            if not store.replan_pool(creating_pool(view.cluster.id, better, view.task.id), now):
                return plan
            message = _provisioning_message(services, decision)
            store.note_pending(view.task.id, message, now, decision.reason)
    except FalconError:
        return plan
    logger.info("event=fallback_withdrawn task_id=%s pool=%s", view.task.id, plan.name)
    return better


def _gke_lacks(services: Services, cluster: Cluster, name: str) -> bool:
    """Does GKE answer that it has no pool of this name? (Not when it cannot be asked now.)"""
    try:
        services.node_pools.get(cluster, name)
    except NotFoundError:
        return True
    except FalconError:
        return False
    return False


def _try_create(services: Services, view: TaskView, plan: NodePoolPlan) -> TemporaryError | None:
    """Ask GKE for the pool; None once it is accepted (or exists), the refusal while GKE is busy."""
    try:
        services.node_pools.create(view.cluster, plan)
    except ConflictError:
        return None  # created by an earlier attempt of this same task
    except TemporaryError as exc:
        return exc
    except PermanentError as exc:
        raise _pool_failed(services, str(exc)) from exc
    return None


def _pool_status(services: Services, view: TaskView, name: str) -> PoolStatus | None:
    """The pool as GKE reports it; None when GKE did not answer this time. A pool that is gone
    or broken ends the task."""
    try:
        status = services.node_pools.get(view.cluster, name)
    except NotFoundError as exc:
        raise _pool_failed(
            services, with_operation_error(services, view.cluster, name, f"node pool {name} disappeared")
        ) from exc
    except TemporaryError:
        return None
    if status.broken:
        detail = f"node pool {name} is {status.status}" + (f": {status.detail}" if status.detail else "")
        raise _pool_failed(services, with_operation_error(services, view.cluster, name, detail))
    return status


def with_operation_error(services: Services, cluster: Cluster, pool_name: str, detail: str) -> str:
    """Add the failed create operation's text: GKE puts the reason (stockout, quota) there."""
    try:
        error = services.node_pools.create_error(cluster, pool_name)
    except FalconError:
        error = None  # best effort: the pool's own state already says it failed
    return f"{detail}; operation: {error}" if error and error not in detail else detail


def _timeout(services: Services, detail: str) -> TaskEnded:
    minutes = services.settings.node_pool_timeout_seconds // 60
    return TaskEnded(
        failed(
            services.say,
            Reason.NODE_POOL_TIMEOUT,
            MessageKey.NODE_POOL_TIMEOUT,
            minutes=minutes,
            detail=detail,
        )
    )


def _pool_failed(services: Services, detail: str) -> TaskEnded:
    return TaskEnded(
        failed(services.say, Reason.NODE_POOL_FAILED, MessageKey.NODE_POOL_FAILED, detail=detail)
    )


def _note_pending(
    services: Services, task_id: str, message: str, reason: Reason | None = None, pool: str | None = None
) -> None:
    """Write the Pending row's Message (and phase Reason); a row no longer Pending was aborted."""
    if not services.store.note_pending(task_id, message, services.clock.now(), reason, pool):
        services.ensure_active(task_id)


def dispatch(services: Services, view: TaskView, pool_name: str) -> str:
    """Submit the task's Job (or find the one an earlier attempt submitted); returns its name."""
    task = view.task
    job_name = k8s_job_name_for(task.id)
    _note_pending(services, task.id, services.say(MessageKey.DISPATCHING), Reason.DISPATCHING)
    settings = services.settings
    target = JobTarget(
        task.id,
        job_name,
        pool_name,
        view.cluster,
        view.shape,
        settings.gcs_mount_path,
        settings.job_service_account,
    )
    jobs, namespace = services.jobs(view.cluster), view.cluster.namespace
    try:
        jobs.ensure_namespace(namespace)
        if view.shape.multi_host:  # before the Job: its pods name the Service as their subdomain
            jobs.ensure_service(namespace, render_service(target))
        uid = submit_job(jobs, namespace, render_job(view.spec, target))
    except PermanentError as exc:
        raise TaskEnded(
            failed(services.say, Reason.JOB_SUBMIT_FAILED, MessageKey.JOB_SUBMIT_FAILED, detail=exc)
        ) from exc
    pending = services.say(MessageKey.PODS_PENDING, running=0, total=view.shape.nodes, detail="")
    if not services.store.mark_dispatched(task.id, job_name, uid, pending, services.clock.now()):
        services.ensure_active(task.id)
    elif task.dispatched_at is None:  # else an earlier attempt created the Job and reported it
        _tell(services, view, Stage.ACQUIRING, Stage.DISPATCHED)
    return job_name


def submit_job(jobs: ClusterJobs, namespace: str, manifest: dict[str, Any]) -> str:
    """Create the Job suspended (or find the one an earlier attempt created), then resume it by
    uid; returns the uid. Only this step resumes a Job, and only while its task dispatches: a
    copy whose create reached the API server after the task ended stays suspended (render_job)."""
    name = manifest["metadata"]["name"]
    try:
        uid, suspended = jobs.create_job(namespace, manifest), True
    except ConflictError:
        found = jobs.get_job(namespace, name)
        uid, suspended = found.uid, found.suspended
    if suspended:
        jobs.resume_job(namespace, name, uid)
    return uid


def wait_pods_running(services: Services, view: TaskView, job_name: str) -> int:
    """Poll until every pod of the Job runs (or it already finished); returns pods running.

    One poll is one read of the row (abort and timeout together) and the Job's calls; the
    Message is written only when it changed. Pods that can never start end the task
    (JobFailed), timeout or not: the slot is not held for a Job the cluster will not run. A Job
    deleted by someone else ends it too, as it does once running: it is not submitted again."""
    namespace, total = view.cluster.namespace, view.shape.nodes
    clock, written = services.clock, None
    while True:
        task = services.ensure_active(view.task.id)
        try:
            jobs = services.jobs(view.cluster)  # the cluster's client may still need GKE to find it
            job = jobs.get_job(namespace, job_name)
            pods = jobs.job_pods(namespace, job_name)
            running = sum(1 for p in pods if p.phase == "Running")
            decide = running < total and events_may_decide(job, pods)
            events = jobs.warning_events(namespace) if decide else []
        except TemporaryError:
            clock.sleep(services.settings.poll_seconds)
            continue
        except NotFoundError as exc:
            raise TaskEnded(
                failed(services.say, Reason.JOB_FAILED, MessageKey.JOB_VANISHED, job=job_name)
            ) from exc
        if job.failed_condition:
            detail = "; ".join(p.describe() for p in pods if p.terminated) or job.failed_condition
            raise TaskEnded(failed(services.say, Reason.JOB_FAILED, MessageKey.JOB_FAILED, detail=detail))
        if running >= total or job.complete:
            return running
        if timed_out(task.dispatched_at, task.timeout_seconds, clock.now()):
            raise TaskEnded(
                failed(services.say, Reason.TIMEOUT, MessageKey.TIMEOUT, seconds=task.timeout_seconds)
            )
        blocked = cannot_start(services, job, pods, events)
        if blocked:
            raise TaskEnded(blocked)
        stuck = next((p.describe() for p in pods if p.waiting_reason or p.unschedulable), "")
        message = services.say(
            MessageKey.PODS_PENDING, running=running, total=total, detail=f": {stuck}" if stuck else ""
        )
        if message != written:
            _note_pending(services, task.id, message)
            written = message
        clock.sleep(services.settings.poll_seconds)


def cannot_start(
    services: Services, job: JobState, pods: list[PodState], events: list[ClusterEvent]
) -> Outcome | None:
    """Failed/JobFailed quoting Kubernetes when the Job's pods can never start, else None."""
    settings = services.settings
    grace = StartGrace(
        timedelta(seconds=settings.image_pull_grace_seconds), timedelta(seconds=settings.mount_grace_seconds)
    )
    detail = start_failure(job, pods, events, services.clock.now(), grace)
    if detail is None:
        return None
    return failed(services.say, Reason.JOB_FAILED, MessageKey.PODS_CANNOT_START, detail=detail)


def mark_running(services: Services, view: TaskView, running: int) -> None:
    """All pods run: status Running; the queue slot is released by the caller right after."""
    message = services.say(MessageKey.RUNNING, active=running, total=view.shape.nodes)
    if not services.store.mark_running(view.task.id, message, services.clock.now()):
        services.ensure_active(view.task.id)
        return
    _tell(services, view, Stage.DISPATCHED, Stage.RUNNING)


def _tell(services: Services, view: TaskView, source: Stage, target: Stage) -> None:
    task = view.task
    move = TaskMove(task.id, view.queue, source, target, services.clock.now(), task.created_at)
    services.events.moved(move)
