"""Phase 6 of the design (deprovisioning), shared by every way a task ends, abort included.

Delete the Job (and the headless Service of a multi-host task), then keep the node pool for a
waiting task of the same queue or delete it, then write the terminal status. A node-pool
deletion that keeps failing does not change the outcome: its error is appended to the Message
and the pool stays marked for the janitor.
"""

from __future__ import annotations

import contextlib
import time
from datetime import timedelta

from falcon.adapters.db import repository as repo
from falcon.domain.errors import FalconError, NotFoundError, TemporaryError
from falcon.domain.job_manifest import service_name_for
from falcon.domain.messages import MessageKey, render
from falcon.domain.model import Cluster, QueueKey, Task, k8s_job_name_for
from falcon.domain.scheduling import keep_pool_after_task
from falcon.domain.status import Reason, Status
from falcon.domain.topology import resolve_shape
from falcon.services.context import Outcome, Services


def record_outcome(
    services: Services, task_id: str, outcome: Outcome, from_phases: list[str], released_inline: bool = False
) -> bool:
    """Remember how the task ends and move it to releasing; False if another step got there first.

    ``released_inline``: the acquiring run releases the task itself, so it is recorded as the
    release run too and the dispatcher starts no second one while it is alive."""
    now = services.clock()
    inline = {"release_run_id": repo.ACQUIRE_RUN} if released_inline else {}
    with services.db() as session:
        moved = repo.update_progress(
            session,
            task_id,
            now,
            from_phases,
            **inline,
            phase=repo.Phase.RELEASING,
            outcome_status=outcome.status.value,
            outcome_reason=outcome.reason.value if outcome.reason else None,
            outcome_message=outcome.message,
            lease_id=None,
        )
        if moved:
            releasing = render(MessageKey.RELEASING, services.settings.message_locale)
            repo.update_task(session, task_id, [Status.RUNNING], now, message=releasing)
    return moved


def release(services: Services, task_id: str) -> Outcome:
    """Finish a task in phase releasing: Job, node pool, terminal status. Safe to run again."""
    with services.db() as session:
        task = repo.get_task(session, task_id)
        progress = repo.get_progress(session, task_id)
        cluster = repo.get_cluster(session, task.cluster_id) if task and task.cluster_id else None
    if task is not None and progress is not None and progress.phase == repo.Phase.DONE:
        return Outcome(task.status, task.reason, task.message or "")  # released already: nothing to do
    if task is None or progress is None or progress.phase != repo.Phase.RELEASING:
        raise FalconError(f"task {task_id} is not being released")
    outcome = Outcome(
        Status(progress.outcome_status or Status.FAILED.value),
        Reason(progress.outcome_reason) if progress.outcome_reason else None,
        progress.outcome_message or "",
    )
    pool_error = None
    if cluster is not None:
        if task.k8s_job_name:
            delete_job(services, cluster, task.k8s_job_name)
        if _may_have_service(task, outcome):
            delete_service(services, cluster, service_name_for(k8s_job_name_for(task_id)))
        if task.node_pool_name and progress.queue:
            pool_error = keep_or_delete_pool(services, cluster, task.node_pool_name, progress.queue, task_id)
    if pool_error:
        outcome = Outcome(
            outcome.status,
            outcome.reason,
            render(
                MessageKey.NODE_POOL_DELETE_FAILED,
                services.settings.message_locale,
                message=outcome.message,
                detail=pool_error,
            ),
        )
    return write_outcome(services, task_id, outcome)


def delete_job(services: Services, cluster: Cluster, job_name: str) -> None:
    with contextlib.suppress(NotFoundError):
        services.gateways.jobs(cluster).delete_job(cluster.namespace, job_name)


def _may_have_service(task: Task, outcome: Outcome) -> bool:
    """Only a multi-host task gets a headless Service, created at dispatch just before its Job
    (which may then be refused, hence by the derived name): single-host releases skip the call."""
    dispatched = task.k8s_job_name is not None or outcome.reason is Reason.JOB_SUBMIT_FAILED
    return dispatched and task.topology is not None and resolve_shape(task.tpu_type, task.topology).multi_host


def delete_service(services: Services, cluster: Cluster, name: str) -> None:
    """Delete a task's headless Service; one already gone is done (404)."""
    with contextlib.suppress(NotFoundError):
        services.gateways.jobs(cluster).delete_service(cluster.namespace, name)


def keep_or_delete_pool(
    services: Services, cluster: Cluster, pool: str, queue: QueueKey, task_id: str
) -> str | None:
    """Hand the pool to the queue's next task, or delete it; returns a deletion error, if any.

    Only a pool that became ready (in_use) is kept: one still creating, or broken, would hand
    its failure to the next task."""
    now = services.clock()
    with services.db() as session:
        if keep_pool_after_task(repo.waiting_count(session, queue), repo.idle_count(session, queue)):
            kept = repo.update_pool(
                session,
                cluster.id,
                pool,
                now,
                expect_state=[repo.PoolState.IN_USE],
                expect_holder=task_id,
                state=repo.PoolState.IDLE,
                holder_task_id=None,
                idle_since=now,
            )
            if kept:
                return None
        mine = repo.update_pool(
            session,
            cluster.id,
            pool,
            now,
            expect_state=[repo.PoolState.IN_USE, repo.PoolState.CREATING],
            expect_holder=task_id,
            state=repo.PoolState.DELETING,
            holder_task_id=None,
        )
        current = repo.get_pool(session, cluster.id, pool)
    if not mine and (current is None or current.state != repo.PoolState.DELETING):
        return None  # kept or handed on by an earlier attempt of this release: not this task's any more
    return delete_pool(services, cluster, pool)


def delete_pool(services: Services, cluster: Cluster, pool: str) -> str | None:
    """Delete and wait until GKE no longer knows the pool; retries while GKE is busy."""
    deadline = services.clock() + timedelta(seconds=services.settings.node_pool_timeout_seconds)
    gke, last_error = services.gateways.node_pools, None
    requested = False
    while services.clock() < deadline:
        try:
            if not requested:
                gke.delete(cluster, pool)
                requested = True
            gke.get(cluster, pool)
        except NotFoundError:
            with services.db() as session:
                repo.update_pool(
                    session, cluster.id, pool, services.clock(), state=repo.PoolState.DELETED, last_error=None
                )
            return None
        except TemporaryError as exc:
            last_error = str(exc)
        except FalconError as exc:
            last_error = str(exc)
            break
        time.sleep(services.settings.poll_seconds)
    with services.db() as session:
        repo.update_pool(session, cluster.id, pool, services.clock(), last_error=last_error or "timed out")
    return last_error or "timed out"


def write_outcome(services: Services, task_id: str, outcome: Outcome) -> Outcome:
    """Terminal status, compare-and-set: an abort that arrived meanwhile wins as Aborted."""
    now = services.clock()
    locale = services.settings.message_locale
    with services.db() as session:
        aborted = repo.update_task(
            session,
            task_id,
            [Status.ABORTING],
            now,
            status=Status.ABORTED,
            reason=None,
            message=render(MessageKey.ABORTED, locale),
            aborted_at=now,
            finished_at=now,
        )
        if aborted:
            outcome = Outcome(Status.ABORTED, None, render(MessageKey.ABORTED, locale))
        else:
            # Succeeded only ever follows Running; a failure may end a task still Pending.
            expect = (
                [Status.RUNNING] if outcome.status is Status.SUCCEEDED else [Status.PENDING, Status.RUNNING]
            )
            repo.update_task(
                session,
                task_id,
                expect,
                now,
                status=outcome.status,
                reason=outcome.reason,
                message=outcome.message,
                finished_at=now,
            )
        repo.mark_done(session, task_id, now)
    return outcome
