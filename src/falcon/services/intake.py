"""Phase 1 of the design: take new rows in, validate them, choose a cluster, queue them.

A row that cannot run (bad spec, unknown topology, no active cluster for its TPU type) ends
Failed with a clear Reason and Message right here, and never holds up the rows after it.
Deciding is pure (``decide``); ``take_in`` then writes each row's decision on its own.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime

from falcon.domain.errors import InvalidSpecError
from falcon.domain.lifecycle import NodePool, Outcome, Snapshot, failed
from falcon.domain.messages import MessageKey, Messages
from falcon.domain.model import Cluster, QueueKey, Task, TaskSpec
from falcon.domain.scheduling import ClusterLoad, WaitingTask, choose_cluster
from falcon.domain.status import Reason, Status
from falcon.domain.topology import resolve_shape
from falcon.services.ports import TaskStore


@dataclass
class IntakeReport:
    queued: list[tuple[QueueKey, WaitingTask]] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class Admission:
    """What intake decided for one row: the queue it joins, or how it ends."""

    task: Task
    queue: QueueKey | None
    outcome: Outcome | None = None


def validate(task: Task) -> TaskSpec:
    if task.problems:
        raise InvalidSpecError("; ".join(task.problems))
    spec = TaskSpec.parse(task.spec)
    resolve_shape(task.tpu_type, spec.topology)
    if task.timeout_seconds is not None and task.timeout_seconds <= 0:
        raise InvalidSpecError(f"timeout_seconds must be positive, got {task.timeout_seconds}")
    return spec


def decide(tasks: Sequence[Task], loads: list[ClusterLoad], say: Messages) -> list[Admission]:
    """Each new row's queue or failure; later rows of the batch see the queues earlier ones joined."""
    admissions = []
    for task in tasks:
        try:
            spec = validate(task)
        except InvalidSpecError as exc:
            outcome = failed(say, Reason.INVALID_SPEC, MessageKey.INVALID_SPEC, detail=exc)
            admissions.append(Admission(task, None, outcome))
            continue
        cluster = choose_cluster(task.tpu_type, spec.topology, loads)
        if cluster is None:
            outcome = failed(
                say, Reason.NO_ELIGIBLE_CLUSTER, MessageKey.NO_ELIGIBLE_CLUSTER, tpu_type=task.tpu_type
            )
            admissions.append(Admission(task, None, outcome))
            continue
        queue = QueueKey(cluster.id, spec.topology)
        admissions.append(Admission(task, queue))
        loads = _count_one_more(loads, queue)
    return admissions


def take_in(store: TaskStore, snapshot: Snapshot, say: Messages, now: datetime) -> IntakeReport:
    report = IntakeReport()
    if not snapshot.new_tasks:
        return report
    loads = cluster_loads(snapshot.clusters, snapshot.queue_lengths, snapshot.idle_pools)
    for admission in decide(snapshot.new_tasks, loads, say):
        task = admission.task
        if admission.outcome is not None:
            if store.finish(task.id, admission.outcome, [Status.PENDING], now):
                report.failed.append(task.id)
        elif admission.queue is not None and store.queue_task(task.id, admission.queue, now):
            waiting = WaitingTask(task.id, task.actor, task.name, task.created_at)
            report.queued.append((admission.queue, waiting))
    return report


def cluster_loads(
    clusters: list[Cluster], lengths: dict[QueueKey, int], idle_pools: list[NodePool]
) -> list[ClusterLoad]:
    idle: dict[str, set[str]] = defaultdict(set)
    for pool in idle_pools:
        idle[pool.cluster_id].add(pool.topology)
    per_cluster: dict[str, dict[str, int]] = defaultdict(dict)
    for queue, n in lengths.items():
        per_cluster[queue.cluster_id][queue.topology] = n
    return [ClusterLoad(c, frozenset(idle[c.id]), per_cluster[c.id]) for c in clusters]


def _count_one_more(loads: list[ClusterLoad], queue: QueueKey) -> list[ClusterLoad]:
    out = []
    for load in loads:
        if load.cluster.id == queue.cluster_id:
            lengths = dict(load.queue_lengths)
            lengths[queue.topology] = lengths.get(queue.topology, 0) + 1
            load = ClusterLoad(load.cluster, load.idle_pool_topologies, lengths)
        out.append(load)
    return out
