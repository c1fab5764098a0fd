"""What the services report as it happens, for the transition log and the metrics.

A ``Stage`` is Falcon's phase (``Phase``) with two more points an operator times a task by:
``new`` (a row not yet taken in) and ``dispatched`` (acquiring, its Job created, its pods
starting). A ``TaskMove`` is one step of a task from a stage to the next, with what the step knew
at that moment: the row's insert time (for latencies from it), its dispatch time and its outcome.
A ``ResourceView`` is what the dispatcher sees of its queues, clusters and pools at one moment.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum

from falcon.domain.lifecycle import NodePool, Outcome, Phase
from falcon.domain.model import Cluster, QueueKey
from falcon.domain.scheduling import ReservationCapacity
from falcon.domain.status import Reason


class Stage(StrEnum):
    NEW = "new"  # inserted by upstream, not taken in yet
    WAITING = "waiting"
    ACQUIRING = "acquiring"  # picked: provisioning its node pool
    DISPATCHED = "dispatched"  # its Job created, pods starting (still acquiring: holds the slot)
    RUNNING = "running"
    RELEASING = "releasing"
    DONE = "done"

    @classmethod
    def of(cls, phase: Phase | None, dispatched: bool = False) -> Stage:
        """The stage of a task in ``phase`` (None: no progress row yet); ``dispatched`` tells an
        acquiring task whose Job exists from one still provisioning."""
        if phase is None:
            return cls.NEW
        if phase is Phase.ACQUIRING and dispatched:
            return cls.DISPATCHED
        return cls(phase.value)


# Reasons of the row's move into each Pending stage (the rest carry their outcome).
STAGE_REASONS: dict[Stage, Reason] = {
    Stage.WAITING: Reason.WAITING,
    Stage.ACQUIRING: Reason.PROVISIONING,
    Stage.DISPATCHED: Reason.DISPATCHING,
}


@dataclass(frozen=True)
class TaskMove:
    """One task moved from ``source`` to ``target`` at ``at``. ``queue`` is None for a row intake
    ended before it had one; ``outcome`` is set on moves to releasing and done."""

    task_id: str
    queue: QueueKey | None
    source: Stage
    target: Stage
    at: datetime
    created_at: datetime | None = None  # the row's insert: latencies to waiting, dispatched, running
    dispatched_at: datetime | None = None  # the Job's creation: the run time, on moves to releasing
    outcome: Outcome | None = None

    @property
    def reason(self) -> str:
        """What the row's Reason (or, once the task ends, its Status) says after the move."""
        if self.outcome is not None:
            return (self.outcome.reason or self.outcome.status).value
        pending = STAGE_REASONS.get(self.target)
        return pending.value if pending else ""


@dataclass(frozen=True)
class ResourceView:
    """The dispatcher's queues, clusters, reservations and pools at one moment (the gauges)."""

    clusters: Sequence[Cluster]  # the registry: metric labels name clusters, not their ids
    waiting: Mapping[QueueKey, int]  # waiting tasks per queue
    acquiring: Collection[QueueKey]  # queues whose slot a task holds (a queue -> task id map will do)
    running_jobs: Mapping[str, int]  # cluster id -> Jobs of its tasks in phase running
    reservations: Mapping[str, ReservationCapacity | None]  # cluster id -> as last read (None: unknown)
    pools: Sequence[NodePool]  # live pool records (creating, in use, idle, deleting)
    warm_pools: Collection[tuple[str, str]] = field(default_factory=frozenset)  # (cluster id, name)
