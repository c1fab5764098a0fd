"""Where a task is inside Falcon, and how it ends: phases, pools, outcomes, the timeout rule.

``Status`` (status.py) is what upstream sees on the row; ``Phase`` is Falcon's own progress
record beside it. Both have a transition table, and every write is checked against it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import StrEnum

from falcon.domain.errors import InvalidSpecError
from falcon.domain.messages import MessageKey, Messages
from falcon.domain.model import Cluster, ProvisioningMode, QueueKey, RunningChanges, Task, TaskSpec
from falcon.domain.scheduling import WaitingTask
from falcon.domain.status import Reason, Status
from falcon.domain.topology import SliceShape, resolve_shape


class Phase(StrEnum):
    """Values of falcon_task_progress.phase."""

    WAITING = "waiting"  # in its queue
    ACQUIRING = "acquiring"  # holds the queue slot: provisioning, dispatching, pods starting
    RUNNING = "running"  # all pods ran; followed by the dispatcher's reconciliation
    RELEASING = "releasing"  # outcome known; Job deletion and node-pool keep-or-delete under way
    DONE = "done"  # terminal status written


# Moves Falcon makes. None is "no progress row yet": intake queues a task or ends it at once.
# Staying in a phase is allowed where a step records more about it (run ids, attempts).
PHASE_MOVES: dict[Phase | None, frozenset[Phase]] = {
    None: frozenset({Phase.WAITING, Phase.DONE}),
    Phase.WAITING: frozenset({Phase.ACQUIRING, Phase.DONE}),
    Phase.ACQUIRING: frozenset({Phase.ACQUIRING, Phase.RUNNING, Phase.RELEASING}),
    Phase.RUNNING: frozenset({Phase.RELEASING}),
    Phase.RELEASING: frozenset({Phase.RELEASING, Phase.DONE}),
    Phase.DONE: frozenset({Phase.DONE}),
}


class IllegalPhaseMoveError(ValueError):
    pass


def check_phase_move(current: Phase | None, new: Phase) -> None:
    """Raise unless Falcon may move a progress row from ``current`` to ``new``."""
    if new not in PHASE_MOVES[current]:
        raise IllegalPhaseMoveError(f"phase {current} -> {new} is not a move Falcon makes")


class PoolState(StrEnum):
    """Values of falcon_node_pools.state."""

    CREATING = "creating"  # name written ahead of the GKE create call
    IN_USE = "in_use"  # held by holder_task_id
    IDLE = "idle"  # kept for a waiting task of the same queue (delayed deletion)
    DELETING = "deleting"
    DELETED = "deleted"


LIVE_POOL_STATES = (PoolState.CREATING, PoolState.IN_USE, PoolState.IDLE, PoolState.DELETING)


@dataclass(frozen=True)
class DeleteAsk:
    """An ask to delete a marked pool, recorded (``TaskStore.delete_asked``) at ``at`` in place
    of the ask recorded before it (``replaced``), which GKE may not have answered: a refusal of
    this ask puts that one back."""

    at: datetime
    replaced: datetime | None


@dataclass(frozen=True)
class NodePool:
    """Falcon's record of a node pool it created (written before GKE is asked)."""

    cluster_id: str
    name: str
    topology: str
    machine_type: str
    mode: ProvisioningMode
    reservation: str | None
    state: PoolState
    holder_task_id: str | None
    idle_since: datetime | None = None

    @property
    def queue(self) -> QueueKey:
        """The queue (cluster, topology) whose tasks the pool can serve."""
        return QueueKey(self.cluster_id, self.topology)


def reservation_pool_counts(pools: Iterable[NodePool], states: Iterable[PoolState]) -> dict[QueueKey, int]:
    """How many of ``pools`` in ``states`` are on a reservation, per (cluster, topology)."""
    wanted = set(states)
    counts: dict[QueueKey, int] = {}
    for p in pools:
        if p.mode is ProvisioningMode.RESERVATION and p.state in wanted:
            counts[p.queue] = counts.get(p.queue, 0) + 1
    return counts


def reservation_nodes(cluster: Cluster, counts: Mapping[QueueKey, int]) -> int:
    """The nodes the pools counted (``reservation_pool_counts``) hold on ``cluster``'s reservation.
    A topology the cluster's TPU type no longer has (its registry row changed) counts a node a pool:
    an estimate must not stop intake."""
    return sum(
        n * _nodes_or_one(cluster.tpu_type, q.topology)
        for q, n in counts.items()
        if q.cluster_id == cluster.id
    )


def _nodes_or_one(tpu_type: str, topology: str) -> int:
    try:
        return resolve_shape(tpu_type, topology).nodes
    except InvalidSpecError:
        return 1


@dataclass(frozen=True)
class Outcome:
    """How a task ends; written to the row once Job and node pool are dealt with."""

    status: Status
    reason: Reason | None = None
    message: str = ""

    def with_message(self, message: str) -> Outcome:
        return Outcome(self.status, self.reason, message)


def aborted(say: Messages) -> Outcome:
    return Outcome(Status.ABORTED, None, say(MessageKey.ABORTED))


def succeeded(say: Messages) -> Outcome:
    return Outcome(Status.SUCCEEDED, None, say(MessageKey.SUCCEEDED))


def failed(say: Messages, reason: Reason, key: MessageKey, **params: object) -> Outcome:
    return Outcome(Status.FAILED, reason, say(key, **params))


class TaskEnded(Exception):
    """Acquisition stops here: the task failed, timed out or was aborted."""

    def __init__(self, outcome: Outcome) -> None:
        super().__init__(f"{outcome.status} {outcome.reason or ''} {outcome.message}".strip())
        self.outcome = outcome


class RunSuperseded(Exception):
    """This lifecycle run is not its task's current attempt: the task moved on, or the dispatcher
    replaced the attempt (with a new queue-slot lease) while this run was slow to start. Such a
    run must change nothing."""


class RunStopped(RunSuperseded):
    """The process running this step is shutting down (its dispatcher run ended): the step stops
    at its next wait, changing nothing more, and the next dispatcher run resumes the task from the
    database as it would after a crash."""


@dataclass(frozen=True)
class Progress:
    """Falcon's progress row of one task."""

    task_id: str
    phase: Phase
    queue: QueueKey | None
    lease_id: str | None = None
    attempt: int = 0
    acquire_run_id: str | None = None
    release_run_id: str | None = None
    outcome: Outcome | None = None  # set when the task moved to releasing


@dataclass(frozen=True)
class TaskView:
    """A task with everything resolved that its steps need; loaded once per run."""

    task: Task
    spec: TaskSpec
    shape: SliceShape
    cluster: Cluster

    @property
    def queue(self) -> QueueKey:
        return QueueKey(self.cluster.id, self.shape.topology)


def timed_out(dispatched_at: datetime | None, timeout_seconds: int | None, now: datetime) -> bool:
    """Design §4: the timeout runs from dispatched_at (Job submitted), pods pending included."""
    if dispatched_at is None or not timeout_seconds:
        return False
    return now >= dispatched_at + timedelta(seconds=timeout_seconds)


@dataclass(frozen=True)
class WaitingRow:
    """A waiting task with its queue and the Message last written on its row."""

    queue: QueueKey
    task: WaitingTask
    message: str | None


@dataclass(frozen=True)
class Snapshot:
    """What one dispatcher tick reads, in one short transaction, before it decides anything."""

    new_tasks: list[Task]
    aborting: list[tuple[Task, Phase | None]]
    acquiring_queues: set[QueueKey]
    clusters: list[Cluster]  # with queue_lengths and the pools: read only when new_tasks came
    queue_lengths: dict[QueueKey, int]
    idle_pools: list[NodePool]
    reservation_pools: dict[QueueKey, int]  # live pools on a reservation, per (cluster, topology)
    waiting: list[WaitingRow] | None = None  # only when the queue book is (re)loaded
    last_actors: dict[QueueKey, str] | None = None
    waiting_counts: dict[QueueKey, int] | None = None  # only when the queue book is checked


@dataclass(frozen=True)
class RoundSnapshot:
    """What every reconcile round reads, in one statement, before it follows and reaps."""

    running: RunningChanges  # every running task when the read was asked for no moment
    supervised: list[Progress]  # the progress rows in the phases asked for
    takers_without_pool: dict[QueueKey, int]  # acquiring tasks not yet holding a ready pool
    pools: list[NodePool]  # in the states asked for, oldest record first
