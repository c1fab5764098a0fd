"""What every service step is handed: the settings, the ports, and the Messages in one locale."""

from __future__ import annotations

from dataclasses import dataclass, field

from falcon.domain.errors import PermanentError
from falcon.domain.events import Stage, TaskMove
from falcon.domain.lifecycle import Outcome, Phase, RunSuperseded, TaskEnded, TaskView, aborted
from falcon.domain.messages import Messages
from falcon.domain.model import Cluster, QueueKey, Task, TaskSpec
from falcon.domain.pool_economics import KeepPolicy
from falcon.domain.status import Status
from falcon.domain.topology import resolve_shape
from falcon.services.ports import (
    Clock,
    JobsOf,
    Launcher,
    NodePools,
    Reservations,
    Slots,
    TaskEvents,
    TaskStore,
    WorkloadPolicies,
)
from falcon.settings import Settings


@dataclass(frozen=True)
class Services:
    settings: Settings
    store: TaskStore
    node_pools: NodePools
    reservations: Reservations
    workload_policies: WorkloadPolicies
    jobs: JobsOf
    slots: Slots
    launcher: Launcher
    clock: Clock
    # How long idle pools are kept: Falcon's CostPolicy, or a baseline a benchmark compares with.
    keep_policy: KeepPolicy
    events: TaskEvents  # the transition log and the metrics
    say: Messages = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "say", Messages(self.settings.message_locale))

    def ensure_active(self, task_id: str) -> Task:
        """The task's row; TaskEnded(Aborted) once upstream has asked for an abort (or it is gone)."""
        task = self.store.task(task_id)
        if task is None or task.status is Status.ABORTING:
            raise TaskEnded(aborted(self.say))
        return task


def tell_moved(
    services: Services, task: Task, source: Stage, target: Stage, outcome: Outcome | None = None
) -> None:
    """Report a move of ``task`` (the row as read before it) that the store has just recorded."""
    queue = QueueKey(task.cluster_id, task.topology) if task.cluster_id and task.topology else None
    move = TaskMove(
        task.id, queue, source, target, services.clock.now(), task.created_at, task.dispatched_at, outcome
    )
    services.events.moved(move)


def stage_of(task: Task, phase: Phase | None) -> Stage:
    """The stage of a task in ``phase``: an acquiring one whose Job was created is dispatched."""
    return Stage.of(phase, dispatched=task.dispatched_at is not None)


def load_attempt(services: Services, task_id: str, lease_id: str) -> TaskView:
    """load_view for the lifecycle run given ``lease_id``; RunSuperseded unless the task is still
    acquiring under that lease (each attempt is recorded with its lease before its run starts)."""
    task, cluster, progress = services.store.task_view_rows(task_id)
    if progress is None or progress.phase is not Phase.ACQUIRING or (progress.lease_id or "") != lease_id:
        phase = progress.phase.value if progress else "none"
        raise RunSuperseded(f"task {task_id} is in phase {phase}, not acquiring under lease {lease_id!r}")
    return _view(task_id, task, cluster)


def load_view(services: Services, task_id: str) -> TaskView:
    """The task, its spec, slice shape and cluster: read once per lifecycle run."""
    task, cluster, _ = services.store.task_view_rows(task_id)
    return _view(task_id, task, cluster)


def _view(task_id: str, task: Task | None, cluster: Cluster | None) -> TaskView:
    if task is None or task.cluster_id is None:
        raise PermanentError(f"task {task_id} is not queued on any cluster")
    if cluster is None:
        raise PermanentError(f"cluster {task.cluster_id} of task {task_id} is not registered")
    spec = TaskSpec.parse(task.spec)
    return TaskView(task, spec, resolve_shape(task.tpu_type, spec.topology), cluster)
