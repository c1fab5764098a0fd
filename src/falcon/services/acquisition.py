"""Phases 3 and 4 of the design: provision a node pool, dispatch the Job, wait for its pods.

Each step is idempotent and resumable from the database plus what GKE and Kubernetes report:
names are derived from the task id, the pool is recorded before it is created (write-ahead),
creates treat 409 as 'already done'. A step that finds the task aborted, failed or timed out
raises ``TaskEnded``; the lifecycle flow then releases whatever the task holds.
"""

from __future__ import annotations

import time
from datetime import datetime, timedelta

from sqlalchemy.orm import Session

from falcon.adapters.db import repository as repo
from falcon.domain.errors import ConflictError, FalconError, NotFoundError, PermanentError, TemporaryError
from falcon.domain.job_manifest import JobTarget, render_job
from falcon.domain.messages import MessageKey, render
from falcon.domain.model import ProvisioningMode, QueueKey, k8s_job_name_for, node_pool_name_for
from falcon.domain.node_pools import NodePoolPlan
from falcon.domain.scheduling import ProvisioningDecision, ReservationCapacity, decide_provisioning
from falcon.domain.status import Reason, Status
from falcon.domain.topology import resolve_shape
from falcon.services.context import Outcome, Services, TaskEnded, TaskView

_READY = {"RUNNING", "RECONCILING"}
_BROKEN = {"ERROR", "RUNNING_WITH_ERROR", "STOPPING"}


def _message(services: Services, key: MessageKey, **params: object) -> str:
    return render(key, services.settings.message_locale, **params)


def ensure_active(services: Services, task_id: str) -> None:
    """Raise TaskEnded(Aborted) once upstream has asked for an abort."""
    with services.db() as session:
        task = repo.get_task(session, task_id)
    if task is None or task.status is Status.ABORTING:
        raise TaskEnded(Outcome(Status.ABORTED, None, _message(services, MessageKey.ABORTED)))


def _update_pending(services: Services, task_id: str, **values: object) -> None:
    with services.db() as session:
        moved = repo.update_task(session, task_id, [Status.PENDING], services.clock(), **values)
    if not moved:
        ensure_active(services, task_id)


def provision(services: Services, view: TaskView) -> str:
    """Reuse an idle pool of the queue, or create one; returns the pool's name."""
    task, queue = view.task, QueueKey(view.cluster.id, view.shape.topology)
    now = services.clock()
    with services.db() as session:
        held = repo.get_pool(session, view.cluster.id, task.node_pool_name) if task.node_pool_name else None
        if held is None or held.holder_task_id != task.id:
            held = repo.claim_idle_pool(session, queue, task.id, now)
            if held is not None:
                message = _message(services, MessageKey.PROVISIONING_REUSE, pool=held.name)
                repo.update_task(
                    session,
                    task.id,
                    [Status.PENDING],
                    now,
                    node_pool_name=held.name,
                    reason=Reason.PROVISIONING,
                    message=message,
                )
    if held is not None and held.state == repo.PoolState.IN_USE:
        return held.name  # reused, or resumed after the pool was already ready
    if held is not None:  # resumed after a crash or retry: the create may never have reached GKE
        plan = _plan(services, view, ProvisioningMode(held.mode), held.reservation)
    else:
        plan = _decide_and_write_ahead(services, view)
    _create(services, view, plan, now)
    return plan.name


def _plan(
    services: Services, view: TaskView, mode: ProvisioningMode, reservation: str | None
) -> NodePoolPlan:
    settings = services.settings
    delay = settings.reservation_idle if mode is ProvisioningMode.RESERVATION else settings.flex_start_idle
    return NodePoolPlan(
        name=node_pool_name_for(view.task.id, view.shape.topology),
        shape=view.shape,
        mode=mode,
        reservation=reservation,
        scale_down_delay=delay,
        zone=view.cluster.reservation_zone,
    )


def _create(services: Services, view: TaskView, plan: NodePoolPlan, started: datetime) -> None:
    """Create the pool, waiting out GKE's one-operation-at-a-time rule until the deadline."""
    deadline = started + timedelta(seconds=services.settings.node_pool_timeout_seconds)
    while True:
        try:
            services.gateways.node_pools.create(view.cluster, plan)
            return
        except ConflictError:
            return  # created by an earlier attempt of this same task
        except TemporaryError as exc:
            if services.clock() >= deadline:
                raise _timeout(services, f"GKE kept refusing: {exc}") from exc
            ensure_active(services, view.task.id)
            time.sleep(min(exc.delay or services.settings.poll_seconds, 10.0))
        except PermanentError as exc:
            raise _pool_failed(services, str(exc)) from exc


def _decide_and_write_ahead(services: Services, view: TaskView) -> NodePoolPlan:
    """Choose reservation or flex-start and record the pool, as one step per cluster.

    The cluster's row lock serialises this between lifecycle runs of the cluster's queues, and
    the reservation's room excludes Falcon's own reservation pools still being created (GCE
    counts a pool against the reservation only once its nodes exist): two queues can no longer
    both claim the last room, the second getting a stockout instead of flex-start."""
    now = services.clock()
    with services.db() as session:
        repo.lock_cluster(session, view.cluster.id)
        in_flight = _reservation_nodes_in_flight(session, view)
        decision = _decide(services, view, in_flight)
        plan = _plan(services, view, decision.mode, decision.reservation)
        repo.write_ahead_pool(session, _pool_record(view, plan), now)
        moved = repo.update_task(
            session,
            view.task.id,
            [Status.PENDING],
            now,
            node_pool_name=plan.name,
            reason=decision.reason,
            message=_provisioning_message(services, decision),
        )
    if not moved:
        ensure_active(services, view.task.id)
    return plan


def _reservation_nodes_in_flight(session: Session, view: TaskView) -> int:
    reservation = view.cluster.default_reservation
    creating = repo.pools_in(session, [repo.PoolState.CREATING])
    return sum(
        resolve_shape(view.cluster.tpu_type, p.topology).nodes
        for p in creating
        if p.cluster_id == view.cluster.id
        and p.reservation == reservation
        and p.mode == ProvisioningMode.RESERVATION
    )


def _decide(services: Services, view: TaskView, in_flight: int) -> ProvisioningDecision:
    cluster, capacity = view.cluster, None
    if cluster.default_reservation:
        try:
            found = services.gateways.reservations.capacity(
                cluster.project, cluster.reservation_zone or cluster.location, cluster.default_reservation
            )
            capacity = ReservationCapacity(found.name, found.count, found.in_use + in_flight)
        except FalconError:
            capacity = None  # unreadable: treated as short, so the task still gets capacity
    return decide_provisioning(
        view.shape.nodes,
        None,
        cluster.default_reservation,
        capacity,
        services.settings.reservation_idle,
        services.settings.flex_start_idle,
    )


def _provisioning_message(services: Services, decision: ProvisioningDecision) -> str:
    if decision.reason is Reason.PROVISIONING_FALLBACK:
        return _message(services, MessageKey.PROVISIONING_FALLBACK)
    if decision.reservation:
        return _message(services, MessageKey.PROVISIONING_RESERVATION, reservation=decision.reservation)
    return _message(services, MessageKey.PROVISIONING_FLEX_START)


def _pool_record(view: TaskView, plan: NodePoolPlan) -> repo.NodePool:
    return repo.NodePool(
        cluster_id=view.cluster.id,
        name=plan.name,
        topology=view.shape.topology,
        machine_type=view.shape.machine_type,
        mode=plan.mode.value,
        reservation=plan.reservation,
        state=repo.PoolState.CREATING,
        holder_task_id=view.task.id,
        idle_since=None,
    )


def wait_pool_ready(services: Services, view: TaskView, pool_name: str, started: datetime) -> None:
    deadline = started + timedelta(seconds=services.settings.node_pool_timeout_seconds)
    while True:
        ensure_active(services, view.task.id)
        try:
            status = services.gateways.node_pools.get(view.cluster, pool_name)
        except NotFoundError as exc:
            raise _pool_failed(services, f"node pool {pool_name} disappeared") from exc
        except TemporaryError:
            status = None
        if status and status.status in _READY:
            with services.db() as session:
                repo.update_pool(
                    session, view.cluster.id, pool_name, services.clock(), state=repo.PoolState.IN_USE
                )
            return
        if status and status.status in _BROKEN:
            raise _pool_failed(services, status.detail or status.status)
        if services.clock() >= deadline:
            raise _timeout(services, f"node pool {pool_name} still {status.status if status else 'unknown'}")
        time.sleep(services.settings.poll_seconds)


def _timeout(services: Services, detail: str) -> TaskEnded:
    minutes = services.settings.node_pool_timeout_seconds // 60
    message = _message(services, MessageKey.NODE_POOL_TIMEOUT, minutes=minutes, detail=detail)
    return TaskEnded(Outcome(Status.FAILED, Reason.NODE_POOL_TIMEOUT, message))


def _pool_failed(services: Services, detail: str) -> TaskEnded:
    return TaskEnded(
        Outcome(
            Status.FAILED,
            Reason.NODE_POOL_FAILED,
            _message(services, MessageKey.NODE_POOL_FAILED, detail=detail),
        )
    )


def dispatch(services: Services, view: TaskView, pool_name: str) -> str:
    """Submit the task's Job (or find the one an earlier attempt submitted); returns its name."""
    task = view.task
    job_name = k8s_job_name_for(task.id)
    _update_pending(
        services, task.id, reason=Reason.DISPATCHING, message=_message(services, MessageKey.DISPATCHING)
    )
    target = JobTarget(
        task.id,
        job_name,
        pool_name,
        view.cluster,
        view.shape,
        services.settings.gcs_mount_path,
        services.settings.job_service_account,
    )
    jobs = services.gateways.jobs(view.cluster)
    try:
        jobs.ensure_namespace(view.cluster.namespace)
        uid = jobs.create_job(view.cluster.namespace, render_job(view.spec, target))
    except ConflictError:
        uid = jobs.get_job(view.cluster.namespace, job_name).uid
    except PermanentError as exc:
        raise TaskEnded(
            Outcome(
                Status.FAILED,
                Reason.JOB_SUBMIT_FAILED,
                _message(services, MessageKey.JOB_SUBMIT_FAILED, detail=exc),
            )
        ) from exc
    now = services.clock()
    pending = _message(services, MessageKey.PODS_PENDING, running=0, total=view.shape.nodes, detail="")
    _update_pending(
        services,
        task.id,
        k8s_job_name=job_name,
        job_uid=uid,
        dispatched_at=task.dispatched_at or now,
        message=pending,
    )
    return job_name


def wait_pods_running(services: Services, view: TaskView, job_name: str) -> int:
    """Poll until every pod of the Job runs (or it already finished); returns pods running."""
    namespace, total = view.cluster.namespace, view.shape.nodes
    jobs = services.gateways.jobs(view.cluster)
    while True:
        ensure_active(services, view.task.id)
        try:
            job = jobs.get_job(namespace, job_name)
            pods = jobs.job_pods(namespace, job_name)
        except TemporaryError:
            time.sleep(services.settings.poll_seconds)
            continue
        running = sum(1 for p in pods if p.phase == "Running")
        if job.failed_condition:
            detail = "; ".join(p.describe() for p in pods if p.terminated) or job.failed_condition
            raise TaskEnded(
                Outcome(
                    Status.FAILED, Reason.JOB_FAILED, _message(services, MessageKey.JOB_FAILED, detail=detail)
                )
            )
        if running >= total or job.complete:
            return running
        _check_timeout(services, view)
        stuck = next((p.describe() for p in pods if p.waiting_reason or p.unschedulable), "")
        message = _message(
            services,
            MessageKey.PODS_PENDING,
            running=running,
            total=total,
            detail=f": {stuck}" if stuck else "",
        )
        _update_pending(services, view.task.id, message=message)
        time.sleep(services.settings.poll_seconds)


def _check_timeout(services: Services, view: TaskView) -> None:
    with services.db() as session:
        task = repo.get_task(session, view.task.id)
    if task and timed_out(task.dispatched_at, task.timeout_seconds, services.clock()):
        raise TaskEnded(
            Outcome(
                Status.FAILED,
                Reason.TIMEOUT,
                _message(services, MessageKey.TIMEOUT, seconds=task.timeout_seconds),
            )
        )


def timed_out(dispatched_at: datetime | None, timeout_seconds: int | None, now: datetime) -> bool:
    """Design §4: the timeout runs from dispatched_at (Job submitted), pods pending included."""
    if dispatched_at is None or not timeout_seconds:
        return False
    return now >= dispatched_at + timedelta(seconds=timeout_seconds)


def mark_running(services: Services, view: TaskView, running: int) -> None:
    """All pods run: status Running; the queue slot is released by the caller right after."""
    message = _message(services, MessageKey.RUNNING, active=running, total=view.shape.nodes)
    now = services.clock()
    with services.db() as session:
        moved = repo.update_task(
            session, view.task.id, [Status.PENDING], now, status=Status.RUNNING, reason=None, message=message
        )
        if moved:
            repo.update_progress(
                session, view.task.id, now, [repo.Phase.ACQUIRING], phase=repo.Phase.RUNNING, lease_id=None
            )
    if not moved:
        ensure_active(services, view.task.id)
