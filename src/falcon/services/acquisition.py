"""Phases 3 and 4 of the design: provision a node pool, dispatch the Job, wait for its pods.

Each step is idempotent and resumable from the database plus what GKE and Kubernetes report:
names are derived from the task id, the pool is recorded before it is created (write-ahead),
creates treat 409 as 'already done'. A step that finds the task aborted, failed or timed out
raises ``TaskEnded``; the lifecycle flow then releases whatever the task holds.
"""

from __future__ import annotations

import time
from dataclasses import replace
from datetime import datetime, timedelta

from sqlalchemy.orm import Session

from falcon.adapters.db import repository as repo
from falcon.adapters.k8s import ClusterEvent, JobState, PodState, StartGrace, start_failure
from falcon.domain.errors import ConflictError, FalconError, NotFoundError, PermanentError, TemporaryError
from falcon.domain.job_manifest import JobTarget, render_job, render_service
from falcon.domain.messages import MessageKey, render
from falcon.domain.model import ProvisioningMode, QueueKey, is_zone, k8s_job_name_for, node_pool_name_for
from falcon.domain.node_pools import NodePoolPlan, ReservationRef
from falcon.domain.scheduling import (
    ProvisioningDecision,
    ReservationCapacity,
    UnusableReservationError,
    decide_provisioning,
)
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


def provision(services: Services, view: TaskView, final_attempt: bool = False) -> str:
    """Reuse an idle pool of the queue, or create one; returns the pool's name.

    A TemporaryError (Compute or GKE unavailable, rate limited) is left to Prefect's retries;
    on the ``final_attempt`` it ends the task NodePoolFailed with the error's text instead of
    failing the run, which the dispatcher would only restart forever."""
    try:
        return _provision(services, view)
    except TemporaryError as exc:
        if final_attempt:
            raise _pool_failed(services, str(exc)) from exc
        raise


def _provision(services: Services, view: TaskView) -> str:
    if not view.cluster.zone and not is_zone(view.cluster.location):
        no_zone = f"cluster {view.cluster.name} is regional and has no node zone (cluster add --zone)"
        raise _pool_failed(services, no_zone)
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
        plan = _plan(view, ProvisioningMode(held.mode), held.reservation)
    else:
        plan = _decide_and_write_ahead(services, view)
    _create(services, view, plan, now)
    return plan.name


def _plan(view: TaskView, mode: ProvisioningMode, reservation: str | None) -> NodePoolPlan:
    return NodePoolPlan(
        name=node_pool_name_for(view.task.id, view.shape.topology),
        shape=view.shape,
        mode=mode,
        reservation=reservation,
        zone=view.cluster.node_zone,
    )


def _create(services: Services, view: TaskView, plan: NodePoolPlan, started: datetime) -> None:
    """Create the pool and follow its operation to the end, so GKE's error text reaches the row.

    GKE's one-operation-at-a-time refusals are waited out until the deadline; a pool that
    already exists (an earlier attempt created it) is followed by ``wait_pool_ready``."""
    deadline = started + timedelta(seconds=services.settings.node_pool_timeout_seconds)
    _ensure_workload_policy(services, view, plan)
    while True:
        try:
            operation = services.gateways.node_pools.create(view.cluster, plan)
            break
        except ConflictError:
            return  # created by an earlier attempt of this same task
        except TemporaryError as exc:
            if services.clock() >= deadline:
                raise _timeout(services, f"GKE kept refusing: {exc}") from exc
            ensure_active(services, view.task.id)
            time.sleep(min(exc.delay or services.settings.poll_seconds, 10.0))
        except PermanentError as exc:
            raise _pool_failed(services, str(exc)) from exc
    _wait_operation(services, view, operation, deadline)


def _ensure_workload_policy(services: Services, view: TaskView, plan: NodePoolPlan) -> None:
    """TPU7x multi-host: the pool's placementPolicy names a workload policy that must exist first,
    in the cluster's project and the region of the pool's zone."""
    if plan.workload_policy is None:
        return
    cluster = view.cluster
    try:
        services.gateways.workload_policies.ensure(
            cluster.project, cluster.region, plan.workload_policy, view.shape.topology
        )
    except PermanentError as exc:
        raise _pool_failed(services, str(exc)) from exc


def _wait_operation(services: Services, view: TaskView, operation: str, deadline: datetime) -> None:
    """Poll the create operation until DONE; a failed one (stockout, quota, bad request) is final."""
    while True:
        ensure_active(services, view.task.id)
        try:
            status = services.gateways.node_pools.operation(view.cluster, operation)
        except TemporaryError:
            status = None
        except NotFoundError:
            return  # GKE forgot it: wait_pool_ready judges the pool itself
        if status and status.error:
            raise _pool_failed(services, status.error)
        if status and status.done:
            return
        if services.clock() >= deadline:
            raise _timeout(services, f"operation {operation} still running")
        time.sleep(services.settings.poll_seconds)


def _decide_and_write_ahead(services: Services, view: TaskView) -> NodePoolPlan:
    """Choose reservation or flex-start and record the pool, as one step per cluster.

    The cluster's row lock serialises this between lifecycle runs of the cluster's queues, and
    the reservation's room excludes Falcon's own reservation pools still being created (GCE
    counts a pool against the reservation only once its nodes exist): two queues can no longer
    both claim the last room, the second getting a stockout instead of flex-start."""
    now = services.clock()
    with services.db() as session:
        repo.lock_cluster(session, view.cluster.id)
        decision = _decide(services, view, session)
        plan = _plan(view, decision.mode, decision.reservation)
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


def _reservation_nodes_in_flight(session: Session, view: TaskView, reservation: str) -> int:
    creating = repo.pools_in(session, [repo.PoolState.CREATING])
    return sum(
        resolve_shape(view.cluster.tpu_type, p.topology).nodes
        for p in creating
        if p.cluster_id == view.cluster.id
        and p.reservation == reservation
        and p.mode == ProvisioningMode.RESERVATION
    )


def _decide(services: Services, view: TaskView, session: Session) -> ProvisioningDecision:
    """Reservation or flex-start. Only a READY reservation of the slice's machine type that is
    short of room falls back to flex-start; one that cannot be read or used fails the task."""
    try:
        return decide_provisioning(
            view.shape.nodes, view.shape.machine_type, None, _reservation(services, view, session)
        )
    except UnusableReservationError as exc:
        raise _pool_failed(services, str(exc)) from exc


def _reservation(services: Services, view: TaskView, session: Session) -> ReservationCapacity | None:
    """The cluster's reservation read in its owner's project and the pool's zone, minus the room
    Falcon's own reservation pools still being created will take."""
    cluster = view.cluster
    if not cluster.default_reservation:
        return None
    try:
        ref = ReservationRef.parse(cluster.default_reservation, cluster.project)
        found = services.gateways.reservations.capacity(ref, cluster.node_zone)
    except (ValueError, PermanentError) as exc:  # malformed name; not found, permission denied
        raise _pool_failed(services, str(exc)) from exc
    in_flight = _reservation_nodes_in_flight(session, view, found.name)
    return replace(found, in_use=found.in_use + in_flight)


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
            gone = f"node pool {pool_name} disappeared"
            raise _pool_failed(services, _with_operation_error(services, view, pool_name, gone)) from exc
        except TemporaryError:
            status = None
        if status and status.status in _READY:
            with services.db() as session:
                repo.update_pool(
                    session, view.cluster.id, pool_name, services.clock(), state=repo.PoolState.IN_USE
                )
            return
        if status and status.status in _BROKEN:
            detail = f"node pool {pool_name} is {status.status}"
            detail += f": {status.detail}" if status.detail else ""
            raise _pool_failed(services, _with_operation_error(services, view, pool_name, detail))
        if services.clock() >= deadline:
            raise _timeout(services, f"node pool {pool_name} still {status.status if status else 'unknown'}")
        time.sleep(services.settings.poll_seconds)


def _with_operation_error(services: Services, view: TaskView, pool_name: str, detail: str) -> str:
    """Add the failed create operation's text: GKE puts the reason (stockout, quota) there."""
    try:
        error = services.gateways.node_pools.create_error(view.cluster, pool_name)
    except FalconError:
        error = None  # best effort: the pool's own state already says it failed
    return f"{detail}; operation: {error}" if error and error not in detail else detail


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
        if view.shape.multi_host:  # before the Job: its pods name the Service as their subdomain
            jobs.ensure_service(view.cluster.namespace, render_service(target))
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
    """Poll until every pod of the Job runs (or it already finished); returns pods running.

    Pods that can never start end the task (JobFailed), timeout or not: the slot is not held
    for a Job the cluster will not run."""
    namespace, total = view.cluster.namespace, view.shape.nodes
    jobs = services.gateways.jobs(view.cluster)
    while True:
        ensure_active(services, view.task.id)
        try:
            job = jobs.get_job(namespace, job_name)
            pods = jobs.job_pods(namespace, job_name)
            events = [] if _all_running(pods, total) else jobs.warning_events(namespace)
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
        blocked = cannot_start(services, job, pods, events)
        if blocked:
            raise TaskEnded(blocked)
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


def _all_running(pods: list[PodState], total: int) -> bool:
    """No event is needed to explain pods that all run."""
    return sum(1 for p in pods if p.phase == "Running") >= total


def cannot_start(
    services: Services, job: JobState, pods: list[PodState], events: list[ClusterEvent]
) -> Outcome | None:
    """Failed/JobFailed quoting Kubernetes when the Job's pods can never start, else None."""
    settings = services.settings
    grace = StartGrace(
        timedelta(seconds=settings.image_pull_grace_seconds), timedelta(seconds=settings.mount_grace_seconds)
    )
    detail = start_failure(job, pods, events, services.clock(), grace)
    if detail is None:
        return None
    return Outcome(
        Status.FAILED, Reason.JOB_FAILED, _message(services, MessageKey.PODS_CANNOT_START, detail=detail)
    )


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
