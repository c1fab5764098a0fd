"""Scheduling policy: which cluster gets a task, who gets a queue's slot, how a pool is provisioned.

Design §3 (cluster choice), §4 (queues and the pick rule), §5 (provisioning and delayed pool
deletion) and §9 (the Waiting message). Everything here is a pure function of plain data the
flows read beforehand, so the policy can be tested exhaustively and replayed without GKE,
MySQL or a clock: ``now`` is always an argument.

The pick rule, verbatim from §4: collect the waiting tasks, group them by actor and take each
actor's earliest; if more than one actor is a candidate, exclude the actor that got this queue's
slot last; of the rest take the earliest submitted. "Earliest" means ``(submitted_at, task_id)``
so that equal timestamps still give one answer.
"""

from __future__ import annotations

import heapq
from collections import deque
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from itertools import islice
from operator import attrgetter

from falcon.domain.errors import PermanentError
from falcon.domain.messages import AHEAD_PREVIEW, Locale, waiting_message
from falcon.domain.model import Cluster, ClusterStatus, ProvisioningMode, QueueKey
from falcon.domain.status import Reason
from falcon.domain.topology import SliceShape, canonical_tpu_type
from falcon.domain.warm_pools import surplus_first

# --- Pick rule (§4) -------------------------------------------------------------------------


@dataclass(frozen=True)
class WaitingTask:
    """A task in Reason=Waiting in one (cluster, topology) queue."""

    task_id: str
    actor: str
    name: str
    submitted_at: datetime  # the row's created_at; ties broken by task_id


_SUBMITTED_AT = attrgetter("submitted_at")
_TASK_ID = attrgetter("task_id")


def _key(task: WaitingTask) -> tuple[datetime, str]:
    return (task.submitted_at, task.task_id)


def _actor_heads(waiting: Sequence[WaitingTask]) -> dict[str, WaitingTask]:
    """Each actor's earliest task: FIFO within an actor means only these can be picked."""
    heads: dict[str, WaitingTask] = {}
    for task in waiting:
        head = heads.get(task.actor)
        if head is None or _key(task) < _key(head):
            heads[task.actor] = task
    return heads


def pick_next(waiting: Sequence[WaitingTask], last_actor: str | None) -> WaitingTask | None:
    """The task that gets the free slot, by the §4 rule; None if nobody waits.

    Written as the design states it (not via pick_order) so the two can check each other.
    """
    heads = _actor_heads(waiting)
    if len(heads) > 1 and last_actor is not None:
        heads.pop(last_actor, None)
    return min(heads.values(), key=_key, default=None)


def pick_order(waiting: Sequence[WaitingTask], last_actor: str | None) -> list[WaitingTask]:
    """Every waiting task in the order repeated pick_next calls would take them.

    Assumes no arrivals or aborts in between; that is what makes the positions shown to users
    truthful. A heap of actor heads makes it O(n log n) rather than pick_next's O(n) per pick.
    Heads are compared by their rank in one global sort, so the heap compares plain ints.
    """
    ranked = _earliest_first(waiting)
    queues = _ranks_by_actor(ranked)
    heap = [(ranks[0], actor) for actor, ranks in queues.items()]
    heapq.heapify(heap)
    order: list[WaitingTask] = []
    while heap:
        rank, actor = _pop_allowed(heap, last_actor)
        order.append(ranked[rank])
        ranks = queues[actor]
        ranks.popleft()
        if ranks:
            heapq.heappush(heap, (ranks[0], actor))
        last_actor = actor
    return order


def _earliest_first(waiting: Sequence[WaitingTask]) -> list[WaitingTask]:
    """Sorted by (submitted_at, task_id): two stable sorts, twice as fast as sorting tuples."""
    ranked = sorted(waiting, key=_TASK_ID)
    ranked.sort(key=_SUBMITTED_AT)
    return ranked


def _ranks_by_actor(ranked: Sequence[WaitingTask]) -> dict[str, deque[int]]:
    """Each actor's tasks as ranks into ``ranked``, earliest first."""
    queues: dict[str, deque[int]] = {}
    for rank, task in enumerate(ranked):
        queues.setdefault(task.actor, deque()).append(rank)
    return queues


def _pop_allowed(heap: list[tuple[int, str]], last_actor: str | None) -> tuple[int, str]:
    """Pop the earliest actor head, passing over last_actor's while another actor has one.

    The heap holds one entry per actor, so at most one entry needs passing over.
    """
    first = heapq.heappop(heap)
    if first[1] != last_actor or not heap:
        return first
    return heapq.heapreplace(heap, first)


@dataclass(frozen=True)
class QueuePosition:
    """Where a waiting task stands in pick order, and whom the Waiting message names."""

    position: int  # 1-based, in pick_order
    ahead_count: int  # position - 1
    ahead_preview: tuple[WaitingTask, ...]  # the first up-to-3 tasks of pick_order ahead of this one


def queue_positions(waiting: Sequence[WaitingTask], last_actor: str | None) -> dict[str, QueuePosition]:
    """Position of every waiting task, keyed by task_id, in pick order.

    Every task from position 4 on sees the same first three tasks, so the previews are shared
    tuples: memory stays O(n) instead of the O(n²) of a prefix per task.
    """
    order = pick_order(waiting, last_actor)
    previews = [tuple(order[:i]) for i in range(min(len(order), AHEAD_PREVIEW) + 1)]
    positions = {
        task.task_id: QueuePosition(i + 1, i, previews[min(i, AHEAD_PREVIEW)]) for i, task in enumerate(order)
    }
    if len(positions) != len(order):
        raise ValueError("waiting tasks must have distinct task_ids")
    return positions


def waiting_messages(
    waiting: Sequence[WaitingTask], last_actor: str | None, locale: Locale = Locale.ZH
) -> dict[str, str]:
    """The §9 Waiting message of every waiting task, keyed by task_id."""
    positions = queue_positions(waiting, last_actor)
    # Previews are prefixes of one order, so their length identifies them: name each once.
    named = {len(p.ahead_preview): [(t.actor, t.name) for t in p.ahead_preview] for p in _previews(positions)}
    return {
        task_id: waiting_message(pos.position, named[len(pos.ahead_preview)], pos.ahead_count, locale)
        for task_id, pos in positions.items()
    }


def _previews(positions: Mapping[str, QueuePosition]) -> Iterator[QueuePosition]:
    """One position per distinct preview: the first AHEAD_PREVIEW + 1 positions (dicts keep order)."""
    return islice(positions.values(), AHEAD_PREVIEW + 1)


# --- Cluster choice (§3) --------------------------------------------------------------------


@dataclass(frozen=True)
class ReservationBasis:
    """A cluster's reservation as Compute last reported it, and the nodes Falcon's own pools held
    on it then. With the nodes they hold now it estimates the room between two reads: Falcon's
    own creations and deletions are most of what changes it, and those it knows at once."""

    read: ReservationCapacity
    held_then: int  # nodes of Falcon's pools on it that Compute counted in in_use at the read

    def usable_for(self, shape: SliceShape) -> bool:
        return reservation_problem(self.read, shape.machine_type) is None

    def fits(self, shape: SliceShape, held_now: int) -> bool:
        """Would a new pool of this slice go on the reservation (§5), Falcon holding ``held_now``?"""
        if not self.usable_for(shape):
            return False
        others = max(0, self.read.in_use - self.held_then)
        return self.read.count - others - held_now >= shape.nodes


@dataclass(frozen=True)
class ClusterLoad:
    """A cluster with what §3 ranks it by, read by the caller from the pools and the job table."""

    cluster: Cluster
    idle_pool_topologies: frozenset[str]  # topologies with an idle (kept) node pool in this cluster
    queue_lengths: Mapping[str, int]  # topology -> tasks waiting or acquiring in that queue
    reservation: ReservationBasis | None = None  # None: no reservation, or not read yet
    reservation_held: int = 0  # nodes Falcon's live pools hold on the reservation now

    def reservation_rank(self, shape: SliceShape) -> int:
        """0: a new pool of the slice would go on the reservation; 1: on flex-start (no room, no
        reservation, or not read yet); 2: nowhere, the reservation being one it cannot use."""
        if self.reservation is None:
            return 1
        if self.reservation.fits(shape, self.reservation_held):
            return 0
        return 1 if self.reservation.usable_for(shape) else 2


def eligible_clusters(tpu_type: str, clusters: Sequence[ClusterLoad]) -> list[ClusterLoad]:
    """Active clusters offering this TPU type; aliases ("tpu7x", "trillium") count as the same."""
    wanted = canonical_tpu_type(tpu_type)
    return [
        load
        for load in clusters
        if load.cluster.status is ClusterStatus.ACTIVE and canonical_tpu_type(load.cluster.tpu_type) == wanted
    ]


def choose_cluster(tpu_type: str, shape: SliceShape, clusters: Sequence[ClusterLoad]) -> Cluster | None:
    """The §3 choice: an idle pool of this topology first, then the shortest queue.

    Reusing a pool saves the 5-10 minutes of creating one, so it beats a shorter queue. Among
    equal queues, which §3 leaves open, a reservation with room for the slice comes first: §5
    puts the pool there, where a flex-start pool would wait for its nodes after its creation too;
    a reservation the slice cannot use (another machine type, not READY), where the task would
    fail, comes last. Ties fall to (name, id) so that every replica and every re-run choose the
    same cluster.
    """
    candidates = eligible_clusters(tpu_type, clusters)
    if not candidates:
        return None
    best = min(candidates, key=lambda load: _cluster_rank(load, shape))
    return best.cluster


def _cluster_rank(load: ClusterLoad, shape: SliceShape) -> tuple[bool, int, int, str, str]:
    no_idle_pool = shape.topology not in load.idle_pool_topologies
    queue = load.queue_lengths.get(shape.topology, 0)
    return (no_idle_pool, queue, load.reservation_rank(shape), load.cluster.name, load.cluster.id)


# --- Provisioning (§5) ----------------------------------------------------------------------


@dataclass(frozen=True)
class ReservationCapacity:
    """A Compute reservation as the Compute API reports it; counts are VMs (= GKE nodes)."""

    name: str  # as the pool's reservation affinity names it (NAME or projects/OWNER/reservations/NAME)
    count: int
    in_use: int
    status: str  # CREATING, READY, UPDATING, DELETING, INVALID
    machine_type: str

    @property
    def free(self) -> int:
        """Nodes still available; the API may briefly report in_use > count, which means none."""
        return max(0, self.count - self.in_use)


class UnusableReservationError(PermanentError):
    """The cluster's reservation can never hold this pool: a configuration problem to report, not to
    paper over with flex-start (the user would pay on-demand prices without being told)."""


@dataclass(frozen=True)
class ProvisioningDecision:
    """How the slot holder's new pool gets its nodes, and what the row's Reason says meanwhile."""

    mode: ProvisioningMode
    reason: Reason  # PROVISIONING or PROVISIONING_FALLBACK
    reservation: str | None  # set when the pool is created on the reservation


def decide_provisioning(
    nodes_needed: int, machine_type: str, reservation: ReservationCapacity | None
) -> ProvisioningDecision:
    """The §5 decision for a new pool: the reservation if it has room, else flex-start.

    (Reusing an idle pool comes first; it is an atomic claim in the store, not a decision here.)
    ``reservation`` is the cluster's reservation as just read (None: the cluster has none). Only
    "usable but too little free room" falls back to flex-start; a reservation that is not READY
    or holds another machine type raises UnusableReservationError naming it and the problem.
    """
    if nodes_needed < 1:
        raise ValueError(f"nodes_needed must be at least 1, got {nodes_needed}")
    flex = ProvisioningMode.FLEX_START
    if reservation is None:
        return ProvisioningDecision(flex, Reason.PROVISIONING, None)
    problem = reservation_problem(reservation, machine_type)
    if problem:
        raise UnusableReservationError(f"reservation {reservation.name}: {problem}")
    if reservation.free >= nodes_needed:
        return ProvisioningDecision(ProvisioningMode.RESERVATION, Reason.PROVISIONING, reservation.name)
    return ProvisioningDecision(flex, Reason.PROVISIONING_FALLBACK, None)


def reservation_problem(reservation: ReservationCapacity, machine_type: str) -> str | None:
    """Why a pool of ``machine_type`` can never use this reservation, or None if it can."""
    if reservation.status != "READY":
        return f"status is {reservation.status or 'unknown'}, not READY"
    if reservation.machine_type != machine_type:
        return f"it reserves {reservation.machine_type or 'no machine type'}, the slice needs {machine_type}"
    return None


# --- Delayed deletion (§5, §8) --------------------------------------------------------------


def keep_pool_after_task(waiting_in_queue: int, already_kept: int = 0) -> bool:
    """The design's rule, the floor of keeping by cost (pool_economics.CostPolicy): keep a finished
    task's pool iff a task of the same (cluster, topology) waits for it and no pool already kept
    for that queue is there to take it (one kept pool per waiting task).

    Applies to every ending, aborts included (§8): an abort must not waste a reusable pool.
    """
    return waiting_in_queue > already_kept


@dataclass(frozen=True)
class IdlePool:
    """A node pool Falcon kept after its task ended (or warmed), not yet taken by the next one."""

    cluster_id: str
    name: str
    topology: str
    idle_since: datetime
    # How long it is kept while nobody of its queue waits, and while some wait but none takes it:
    # the keeping policy's horizon and hold for the pool's queue and mode (pool_economics).
    keep_for: timedelta
    hold_for: timedelta


def expired_idle_pools(
    pools: Sequence[IdlePool],
    waiting_by_queue: Mapping[QueueKey, int],
    now: datetime,
    warm: Mapping[QueueKey, int] | None = None,
) -> list[IdlePool]:
    """Idle pools to delete now, in the order given; ``pools`` are all the idle pools.

    A pool whose queue has nobody waiting goes once idle longer than its own ``keep_for``; one
    whose queue has waiters once idle longer than its ``hold_for`` too (never kept forever: the
    waiters are evidently not taking it). These compose with the queues' ``warm`` targets (tidal
    warm pools): a pool goes only when neither keeps it, so a queue keeps at least its target of
    idle pools.
    """
    expired = [pool for pool in pools if _idle_pool_expired(pool, waiting_by_queue, now)]
    if not warm:
        return expired
    idle: dict[QueueKey, int] = {}
    for pool in pools:
        queue = QueueKey(pool.cluster_id, pool.topology)
        idle[queue] = idle.get(queue, 0) + 1
    candidates = [(QueueKey(p.cluster_id, p.topology), p.idle_since) for p in expired]
    return [expired[i] for i in surplus_first(candidates, idle, warm)]


def _idle_pool_expired(pool: IdlePool, waiting_by_queue: Mapping[QueueKey, int], now: datetime) -> bool:
    waiting = waiting_by_queue.get(QueueKey(pool.cluster_id, pool.topology), 0)
    kept_for = max(pool.keep_for, pool.hold_for) if waiting > 0 else pool.keep_for  # waiters never shorten it
    return now - pool.idle_since > kept_for
