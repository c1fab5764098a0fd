"""The dispatcher's reconcilers: follow running Jobs, honour aborts, restart dead runs, tidy up.

Each function observes (database, then one Job list per cluster) and converges; none blocks on
a long operation: work that waits (Job and node-pool cleanup) goes to a per-task release run.
"""

from __future__ import annotations

import contextlib
from collections import defaultdict
from datetime import datetime

from sqlalchemy.orm import Session

from falcon.adapters.db import repository as repo
from falcon.adapters.k8s import JobState
from falcon.domain.errors import FalconError, NotFoundError
from falcon.domain.job_manifest import MANAGED_BY
from falcon.domain.messages import MessageKey, render
from falcon.domain.model import NODE_POOL_PREFIX, Cluster, QueueKey, Task
from falcon.domain.scheduling import IdlePool, expired_idle_pools
from falcon.domain.status import TERMINAL, Reason, Status
from falcon.services.acquisition import cannot_start, timed_out
from falcon.services.context import Outcome, Services
from falcon.services.ports import Launcher, Slots
from falcon.services.release import record_outcome


def abort_unstarted(session: Session, services: Services, now: datetime) -> list[str]:
    """Aborting rows that hold nothing yet (never taken in, or waiting) end Aborted at once."""
    done = []
    message = render(MessageKey.ABORTED, services.settings.message_locale)
    for task, phase in repo.aborting_tasks(session):
        if phase in (None, repo.Phase.WAITING, repo.Phase.DONE) and repo.update_task(
            session,
            task.id,
            [Status.ABORTING],
            now,
            status=Status.ABORTED,
            reason=None,
            message=message,
            aborted_at=now,
            finished_at=now,
        ):
            repo.mark_done(session, task.id, now)
            done.append(task.id)
    return done


def follow_running(services: Services) -> list[str]:
    """One Job list per cluster; every running task whose Job ended, vanished, timed out, was
    aborted or has pods that can never start moves to releasing. Returns the ids that did."""
    with services.db() as session:
        running = repo.progress_in(session, [repo.Phase.RUNNING])
        tasks = {p.task_id: repo.get_task(session, p.task_id) for p in running}
        clusters = {c.id: c for c in repo.list_clusters(session)}
    by_cluster: dict[str, list[str]] = defaultdict(list)
    for p in running:
        by_cluster[p.cluster_id or ""].append(p.task_id)
    ended = []
    for cluster_id, task_ids in by_cluster.items():
        cluster = clusters.get(cluster_id)
        if cluster is None:
            continue
        try:
            jobs = {
                j.name: j
                for j in services.gateways.jobs(cluster).list_jobs(
                    cluster.namespace, f"managed-by={MANAGED_BY}"
                )
            }
        except FalconError:
            continue  # cluster unreachable this round; try again next round
        known = [t for t in (tasks[i] for i in task_ids) if t is not None]
        blocked = _start_failures(
            services, cluster, [jobs[t.k8s_job_name or ""] for t in known if t.k8s_job_name in jobs]
        )
        for task in known:
            job_name = task.k8s_job_name or ""
            outcome = _running_outcome(services, cluster, task, jobs.get(job_name)) or blocked.get(job_name)
            if outcome and record_outcome(services, task.id, outcome, [repo.Phase.RUNNING]):
                ended.append(task.id)
    return ended


def _start_failures(services: Services, cluster: Cluster, jobs: list[JobState]) -> dict[str, Outcome]:
    """Jobs whose pods can never start, by name. Two calls per cluster (its Falcon pods and its
    Warning events), and only while one of its Jobs has pods that are not all ready."""
    unready = [j for j in jobs if not j.finished and j.ready < j.parallelism]
    if not unready:
        return {}
    gateway = services.gateways.jobs(cluster)
    try:
        pods, events = gateway.falcon_pods(cluster.namespace), gateway.warning_events(cluster.namespace)
    except FalconError:
        return {}  # cluster unreachable this round; try again next round
    found = {}
    for job in unready:
        outcome = cannot_start(services, job, [p for p in pods if p.job_name == job.name], events)
        if outcome:
            found[job.name] = outcome
    return found


def _running_outcome(
    services: Services, cluster: Cluster, task: Task, job: JobState | None
) -> Outcome | None:
    locale = services.settings.message_locale
    if task.status is Status.ABORTING:
        return Outcome(Status.ABORTED, None, render(MessageKey.ABORTED, locale))
    if job is None:
        return Outcome(
            Status.FAILED, Reason.JOB_FAILED, render(MessageKey.JOB_VANISHED, locale, job=task.k8s_job_name)
        )
    if job.complete:
        return Outcome(Status.SUCCEEDED, None, render(MessageKey.SUCCEEDED, locale))
    if job.failed_condition:
        return Outcome(
            Status.FAILED,
            Reason.JOB_FAILED,
            render(MessageKey.JOB_FAILED, locale, detail=_failure_detail(services, cluster, job)),
        )
    if timed_out(task.dispatched_at, task.timeout_seconds, services.clock()):
        return Outcome(
            Status.FAILED, Reason.TIMEOUT, render(MessageKey.TIMEOUT, locale, seconds=task.timeout_seconds)
        )
    return None


def _failure_detail(services: Services, cluster: Cluster, job: JobState) -> str:
    try:
        pods = services.gateways.jobs(cluster).job_pods(cluster.namespace, job.name)
    except FalconError:
        pods = []
    return "; ".join(p.describe() for p in pods if p.terminated) or job.failed_condition or "Job failed"


def supervise_runs(services: Services, launcher: Launcher, slots: Slots) -> list[str]:
    """Start the run a task needs when it has none alive: acquiring tasks get their slot
    again and a new lifecycle attempt; releasing tasks get a new release attempt."""
    with services.db() as session:
        active = repo.progress_in(session, [repo.Phase.ACQUIRING, repo.Phase.RELEASING])
    started = []
    for p in active:
        run_id = p.acquire_run_id if p.phase == repo.Phase.ACQUIRING else p.release_run_id
        if run_id and launcher.is_alive(run_id):
            continue
        if p.phase == repo.Phase.ACQUIRING:
            _restart_acquire(services, launcher, slots, p)
        else:
            run = launcher.start_release(p.task_id, p.attempt)
            with services.db() as session:
                repo.update_progress(
                    session, p.task_id, services.clock(), [repo.Phase.RELEASING], release_run_id=run
                )
        started.append(p.task_id)
    return started


def _restart_acquire(services: Services, launcher: Launcher, slots: Slots, p: repo.Progress) -> None:
    lease = p.lease_id
    if p.acquire_run_id is not None and p.queue is not None:  # its run died: take the slot anew
        if lease:
            slots.release(lease)
        lease = slots.try_acquire(p.queue.slot_name, services.settings.slot_lease_seconds)
        if lease is None:
            return  # still held; repair_slots or the lease expiry frees it
    attempt = p.attempt + (1 if p.acquire_run_id else 0)
    run = launcher.start_acquire(p.task_id, lease or "", attempt)
    with services.db() as session:
        repo.update_progress(
            session,
            p.task_id,
            services.clock(),
            [repo.Phase.ACQUIRING],
            acquire_run_id=run,
            lease_id=lease,
            attempt=attempt,
        )


def reap_idle_pools(services: Services, waiting: dict[QueueKey, int]) -> list[str]:
    """Delete kept pools nobody took within the grace period (design §5: never kept forever)."""
    now = services.clock()
    with services.db() as session:
        idle = repo.pools_in(session, [repo.PoolState.IDLE])
        clusters = {c.id: c for c in repo.list_clusters(session)}
    candidates = [IdlePool(p.cluster_id, p.name, p.topology, p.idle_since or now) for p in idle]
    reaped = []
    for pool in expired_idle_pools(candidates, waiting, now, services.settings.kept_pool_grace):
        with services.db() as session:
            if not repo.update_pool(
                session,
                pool.cluster_id,
                pool.name,
                now,
                expect_state=[repo.PoolState.IDLE],
                state=repo.PoolState.DELETING,
            ):
                continue
        _request_delete(services, clusters[pool.cluster_id], pool.name)
        reaped.append(pool.name)
    _confirm_deleted(services, clusters)
    return reaped


def _request_delete(services: Services, cluster: Cluster, name: str) -> None:
    # Gone already, or GKE busy: _confirm_deleted asks again next round.
    with contextlib.suppress(FalconError):
        services.gateways.node_pools.delete(cluster, name)


def _confirm_deleted(services: Services, clusters: dict[str, Cluster]) -> None:
    with services.db() as session:
        deleting = [p for p in repo.pools_in(session, [repo.PoolState.DELETING]) if p.holder_task_id is None]
    for pool in deleting:
        cluster = clusters.get(pool.cluster_id)
        if cluster is None:
            continue
        try:
            status = services.gateways.node_pools.get(cluster, pool.name)
        except NotFoundError:
            with services.db() as session:
                repo.update_pool(
                    session,
                    pool.cluster_id,
                    pool.name,
                    services.clock(),
                    expect_state=[repo.PoolState.DELETING],
                    state=repo.PoolState.DELETED,
                )
            continue
        except FalconError:
            continue
        if status.status != "STOPPING":
            _request_delete(services, cluster, pool.name)


LIVE_POOL_STATES = [
    repo.PoolState.CREATING,
    repo.PoolState.IN_USE,
    repo.PoolState.IDLE,
    repo.PoolState.DELETING,
]


def delete_orphan_pools(services: Services) -> list[str]:
    """Design's exception table: a ``falcon-`` pool in GKE with no live record here is deleted.

    Write-ahead makes this rare (every create is recorded first); it catches pools left by a
    lost database, a manual create, or a record closed while GKE still had the pool."""
    with services.db() as session:
        clusters = repo.list_clusters(session)
        tracked = {(p.cluster_id, p.name) for p in repo.pools_in(session, LIVE_POOL_STATES)}
    orphans = []
    for cluster in clusters:
        try:
            names = services.gateways.node_pools.list_names(cluster)
        except FalconError:
            continue
        for name in names:
            if name.startswith(NODE_POOL_PREFIX) and (cluster.id, name) not in tracked:
                _request_delete(services, cluster, name)
                orphans.append(name)
    return orphans


def delete_orphan_services(services: Services) -> list[str]:
    """Delete Falcon's headless Services whose task is terminal or unknown here.

    Release deletes a task's Service; this catches one left by a release that lost the race with
    a crash, or by a lost database, as delete_orphan_pools does for pools."""
    with services.db() as session:
        clusters = repo.list_clusters(session)
    orphans = []
    for cluster in clusters:
        gateway = services.gateways.jobs(cluster)
        try:
            found = gateway.falcon_services(cluster.namespace)
        except FalconError:
            continue
        with services.db() as session:
            tasks = {s.name: repo.get_task(session, s.task_id) if s.task_id else None for s in found}
        for name, task in tasks.items():
            if task is None or task.status in TERMINAL:
                with contextlib.suppress(FalconError):
                    gateway.delete_service(cluster.namespace, name)
                orphans.append(name)
    return orphans
