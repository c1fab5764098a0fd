"""Phase 1 of the design: take new rows in, validate them, choose a cluster, queue them.

A row that cannot run (bad spec, unknown topology, no active cluster for its TPU type) ends
Failed with a clear Reason and Message right here, and never holds up the rows after it.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from datetime import datetime

from sqlalchemy.orm import Session

from falcon.adapters.db import repository as repo
from falcon.domain.errors import InvalidSpecError
from falcon.domain.messages import Locale, MessageKey, render
from falcon.domain.model import QueueKey, Task, TaskSpec
from falcon.domain.scheduling import ClusterLoad, WaitingTask, choose_cluster
from falcon.domain.status import Reason, Status
from falcon.domain.topology import resolve_shape


@dataclass
class IntakeReport:
    queued: list[tuple[QueueKey, WaitingTask]] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)


def validate(task: Task) -> TaskSpec:
    if task.problems:
        raise InvalidSpecError("; ".join(task.problems))
    spec = TaskSpec.parse(task.spec)
    resolve_shape(task.tpu_type, spec.topology)
    if task.timeout_seconds is not None and task.timeout_seconds <= 0:
        raise InvalidSpecError(f"timeout_seconds must be positive, got {task.timeout_seconds}")
    return spec


def take_in(session: Session, now: datetime, locale: Locale, batch: int) -> IntakeReport:
    report = IntakeReport()
    tasks = repo.new_tasks(session, batch)
    if not tasks:
        return report
    loads = _cluster_loads(session)
    for task in tasks:
        try:
            spec = validate(task)
        except InvalidSpecError as exc:
            _fail(
                session, task, Reason.INVALID_SPEC, render(MessageKey.INVALID_SPEC, locale, detail=exc), now
            )
            report.failed.append(task.id)
            continue
        cluster = choose_cluster(task.tpu_type, spec.topology, loads)
        if cluster is None:
            message = render(MessageKey.NO_ELIGIBLE_CLUSTER, locale, tpu_type=task.tpu_type)
            _fail(session, task, Reason.NO_ELIGIBLE_CLUSTER, message, now)
            report.failed.append(task.id)
            continue
        queue = QueueKey(cluster.id, spec.topology)
        if repo.update_task(
            session, task.id, [Status.PENDING], now, reason=Reason.WAITING, cluster_id=cluster.id, message=""
        ):
            repo.start_progress(session, task.id, repo.Phase.WAITING, now, queue)
            loads = _count_one_more(loads, queue)
            report.queued.append((queue, WaitingTask(task.id, task.actor, task.name, task.created_at)))
    return report


def _fail(session: Session, task: Task, reason: Reason, message: str, now: datetime) -> None:
    if repo.update_task(
        session,
        task.id,
        [Status.PENDING],
        now,
        status=Status.FAILED,
        reason=reason,
        message=message,
        finished_at=now,
    ):
        repo.mark_done(session, task.id, now)


def _cluster_loads(session: Session) -> list[ClusterLoad]:
    lengths = repo.queue_lengths(session)
    idle: dict[str, set[str]] = defaultdict(set)
    for pool in repo.pools_in(session, [repo.PoolState.IDLE]):
        idle[pool.cluster_id].add(pool.topology)
    per_cluster: dict[str, dict[str, int]] = defaultdict(dict)
    for queue, n in lengths.items():
        per_cluster[queue.cluster_id][queue.topology] = n
    return [ClusterLoad(c, frozenset(idle[c.id]), per_cluster[c.id]) for c in repo.list_clusters(session)]


def _count_one_more(loads: list[ClusterLoad], queue: QueueKey) -> list[ClusterLoad]:
    """Later rows of the same batch see the queue this row just joined."""
    out = []
    for load in loads:
        if load.cluster.id == queue.cluster_id:
            lengths = dict(load.queue_lengths)
            lengths[queue.topology] = lengths.get(queue.topology, 0) + 1
            load = ClusterLoad(load.cluster, load.idle_pool_topologies, lengths)
        out.append(load)
    return out
