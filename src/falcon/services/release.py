"""Phase 6 of the design (deprovisioning), shared by every way a task ends, abort included.

Delete the Job (and the headless Service of a multi-host task), then keep the node pool for a
waiting task of the same queue or delete it, then write the terminal status. A node-pool
deletion that keeps failing does not change the outcome: its error is appended to the Message
and the pool stays marked for the janitor.

Waits: a transient error of a single call (the Job's deletion) is left to the release task's
Prefect retries (the whole release is idempotent); the wait for GKE to delete a pool is owned
by ``delete_pool``'s loop on the clock port.
"""

from __future__ import annotations

import contextlib
from collections.abc import Collection, Sequence
from dataclasses import replace
from datetime import timedelta
from functools import partial

from falcon.domain.errors import BusyError, FalconError, NotFoundError, TemporaryError
from falcon.domain.events import Stage
from falcon.domain.job_manifest import service_name_for
from falcon.domain.lifecycle import Outcome, Phase, PoolState, aborted
from falcon.domain.messages import MessageKey
from falcon.domain.model import Cluster, ProvisioningMode, QueueKey, Task, k8s_job_name_for
from falcon.domain.pool_economics import QueueObservations
from falcon.domain.status import Reason, Status
from falcon.domain.topology import resolve_shape
from falcon.domain.warm_pools import WarmTarget, schedulable, warm_keeps, warm_target
from falcon.services.context import Services, stage_of, tell_moved
from falcon.services.pool_deletion import ask_delete

MAX_DELETE_RETRY_WAIT = 10.0  # seconds: the longest wait between deletion attempts GKE refused
# The keeping policy weighs the newest of these (CostPolicy looks at up to 64 gaps, 16 creations,
# 64 Jobs' run times); the fleet's gaps, for a queue too new to have its own, come from its newest
# arrivals.
OBSERVED_GAPS = 64
OBSERVED_CREATIONS = 32
OBSERVED_FLEET_ARRIVALS = 256
OBSERVED_RUNS = 64


def record_outcome(
    services: Services,
    task_id: str,
    outcome: Outcome,
    from_phases: Sequence[Phase],
    released_inline: bool = False,
) -> bool:
    """Remember how the task ends and move it to releasing; False if another step got there first.

    ``released_inline``: the acquiring run releases the task itself, so it is recorded as the
    release run too and the dispatcher starts no second one while it is alive."""
    with services.store.together() as store:
        task, _, progress = store.task_view_rows(task_id)  # where it was, for the move's report
        moved = store.start_releasing(
            task_id,
            outcome,
            from_phases,
            services.say(MessageKey.RELEASING),
            services.clock.now(),
            released_inline=released_inline,
        )
    if moved and task is not None:
        source = stage_of(task, progress.phase if progress else None)
        tell_moved(services, task, source, Stage.RELEASING, outcome)
    return moved


def release(services: Services, task_id: str, pool_settled: bool = False) -> Outcome:
    """Finish a task in phase releasing: Job, node pool, terminal status. Safe to run again.

    ``pool_settled``: the caller kept the task's pool for its queue already (the reconcile round
    that saw the Job end by itself), so only the Job and the status are left and nothing waits."""
    task, cluster, progress = services.store.task_view_rows(task_id)
    if task is not None and progress is not None and progress.phase is Phase.DONE:
        return Outcome(task.status, task.reason, task.message or "")  # released already: nothing to do
    if task is None or progress is None or progress.phase is not Phase.RELEASING:
        raise FalconError(f"task {task_id} is not being released")
    outcome = progress.outcome or Outcome(Status.FAILED)
    pool_error = None
    if cluster is not None:
        if task.k8s_job_name:
            delete_job(services, cluster, task.k8s_job_name)
        if _may_have_service(task, outcome):
            delete_service(services, cluster, service_name_for(k8s_job_name_for(task_id)))
        pool = None if pool_settled else _held_pool(services, cluster, task_id) or task.node_pool_name
        if pool and progress.queue:
            pool_error = keep_or_delete_pool(services, cluster, pool, progress.queue, task_id, outcome)
    if pool_error:
        text = services.say(MessageKey.NODE_POOL_DELETE_FAILED, message=outcome.message, detail=pool_error)
        outcome = outcome.with_message(text)
    return write_outcome(services, task, outcome)


def _held_pool(services: Services, cluster: Cluster, task_id: str) -> str | None:
    """The pool recorded as the task's, which its row may not name yet: an abort or a crash came
    between the pool's record (write-ahead, an idle pool's claim, a hand-over) and the row's
    compare-and-set. The row's name is used only once the task holds no pool any more (a retried
    release after the pool was kept or went)."""
    held = services.store.held_pool(cluster.id, task_id)
    return held.name if held else None


def delete_job(services: Services, cluster: Cluster, job_name: str) -> None:
    with contextlib.suppress(NotFoundError):
        services.jobs(cluster).delete_job(cluster.namespace, job_name)


def _may_have_service(task: Task, outcome: Outcome) -> bool:
    """Only a multi-host task gets a headless Service, created at dispatch just before its Job
    (which may then be refused, hence by the derived name): single-host releases skip the call."""
    dispatched = task.k8s_job_name is not None or outcome.reason is Reason.JOB_SUBMIT_FAILED
    return dispatched and task.topology is not None and resolve_shape(task.tpu_type, task.topology).multi_host


def delete_service(services: Services, cluster: Cluster, name: str) -> None:
    """Delete a task's headless Service; one already gone is done (404)."""
    with contextlib.suppress(NotFoundError):
        services.jobs(cluster).delete_service(cluster.namespace, name)


def keep_or_delete_pool(
    services: Services, cluster: Cluster, pool: str, queue: QueueKey, task_id: str, outcome: Outcome
) -> str | None:
    """Hand the pool to the queue's next task, or delete it; returns a deletion error, if any."""
    if settle_pool(services, cluster, pool, queue, task_id, outcome) is PoolState.DELETING:
        return delete_pool(services, cluster, pool)
    return None


def settle_pool(
    services: Services, cluster: Cluster, pool: str, queue: QueueKey, task_id: str, outcome: Outcome
) -> PoolState | None:
    """Keep the task's pool (IDLE: the queue's next task takes it) or mark it for deletion
    (DELETING: the caller deletes it); None when it is not the task's any more.

    Its takers are the queue's waiting tasks and its acquiring one while that holds no ready pool
    (it takes an idle pool at once, by hand-over). With none, the keeping policy's horizon for
    the queue decides whether the pool is kept as a spare (then reaped once past it).

    Only a pool that became ready (in_use) is kept, and never one that failed its task (gone or
    broken under it: NodePoolFailed): one still creating, or broken, would hand its failure to
    the next task. An aborted task's pool that GKE is still creating is waited
    for first (design §8, abort while provisioning: wait for the create, then check reuse), so
    the waiting task does not create the same slice again; a failed task's pool is not.

    The queue's tidal warm target keeps it too while the queue has fewer idle pools: a pool is
    deleted only when neither a waiting task nor the warm target keeps it. Settling again is
    harmless: a pool kept or handed on is no longer the task's, one marked stays marked."""
    store = services.store
    with store.together() as reading:
        record = reading.pool(cluster.id, pool)
        if record is None or record.holder_task_id != task_id:  # settled already, or gone
            return PoolState.DELETING if record is not None and record.state is PoolState.DELETING else None
        idle = reading.idle_count(queue)  # the rule compares takers with it: more than idle + 1 is as many
        takers = reading.waiting_count(queue, idle + 1) + reading.takers_without_pool().get(queue, 0)
    horizon = partial(keep_horizon, services, queue, record.mode)
    keep = services.keep_policy.keep_at_release(takers, idle, horizon) or warm_keeps(
        warm_target_of(services, queue).pools, idle
    )
    keep = keep and outcome.reason is not Reason.NODE_POOL_FAILED  # it would fail the next task too
    if keep and outcome.status is Status.ABORTED:
        _wait_until_created(services, cluster, pool, task_id)
    now = services.clock.now()
    if keep and store.keep_pool(cluster.id, pool, task_id, now):
        return PoolState.IDLE
    return PoolState.DELETING if store.start_deleting_pool(cluster.id, pool, task_id, now) else None


def offer_freed_pool(
    services: Services, cluster: Cluster, task_id: str, queue: QueueKey, outcome: Outcome
) -> tuple[str, PoolState] | None:
    """Settle the pool of a task whose Job ended by itself, as soon as that is seen: its pods are
    done, so its nodes are free already, and the queue's next task need not wait for the release
    run to start (a flow run's start, seconds when Prefect is busy) to take the pool. The release
    run then deletes the Job and, if marked, the pool. The pool's name and how it was settled
    (IDLE: kept; DELETING: marked), or None when the task held no ready pool to settle."""
    held = services.store.held_pool(cluster.id, task_id)
    if held is None or held.state is not PoolState.IN_USE:
        return None
    settled = settle_pool(services, cluster, held.name, queue, task_id, outcome)
    return (held.name, settled) if settled else None


def observed(services: Services, queues: Collection[QueueKey]) -> dict[QueueKey, QueueObservations]:
    """What each queue's recent arrivals, pool creations and deletions say, with the fleet's gaps,
    for the keeping policy: read together (a reconcile round asks for every queue with an idle
    pool at once)."""
    with services.store.together() as store:
        fleet = store.fleet_gaps(OBSERVED_FLEET_ARRIVALS)
        own = store.queue_observations(queues, OBSERVED_GAPS, OBSERVED_CREATIONS)
    return {queue: replace(seen, fleet_gaps=fleet) for queue, seen in own.items()}


def keep_horizon(services: Services, queue: QueueKey, mode: ProvisioningMode) -> timedelta:
    """How long an idle pool of the queue and mode is worth keeping while nobody waits for it."""
    return services.keep_policy.horizon(observed(services, [queue])[queue], mode)


def warm_target_of(services: Services, queue: QueueKey) -> WarmTarget:
    """The queue's tidal warm target now (none while no rule of the queue has fired)."""
    rules = schedulable(services.store.warm_rules())
    return warm_target((rule for rule in rules if rule.queue == queue), services.clock.now())


def _wait_until_created(services: Services, cluster: Cluster, pool: str, task_id: str) -> None:
    """Poll GKE until the task's pool being created is ready (then recorded in use), broken or
    gone, or the node-pool deadline passes; a pool in any other state is left as it is."""
    record = services.store.pool(cluster.id, pool)
    if record is None or record.state is not PoolState.CREATING or record.holder_task_id != task_id:
        return
    clock = services.clock
    deadline = clock.now() + timedelta(seconds=services.settings.node_pool_timeout_seconds)
    while clock.now() < deadline:
        try:
            status = services.node_pools.get(cluster, pool)
        except TemporaryError:
            status = None
        except FalconError:
            return  # never created (aborted before the call) or unreadable: it is deleted instead
        if status is not None and status.ready:
            services.store.pool_ready(cluster.id, pool, clock.now())
            return
        if status is not None and status.broken:
            return
        clock.sleep(services.settings.poll_seconds)


def delete_pool(services: Services, cluster: Cluster, pool: str) -> str | None:
    """Delete and wait until GKE no longer knows the pool; this loop owns GKE's busy answers.

    It looks before it asks: a pool GKE is deleting already (an earlier attempt of this release
    asked, then its run died) is waited for, never asked for again. GKE busy with another of the
    cluster's operations is asked again at each poll: the cluster's lock frees when that
    operation ends, and a doubled wait would keep a paid-for pool up to 10 s past it (the
    release benchmark saw 8 s); meanwhile a task of its queue may take it back (``pool_deletion``),
    which ends the loop with nothing to delete. Each other error in a row doubles the wait before
    the next try, up to ``MAX_DELETE_RETRY_WAIT``."""
    clock, gke, poll = services.clock, services.node_pools, services.settings.poll_seconds
    deadline = clock.now() + timedelta(seconds=services.settings.node_pool_timeout_seconds)
    last_error, wait = None, poll
    while clock.now() < deadline:
        try:
            if gke.get(cluster, pool).status != "STOPPING" and not ask_delete(services, cluster, pool):
                return None  # a task of its queue took it back while GKE was busy: nothing to delete
        except NotFoundError:
            services.store.pool_deleted(cluster.id, pool, clock.now())
            return None
        except BusyError as exc:
            last_error, wait = str(exc), poll
            clock.sleep(poll)
            continue
        except TemporaryError as exc:
            last_error = str(exc)
            clock.sleep(wait)
            wait = min(wait * 2, max(poll, MAX_DELETE_RETRY_WAIT))
            continue
        except FalconError as exc:
            last_error = str(exc)
            break
        wait = poll
        clock.sleep(poll)
    last_error = last_error or "timed out"
    services.store.pool_delete_failed(cluster.id, pool, last_error, clock.now())
    return last_error


def write_outcome(services: Services, task: Task, outcome: Outcome) -> Outcome:
    """Terminal status, compare-and-set: an abort that arrived meanwhile wins as Aborted.

    ``task``: the row as the release read it, for the move's report (its queue and times do not
    change once it releases)."""
    store, now, task_id = services.store, services.clock.now(), task.id
    expect = _ends_from(outcome.status)
    ended = outcome if expect and store.finish(task_id, outcome, expect, now) else None
    if ended is None and store.finish(task_id, abort := aborted(services.say), [Status.ABORTING], now):
        ended = abort
    if ended is None:
        store.mark_done(task_id, now)  # the row was terminal already: only the progress row is behind
        return outcome
    tell_moved(services, task, Stage.RELEASING, Stage.DONE, ended)
    return ended


def _ends_from(status: Status) -> list[Status]:
    """The statuses a task ends in ``status`` from, besides Aborting (which always ends Aborted):
    Succeeded only ever follows Running, a failure may end a task still Pending, and Aborted
    follows only Aborting."""
    if status is Status.SUCCEEDED:
        return [Status.RUNNING]
    return [] if status is Status.ABORTED else [Status.PENDING, Status.RUNNING]
