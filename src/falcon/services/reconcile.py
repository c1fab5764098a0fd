"""The dispatcher's reconcilers: follow running Jobs, honour aborts, restart dead runs, tidy up.

Each function observes (one database read, then one Job list per cluster) and converges; none
blocks on a long operation: work that waits (Job and node-pool cleanup) goes to a per-task
release run.
"""

from __future__ import annotations

import contextlib
import logging
import math
from collections.abc import Callable, Mapping, Sequence, Set
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from enum import Enum
from functools import partial

from falcon.domain.errors import FalconError, NotFoundError, TemporaryError
from falcon.domain.events import Stage
from falcon.domain.job_manifest import MANAGED_BY
from falcon.domain.lifecycle import (
    LIVE_POOL_STATES,
    NodePool,
    Outcome,
    Phase,
    PoolState,
    Progress,
    aborted,
    failed,
    succeeded,
    timed_out,
)
from falcon.domain.messages import MessageKey
from falcon.domain.model import NODE_POOL_PREFIX, Cluster, QueueKey, RunningTask, Task
from falcon.domain.pool_economics import QueueObservations
from falcon.domain.scheduling import IdlePool, expired_idle_pools
from falcon.domain.status import TERMINAL, Reason, Status
from falcon.domain.workloads import JobState, events_may_decide
from falcon.services.acquisition import cannot_start
from falcon.services.context import Services, stage_of, tell_moved
from falcon.services.fan_out import FanOut
from falcon.services.observations_beside import Observe
from falcon.services.pool_deletion import ask_delete
from falcon.services.ports import ClusterJobs
from falcon.services.reaper_beside import Calls, one_cluster_after_another
from falcon.services.release import observed, offer_freed_pool, record_outcome, release

logger = logging.getLogger(__name__)
Clusters = dict[str, Cluster]
LAUNCH_GRACE = 5.0  # seconds a pick may go without a recorded run before it is started again
TAKEN_WITHIN_POLLS = 2  # an idle pool with takers is priced once idle this many polls (_priced)


def abort_unstarted(
    services: Services, aborting: list[tuple[Task, Phase | None]], now: datetime
) -> list[str]:
    """Aborting rows that hold nothing yet (never taken in, or waiting) end Aborted at once."""
    outcome = aborted(services.say)
    ended = []
    for task, phase in aborting:
        if phase in (None, Phase.WAITING, Phase.DONE) and services.store.finish(
            task.id, outcome, [Status.ABORTING], now
        ):
            tell_moved(services, task, stage_of(task, phase), Stage.DONE, outcome)
            ended.append(task.id)
    return ended


@dataclass(frozen=True)
class Ending:
    """A running task whose Job ended, vanished, timed out or was aborted, and how it ends."""

    task: RunningTask
    cluster: Cluster
    outcome: Outcome
    pods_done: bool  # the Job ended by itself and no pod is left: the pool's nodes are free


@dataclass(frozen=True)
class Seen:
    endings: list[Ending]
    unreachable: dict[str, str]  # cluster id -> why its Kubernetes API did not answer this round


class Settled(Enum):
    """What ``settle_ending`` did with an ending."""

    LEFT = "left"  # another step had moved the task out of running
    RELEASING = "releasing"  # moved to releasing; a release run finishes it
    MARKED = "marked"  # ... and its pool marked for deletion, which the release run waits for
    OFFERED = "offered"  # moved to releasing, its pool kept for the queue: nothing left to wait for


@dataclass(frozen=True)
class Followed:
    ended: list[str]  # running tasks whose Job ended, vanished, timed out or was aborted
    unreachable: dict[str, str]  # cluster id -> why its Kubernetes API did not answer this round
    offered: list[str] = field(default_factory=list)  # ended tasks whose pool was kept for the queue
    left: list[str] = field(default_factory=list)  # tasks another step had moved out of running


def find_endings(
    services: Services,
    clusters: Clusters,
    waited_for: Set[str] = frozenset(),
    fan_out: FanOut = map,
    running: Sequence[RunningTask] | None = None,
) -> Seen:
    """One Job list per cluster with running tasks or in ``waited_for`` (clusters tasks wait for:
    the same list tells whether they answer; the dispatcher's list is answered from a watch,
    ``ListWatch``): every running task whose Job ended, vanished, timed out, was aborted or has
    pods that can never start. Reads only: ``settle_ending`` writes what each ending means. The
    clusters are followed through ``fan_out``. ``running``: the running tasks, when the caller
    keeps them (``RunningBook``); else read."""
    by_cluster: dict[str, list[RunningTask]] = {cluster_id: [] for cluster_id in waited_for}
    for task in services.store.running_tasks() if running is None else running:
        by_cluster.setdefault(task.queue.cluster_id if task.queue else "", []).append(task)
    work = [(clusters[c], tasks) for c, tasks in by_cluster.items() if c in clusters]
    seen = Seen([], {})
    for part in fan_out(lambda cluster_tasks: _endings_in(services, *cluster_tasks), work):
        seen.endings.extend(part.endings)
        seen.unreachable.update(part.unreachable)
    return seen


def settle_ending(services: Services, ending: Ending) -> tuple[Settled, str | None]:
    """Record how the task ends (it moves to releasing) and, when its Job ended by itself, settle
    its pool at once (``offer_freed_pool``): kept for the queue, or marked for deletion. What was
    done, and the pool settled if any."""
    task, outcome, queue = ending.task, ending.outcome, ending.task.queue
    if not record_outcome(services, task.id, outcome, [Phase.RUNNING]):
        return Settled.LEFT, None
    if queue is None:  # no queue recorded: no pool of its to settle
        return Settled.RELEASING, None
    pool = offer_freed_pool(services, ending.cluster, task.id, queue, outcome) if ending.pods_done else None
    if pool is None:
        return Settled.RELEASING, None
    name, state = pool
    return (Settled.OFFERED if state is PoolState.IDLE else Settled.MARKED), name


def follow_running(
    services: Services,
    clusters: Clusters,
    waited_for: Set[str] = frozenset(),
    fan_out: FanOut = map,
    running: Sequence[RunningTask] | None = None,
) -> Followed:
    """``find_endings``, then each ending settled here, one after another (the dispatcher
    settles them beside its round instead: ``release_ended``). A task whose pool was kept is
    ``offered``, for ``release_kept`` to end."""
    seen = find_endings(services, clusters, waited_for, fan_out, running)
    followed = Followed([], seen.unreachable)
    for ending in seen.endings:
        settled, _ = settle_ending(services, ending)
        if settled is Settled.LEFT:
            followed.left.append(ending.task.id)
            continue
        followed.ended.append(ending.task.id)
        if settled is Settled.OFFERED:
            followed.offered.append(ending.task.id)
    return followed


def release_ended(services: Services, ending: Ending, on_offered: Callable[[], None]) -> bool:
    """An ending settled beside the round (``WorkBeside``), so that the round never waits on
    its writes (five or six transactions: at scale, when several Jobs of a cluster ended in one
    round, most of its time). When the pool was kept, ``on_offered`` is told (a waiting task
    may take it) and the task is finished here (``release_kept``); when it was marked, GKE is asked
    to delete it at once (the release run then waits for that deletion). True when it ended here;
    a task left releasing gets its release run from a later round (``supervise_runs``)."""
    settled, pool = settle_ending(services, ending)
    if settled is Settled.MARKED and pool:
        _request_delete(services, ending.cluster, pool)
    if settled is not Settled.OFFERED:
        return False
    on_offered()
    return release_kept(services, ending.task.id)


def _endings_in(services: Services, cluster: Cluster, tasks: list[RunningTask]) -> Seen:
    """One cluster's part of ``find_endings``."""
    seen = Seen([], {})
    try:
        listed = services.jobs(cluster).list_jobs(cluster.namespace, f"managed-by={MANAGED_BY}")
    except TemporaryError as exc:
        seen.unreachable[cluster.id] = str(exc)
        return seen  # try again next round
    except FalconError:
        return seen
    jobs = {j.name: j for j in listed}
    blocked = _start_failures(
        services, cluster, [jobs[t.k8s_job_name] for t in tasks if t.k8s_job_name in jobs]
    )
    for task in tasks:
        job = jobs.get(task.k8s_job_name or "")
        if job is None and task.status is not Status.ABORTING:
            try:
                job = _looked_up(services, cluster, task)
            except FalconError:
                continue  # its Job's state unknown this round: followed at the next
        outcome = _running_outcome(services, cluster, task, job) or blocked.get(task.k8s_job_name or "")
        if outcome:
            pods_done = job is not None and job.finished and job.active == 0
            seen.endings.append(Ending(task, cluster, outcome, pods_done))
    return seen


def _looked_up(services: Services, cluster: Cluster, task: RunningTask) -> JobState | None:
    """A running task's Job missing from the round's list, read by name (None: the API server has
    no such Job). A list answered from a watch may not hold yet a Job created a moment ago."""
    if not task.k8s_job_name:
        return None
    try:
        return services.jobs(cluster).get_job(cluster.namespace, task.k8s_job_name)
    except NotFoundError:
        return None


def release_kept(services: Services, task_id: str) -> bool:
    """Finish a task whose Job ended by itself and whose pool a round just kept: nothing is left
    to wait for (its pods are done, its pool is the queue's), so its Job is deleted and its
    terminal status written at once (``WorkBeside`` runs this beside the round), where a
    release run's start could add seconds (Prefect's client backs off 2, 4, 8 s on a busy
    server). A call that fails leaves the task releasing, and supervise_runs starts its release
    run as for any other. True when the task ended here."""
    try:
        outcome = release(services, task_id, pool_settled=True)
    except FalconError as exc:
        logger.info("event=release_in_round_failed task_id=%s error=%r", task_id, exc)
        return False
    logger.info("event=released task_id=%s status=%s by=round", task_id, outcome.status.value)
    return True


def _start_failures(services: Services, cluster: Cluster, jobs: list[JobState]) -> dict[str, Outcome]:
    """Jobs whose pods can never start, by name. Calls the cluster only while one of its Jobs has
    a pod not started (active but not ready, or not created): its pods, then its Warning events
    only if they could decide (``events_may_decide``). A Job whose pods all ended, and whose
    condition the Job controller has not set yet (at scale, one most rounds), needs neither."""
    unready = [
        j for j in jobs if not j.finished and (j.ready < j.active or j.active + j.succeeded < j.parallelism)
    ]
    if not unready:
        return {}
    gateway = services.jobs(cluster)
    try:
        pods = gateway.pods_of_jobs(cluster.namespace, [j.name for j in unready])
        pods_of = {job.name: [p for p in pods if p.job_name == job.name] for job in unready}
        decide = any(events_may_decide(job, pods_of[job.name]) for job in unready)
        events = gateway.warning_events(cluster.namespace) if decide else []
    except FalconError:
        return {}  # cluster unreachable this round; try again next round
    found = {}
    for job in unready:
        outcome = cannot_start(services, job, pods_of[job.name], events)
        if outcome:
            found[job.name] = outcome
    return found


def _running_outcome(
    services: Services, cluster: Cluster, task: RunningTask, job: JobState | None
) -> Outcome | None:
    say = services.say
    if task.status is Status.ABORTING:
        return aborted(say)
    if job is None:
        return failed(say, Reason.JOB_FAILED, MessageKey.JOB_VANISHED, job=task.k8s_job_name)
    if job.complete:
        return succeeded(say)
    if job.failed_condition:
        detail = _failure_detail(services, cluster, job)
        return failed(say, Reason.JOB_FAILED, MessageKey.JOB_FAILED, detail=detail)
    if timed_out(task.dispatched_at, task.timeout_seconds, services.clock.now()):
        return failed(say, Reason.TIMEOUT, MessageKey.TIMEOUT, seconds=task.timeout_seconds)
    return None


def _failure_detail(services: Services, cluster: Cluster, job: JobState) -> str:
    try:
        pods = services.jobs(cluster).job_pods(cluster.namespace, job.name)
    except FalconError:
        pods = []
    return "; ".join(p.describe() for p in pods if p.terminated) or job.failed_condition or "Job failed"


SUPERVISED = (Phase.ACQUIRING, Phase.RELEASING)  # the phases whose tasks need a run alive


def supervise_runs(
    services: Services,
    unlaunched: dict[str, float] | None = None,
    beside: Set[str] = frozenset(),
    progress: Sequence[Progress] | None = None,
) -> list[str]:
    """``runs_to_start`` and ``start_run`` for each, on the caller's thread: the tasks whose run
    started. (The dispatcher starts them beside its round, ``WorkBeside``.)"""
    needed = runs_to_start(services, unlaunched, beside, progress)
    return [p.task_id for p in needed if start_run(services, p, read_before=progress is not None)]


def runs_to_start(
    services: Services,
    unlaunched: dict[str, float] | None = None,
    beside: Set[str] = frozenset(),
    progress: Sequence[Progress] | None = None,
) -> list[Progress]:
    """The tasks that need a run because they have none alive: acquiring tasks a new lifecycle
    attempt, releasing tasks a new release attempt; not those whose work is under way ``beside``
    the round (a release there needs no run; a start there is not made twice). ``progress``: the
    progress rows in ``SUPERVISED`` phases, when the caller read them (else read here).

    A task picked but with no run recorded yet may be a launch under way, by this dispatcher or
    another one (a rollout overlap): it is started only once ``unlaunched`` (the monotonic time
    each such task was first seen so, kept by the caller across rounds) is LAUNCH_GRACE old."""
    needed, now, waiting_launch = [], services.clock.monotonic(), set()
    for p in services.store.progress_in(SUPERVISED) if progress is None else progress:
        run_id = p.acquire_run_id if p.phase is Phase.ACQUIRING else p.release_run_id
        if run_id and services.launcher.is_alive(run_id):
            continue
        if not run_id and p.phase is Phase.ACQUIRING and unlaunched is not None:
            waiting_launch.add(p.task_id)
            if now - unlaunched.setdefault(p.task_id, now) < LAUNCH_GRACE:
                continue
        if p.task_id not in beside:
            needed.append(p)
    if unlaunched is not None:  # forget the picks whose run is recorded now
        for task_id in set(unlaunched) - waiting_launch:
            del unlaunched[task_id]
    return needed


def start_run(services: Services, p: Progress, read_before: bool) -> bool:
    """Start the run ``p`` needs (``runs_to_start``); whether one started. ``read_before``: ``p``
    was read before the caller saw its run dead, so it is read again first: a run moves its task
    on before it ends, so the row tells a run that ended from one that died."""
    if read_before and not _unchanged(services, p):
        return False  # its run ended after the caller's read, the task moved on with it
    if p.phase is Phase.ACQUIRING:
        return _restart_acquire(services, p)
    run = services.launcher.start_release(p.task_id, p.attempt)
    services.store.set_release_run(p.task_id, run, services.clock.now())
    return True


def _unchanged(services: Services, p: Progress) -> bool:
    """Whether the task is still as ``p`` was read: the same phase and runs."""
    _, _, now = services.store.task_view_rows(p.task_id)
    runs = (p.phase, p.acquire_run_id, p.release_run_id)
    return now is not None and (now.phase, now.acquire_run_id, now.release_run_id) == runs


def _restart_acquire(services: Services, p: Progress) -> bool:
    """A new attempt, whether started: its lease and number are recorded before its run starts
    (the run checks it is the recorded attempt), and only while the task still acquires; this
    read may be stale."""
    lease, slots, store = p.lease_id, services.slots, services.store
    if p.acquire_run_id is not None and p.queue is not None:  # its run died: take the slot anew
        try:  # a busy Prefect is asked again next round, not waited out (its back-off reaches 62 s)
            if lease:
                slots.release(lease, fail_fast=True)
            lease = slots.try_acquire(p.queue.slot_name, services.settings.slot_lease_seconds, fail_fast=True)
        except TemporaryError:
            return False
        if lease is None:
            return False  # still held; repair_slots or the lease expiry frees it
    attempt = p.attempt + (1 if p.acquire_run_id else 0)
    if not store.set_acquire_run(p.task_id, "", services.clock.now(), lease_id=lease, attempt=attempt):
        if lease and lease != p.lease_id:
            slots.release(lease)
        return False  # the task moved on since it was read
    run = services.launcher.start_acquire(p.task_id, lease or "", attempt)
    store.set_acquire_run(p.task_id, run, services.clock.now())
    return True


# An idle pool's idle spell (cluster id, name, idle since), and the pool as the reaper priced it.
PricedSpells = dict[tuple[str, str, datetime | None], IdlePool]
ConfirmedAt = dict[tuple[str, str], float]  # (cluster id, pool name): clock.monotonic() when last confirmed


def reap_idle_pools(
    services: Services,
    clusters: Clusters,
    waiting: dict[QueueKey, int],
    warm: Mapping[QueueKey, int] | None = None,
    pools: Sequence[NodePool] | None = None,
    priced: PricedSpells | None = None,
    confirmed: ConfirmedAt | None = None,
    make_calls: Callable[[Calls], None] = one_cluster_after_another,
    observe: Observe | None = None,
) -> list[str]:
    """Delete idle pools kept longer than the keeping policy finds them worth for their queue
    (design §5: never kept forever), but never below a queue's tidal ``warm`` target; confirm
    the deletions asked for.

    ``pools``: the idle and deleting pools, when the caller has read them already. ``priced``:
    the idle spells priced by earlier rounds (the caller keeps it across rounds; this updates
    it), each priced once (``_priced``). ``confirmed``: when each deletion was last confirmed,
    kept the same way, so that each is confirmed once per ``poll_seconds`` (``_confirm_due``).
    Returns the pools found expired. Their marks and the GKE calls (asking for the deletions,
    confirming them), each cluster's to be made in turn, go to ``make_calls``: the dispatcher
    makes them beside its round (``ReaperCallsBeside``), the clusters' at once; each is a round
    trip (a mark is a write and its commit: 12-26 ms of a marking round under load), and a GKE
    call waits for its own cluster's lock (``ask_delete``), never another's. ``observe``: the
    queues' observations the pools are priced from (read now by default); the dispatcher reads
    them beside its round (``ObservationsBeside``), and a pool whose queue it has no answer for
    yet is kept this round."""
    now = services.clock.now()
    if pools is None:
        pools = services.store.pools_in([PoolState.IDLE, PoolState.DELETING])
    idle_pools = [p for p in pools if p.state is PoolState.IDLE]
    idle = _priced(services, idle_pools, now, priced, waiting, observe or partial(observed, services))
    calls: dict[str, list[Callable[[], None]]] = {}
    reaped = []
    for pool in expired_idle_pools(idle, waiting, now, warm):
        mark = partial(_mark_and_request_delete, services, clusters[pool.cluster_id], pool.name)
        calls.setdefault(pool.cluster_id, []).append(mark)
        reaped.append(pool.name)
    deleting = [p for p in pools if p.state is PoolState.DELETING and p.holder_task_id is None]
    for p in _confirm_due(services, deleting, confirmed):
        if cluster := clusters.get(p.cluster_id):
            calls.setdefault(p.cluster_id, []).append(partial(_confirm_deleted, services, cluster, p.name))
    make_calls(calls)
    return reaped


def _confirm_due(
    services: Services, deleting: list[NodePool], confirmed: ConfirmedAt | None
) -> list[NodePool]:
    """The deletions to confirm this round: each at most once per ``poll_seconds``, as a task
    polls its pool. A pool waiting for its turn among the cluster's GKE operations costs a GKE
    read, an ask and its writes each time, and GKE takes minutes over a TPU pool's deletion; the
    round turns every second."""
    if confirmed is None:
        return deleting
    now, period = services.clock.monotonic(), services.settings.poll_seconds
    last = {key: confirmed[key] for p in deleting if (key := (p.cluster_id, p.name)) in confirmed}
    due = [p for p in deleting if now - last.get((p.cluster_id, p.name), -math.inf) >= period]
    confirmed.clear()
    confirmed.update(last | {(p.cluster_id, p.name): now for p in due})
    return due


def _priced(
    services: Services,
    idle_pools: list[NodePool],
    now: datetime,
    priced: PricedSpells | None,
    takers: Mapping[QueueKey, int],
    observe: Observe,
) -> list[IdlePool]:
    """The idle pools with how long their queue's history makes them worth keeping, priced once
    per idle spell: while a pool is idle no task of its queue arrives without taking it, so what
    the price weighs (the queue's arrivals; its creation times, and the fleet's gaps, which move
    a horizon of minutes little) stays as it was. Pricing every idle pool at every round was the
    round's heaviest read (the queues' history, a statement per kind).

    A pool its queue's ``takers`` are about to take (at the acquiring task's next poll, or the
    next pick) is priced only if it is still idle after ``TAKEN_WITHIN_POLLS`` polls, and kept
    until then: with takers its price only bounds how long they may leave it idle (ten
    replacements, ``KeepPolicy.hold_for_waiters``), and at scale such pools, each taken within a
    second, were most of the rounds' pricing reads (about 20 ms a round at 1 000 running tasks).
    A pool whose queue ``observe`` has no observations for yet is kept unpriced as well."""
    known = priced if priced is not None else {}
    soon = timedelta(seconds=TAKEN_WITHIN_POLLS * services.settings.poll_seconds)
    to_price = [
        p
        for p in idle_pools
        if _spell(p) not in known and not (takers.get(p.queue) and now - (p.idle_since or now) < soon)
    ]
    seen = observe({p.queue for p in to_price}) if to_price else {}
    current = {spell: known[spell] for p in idle_pools if (spell := _spell(p)) in known}
    current |= {_spell(p): _idle(services, p, now, seen) for p in to_price if p.queue in seen}
    if priced is not None:
        priced.clear()
        priced.update(current)
    return [current.get(_spell(p)) or _kept_unpriced(p, now) for p in idle_pools]


def _kept_unpriced(pool: NodePool, now: datetime) -> IdlePool:
    """An idle pool not priced yet, as the reaper sees it: kept this round."""
    return IdlePool(
        pool.cluster_id, pool.name, pool.topology, pool.idle_since or now, timedelta.max, timedelta.max
    )


def _spell(pool: NodePool) -> tuple[str, str, datetime | None]:
    return pool.cluster_id, pool.name, pool.idle_since


def _idle(
    services: Services, pool: NodePool, now: datetime, seen: Mapping[QueueKey, QueueObservations]
) -> IdlePool:
    """An idle pool with how long what its queue was ``seen`` doing makes it worth keeping."""
    policy, queue_seen = services.keep_policy, seen[pool.queue]
    return IdlePool(
        pool.cluster_id,
        pool.name,
        pool.topology,
        pool.idle_since or now,
        keep_for=policy.horizon(queue_seen, pool.mode),
        hold_for=policy.hold_for_waiters(queue_seen, pool.mode),
    )


def _mark_and_request_delete(services: Services, cluster: Cluster, name: str) -> None:
    """Mark an expired idle pool for deletion, then ask GKE; nothing when a task took it since
    the round read it idle (the mark is a compare-and-set on IDLE)."""
    if services.store.start_deleting_pool(cluster.id, name, None, services.clock.now()):
        _request_delete(services, cluster, name)


def _request_delete(services: Services, cluster: Cluster, name: str) -> None:
    """Ask GKE to delete a marked pool, unless a task of its queue took it back."""
    # Gone already, or GKE busy: _confirm_deleted asks again next round.
    with contextlib.suppress(FalconError):
        ask_delete(services, cluster, name)


def _confirm_deleted(services: Services, cluster: Cluster, name: str) -> None:
    try:
        status = services.node_pools.get(cluster, name)
    except NotFoundError:
        services.store.pool_deleted(cluster.id, name, services.clock.now())
        return
    except FalconError:
        return
    if status.status != "STOPPING":
        _request_delete(services, cluster, name)


def delete_orphan_pools(services: Services, clusters: Clusters) -> list[str]:
    """Design's exception table: a ``falcon-`` pool in GKE with no live record here is deleted.

    Write-ahead makes this rare (every create is recorded first); it catches pools left by a
    lost database, a manual create, or a record closed while GKE still had the pool. The records
    are read after GKE's list, so a pool created while GKE lists is never taken for one: its
    record was written before its create (the chaos run caught the other order deleting a pool
    recorded a moment after the records were read)."""
    listed: list[tuple[Cluster, list[str]]] = []
    for cluster in clusters.values():
        with contextlib.suppress(FalconError):  # not listed this time: scanned again next time
            listed.append((cluster, services.node_pools.list_names(cluster)))
    tracked = {(p.cluster_id, p.name) for p in services.store.pools_in(LIVE_POOL_STATES)}
    orphans = []
    for cluster, names in listed:
        found = [n for n in names if n.startswith(NODE_POOL_PREFIX) and (cluster.id, n) not in tracked]
        swept = _deleted(found, partial(services.node_pools.delete, cluster))
        services.events.orphans_swept(cluster.id, "node_pool", swept)
        orphans.extend(swept)
    return orphans


def delete_orphan_services(services: Services, clusters: Clusters) -> list[str]:
    """Delete Falcon's headless Services whose task is terminal or unknown here.

    Release deletes a task's Service; this catches one left by a release that lost the race with
    a crash, or by a lost database, as delete_orphan_pools does for pools."""
    return _delete_orphans(
        services,
        clusters,
        "service",
        lambda jobs, namespace: [(s.name, s.task_id) for s in jobs.falcon_services(namespace)],
        lambda jobs, namespace, name: jobs.delete_service(namespace, name),
    )


def delete_orphan_jobs(services: Services, clusters: Clusters) -> list[str]:
    """Delete Falcon's Jobs whose task is terminal or unknown here.

    Release deletes a task's Job; one can appear again afterwards when a create the client had
    given up on (a response slower than its timeout) reaches the API server late. Such a copy was
    created suspended and nobody resumes it (render_job), so it has run nothing when this deletes it."""
    selector = f"managed-by={MANAGED_BY}"
    return _delete_orphans(
        services,
        clusters,
        "job",
        lambda jobs, namespace: [(j.name, j.task_id) for j in jobs.list_jobs(namespace, selector)],
        lambda jobs, namespace, name: jobs.delete_job(namespace, name),
    )


def _delete_orphans(
    services: Services,
    clusters: Clusters,
    kind: str,
    list_named: Callable[[ClusterJobs, str], list[tuple[str, str | None]]],
    delete: Callable[[ClusterJobs, str, str], None],
) -> list[str]:
    orphans = []
    for cluster in clusters.values():
        gateway = services.jobs(cluster)
        try:
            found = list_named(gateway, cluster.namespace)
        except FalconError:
            continue
        tasks = services.store.tasks(task_id for _, task_id in found if task_id)
        ended = [name for name, task_id in found if _ended(tasks.get(task_id or ""))]
        swept = _deleted(ended, partial(delete, gateway, cluster.namespace))
        services.events.orphans_swept(cluster.id, kind, swept)
        orphans.extend(swept)
    return orphans


def _ended(task: Task | None) -> bool:
    return task is None or task.status in TERMINAL


def _deleted(names: Sequence[str], delete: Callable[[str], object]) -> list[str]:
    """The names this call deleted, the only ones audited as swept. One gone already was listed a
    moment stale (a watch not yet told of its deletion, a sweep that just ran); one the API would
    not delete now (busy, unreachable) is found again by the next sweep."""
    deleted = []
    for name in names:
        try:
            delete(name)
        except NotFoundError:
            continue
        except FalconError as exc:
            logger.info("event=orphan_not_deleted name=%s error=%s", name, exc)
            continue
        deleted.append(name)
    return deleted
