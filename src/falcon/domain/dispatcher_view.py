"""What the dispatcher sees, for people: every queue's waiting tasks in pick order and the task
acquiring its slot, every cluster's reservation room, running tasks and node pools.

Built from what the reconcile round already holds (pure); the flow publishes it as a Prefect
table artifact and as the state gauges of ``/metrics``.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from falcon.domain.lifecycle import NodePool
from falcon.domain.model import Cluster, QueueKey, queue_label
from falcon.domain.scheduling import ReservationCapacity, WaitingTask, pick_order

NEXT_SHOWN = 5  # waiting tasks named per queue in the artifact; the rest are counted


@dataclass(frozen=True)
class QueueState:
    queue: QueueKey
    cluster: str  # the cluster's name
    label: str  # queue_label
    waiting: tuple[WaitingTask, ...]  # in pick order
    acquiring: str | None  # the id of the task holding the queue's slot


@dataclass(frozen=True)
class ClusterState:
    cluster_id: str
    name: str
    reservation: str | None
    room: ReservationCapacity | None  # None: no reservation, or Compute did not answer
    running: int  # tasks whose Job runs
    pools: Mapping[tuple[str, str, str], int]  # (topology, mode, state) -> live node pools


@dataclass(frozen=True)
class DispatcherView:
    queues: tuple[QueueState, ...]
    clusters: tuple[ClusterState, ...]

    def table(self) -> list[dict[str, str]]:
        """One row per queue that has waiting tasks, an acquiring task or a node pool, with its
        cluster's reservation room: the rows of the dispatcher's table artifact."""
        by_id = {c.cluster_id: c for c in self.clusters}
        return [_row(q, by_id[q.queue.cluster_id]) for q in self.queues if q.queue.cluster_id in by_id]


def build_view(
    clusters: Sequence[Cluster],
    waiting: Mapping[QueueKey, Sequence[WaitingTask]],
    last_actors: Mapping[QueueKey, str],
    acquiring: Mapping[QueueKey, str],
    running: Mapping[str, int],
    pools: Sequence[NodePool],
    room: Mapping[str, ReservationCapacity | None],
) -> DispatcherView:
    """The view of ``clusters``: ``waiting`` and ``acquiring`` per queue, ``running`` tasks per
    cluster id, the live ``pools``, and ``room`` per cluster id (its reservation as last read)."""
    names = {c.id: c for c in clusters}
    queues = {q for q, tasks in waiting.items() if tasks} | set(acquiring) | {p.queue for p in pools}
    known = sorted(
        (q for q in queues if q.cluster_id in names), key=lambda q: (names[q.cluster_id].name, q.topology)
    )
    states = tuple(
        QueueState(
            queue,
            names[queue.cluster_id].name,
            queue_label(names[queue.cluster_id], queue.topology),
            tuple(pick_order(waiting.get(queue, ()), last_actors.get(queue))),
            acquiring.get(queue),
        )
        for queue in known
    )
    return DispatcherView(states, tuple(_cluster_state(c, running, pools, room) for c in clusters))


def _cluster_state(
    cluster: Cluster,
    running: Mapping[str, int],
    pools: Sequence[NodePool],
    room: Mapping[str, ReservationCapacity | None],
) -> ClusterState:
    counts = Counter((p.topology, p.mode.value, p.state.value) for p in pools if p.cluster_id == cluster.id)
    return ClusterState(
        cluster.id,
        cluster.name,
        cluster.default_reservation,
        room.get(cluster.id),
        running.get(cluster.id, 0),
        counts,
    )


def _row(queue: QueueState, cluster: ClusterState) -> dict[str, str]:
    pools = Counter(
        {state: n for (topology, _, state), n in cluster.pools.items() if topology == queue.queue.topology}
    )
    return {
        "queue": queue.label,
        "acquiring": queue.acquiring or "",
        "waiting": str(len(queue.waiting)),
        "next": _next(queue.waiting),
        "node pools": ", ".join(f"{n} {state}" for state, n in sorted(pools.items())),
        "running on cluster": str(cluster.running),
        "reservation room": _room(cluster),
    }


def _next(waiting: Sequence[WaitingTask]) -> str:
    named = ", ".join(f"{i}. {t.task_id} ({t.actor})" for i, t in enumerate(waiting[:NEXT_SHOWN], 1))
    more = len(waiting) - NEXT_SHOWN
    return f"{named}, +{more} more" if more > 0 else named


def _room(cluster: ClusterState) -> str:
    if cluster.reservation is None:
        return "no reservation (flex-start)"
    if cluster.room is None:
        return f"{cluster.reservation}: unknown"
    return f"{cluster.reservation}: {cluster.room.free} of {cluster.room.count} nodes free"
