"""Phase 1 of the design: take new rows in, validate them, choose a cluster, queue them.

A row that cannot run (bad spec, unknown topology, no active cluster for its TPU type) ends
Failed with a clear Reason and Message right here, and never holds up the rows after it.
Deciding is pure (``decide``); ``take_in`` then ends the failed rows one by one and queues the
rest in one transaction.
"""

from __future__ import annotations

import unicodedata
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime

from falcon.domain.errors import InvalidSpecError
from falcon.domain.events import Stage, TaskMove
from falcon.domain.lifecycle import Outcome, Snapshot, failed, reservation_nodes
from falcon.domain.messages import MessageKey, Messages
from falcon.domain.model import QueueKey, Task, TaskSpec, shown
from falcon.domain.scheduling import ClusterLoad, ReservationBasis, WaitingTask, choose_cluster
from falcon.domain.status import Reason, Status
from falcon.domain.topology import SliceShape, resolve_shape
from falcon.services.ports import TaskEvents, TaskStore


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


MAX_TIMEOUT_SECONDS = 30 * 24 * 3600  # a month: a longer run sets no timeout (NULL)
# Contract widths of the columns (README); SQLite and lax upstream tables do not enforce them.
_COLUMN_WIDTHS = {"id": 64, "actor": 128, "name": 255, "tpu_type": 32}
_BIDI_CONTROLS = frozenset("\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069")


def validate(task: Task) -> SliceShape:
    """The slice shape of a row that can run, or InvalidSpecError naming the column or field at fault."""
    if task.problems:
        raise InvalidSpecError("; ".join(task.problems))
    for column, value in (
        ("id", task.id),
        ("actor", task.actor),
        ("name", task.name),
        ("tpu_type", task.tpu_type),
    ):
        _check_text(column, value)
    if task.id in (".", "..") or "/" in task.id:
        raise InvalidSpecError(f"id {shown(task.id)} cannot name the task's log folder (logs/<id>/)")
    spec = TaskSpec.parse(task.spec)
    shape = resolve_shape(task.tpu_type, spec.topology)
    if task.timeout_seconds is not None and not 0 < task.timeout_seconds <= MAX_TIMEOUT_SECONDS:
        raise InvalidSpecError(
            f"timeout_seconds must be positive and at most {MAX_TIMEOUT_SECONDS} (30 days),"
            f" got {task.timeout_seconds}"
        )
    return shape


def _check_text(column: str, value: str) -> None:
    """Texts shown in Messages, the task's own and its queue's: no control, bidi override or lone
    surrogate in them, and no longer than the contract's column."""
    if len(value) > _COLUMN_WIDTHS[column]:
        raise InvalidSpecError(f"{column} has {len(value)} characters, at most {_COLUMN_WIDTHS[column]}")
    if any(unicodedata.category(c) in ("Cc", "Cs") or c in _BIDI_CONTROLS for c in value):
        raise InvalidSpecError(f"{column} {shown(value)} has control characters")


def decide(tasks: Sequence[Task], loads: list[ClusterLoad], say: Messages) -> list[Admission]:
    """Each new row's queue or failure; later rows of the batch see the queues earlier ones joined."""
    admissions = []
    for task in tasks:
        try:
            shape = validate(task)
        except InvalidSpecError as exc:
            outcome = failed(say, Reason.INVALID_SPEC, MessageKey.INVALID_SPEC, detail=exc)
            admissions.append(Admission(task, None, outcome))
            continue
        cluster = choose_cluster(task.tpu_type, shape, loads)
        if cluster is None:
            outcome = failed(
                say, Reason.NO_ELIGIBLE_CLUSTER, MessageKey.NO_ELIGIBLE_CLUSTER, tpu_type=task.tpu_type
            )
            admissions.append(Admission(task, None, outcome))
            continue
        queue = QueueKey(cluster.id, shape.topology)  # "02x04" and "2x4" are one queue
        admissions.append(Admission(task, queue))
        loads = _count_one_more(loads, queue)
    return admissions


def take_in(
    store: TaskStore,
    snapshot: Snapshot,
    say: Messages,
    now: datetime,
    events: TaskEvents,
    reservations: Mapping[str, ReservationBasis] | None = None,
) -> IntakeReport:
    """Queue the snapshot's new rows or end them; each row taken is reported to ``events``.
    ``reservations``: each cluster's reservation as last read (cluster id -> basis), if known."""
    report = IntakeReport()
    if not snapshot.new_tasks:
        return report
    loads = cluster_loads(snapshot, reservations or {})
    queued: dict[str, tuple[QueueKey, Task]] = {}
    for admission in decide(snapshot.new_tasks, loads, say):
        task = admission.task
        if admission.outcome is not None:
            if store.finish(task.id, admission.outcome, [Status.PENDING], now):
                report.failed.append(task.id)
                _tell(events, task, None, Stage.DONE, now, admission.outcome)
        elif admission.queue is not None:
            queued[task.id] = (admission.queue, task)
    # One transaction for the batch: a commit per row was most of a tick's time when thousands
    # of rows came in at once.
    for task_id in store.queue_tasks([(task_id, queue) for task_id, (queue, _) in queued.items()], now):
        queue, task = queued[task_id]
        report.queued.append((queue, WaitingTask(task.id, task.actor, task.name, task.created_at)))
        _tell(events, task, queue, Stage.WAITING, now)
    return report


def _tell(
    events: TaskEvents,
    task: Task,
    queue: QueueKey | None,
    target: Stage,
    now: datetime,
    outcome: Outcome | None = None,
) -> None:
    events.moved(TaskMove(task.id, queue, Stage.NEW, target, now, task.created_at, outcome=outcome))


def cluster_loads(snapshot: Snapshot, reservations: Mapping[str, ReservationBasis]) -> list[ClusterLoad]:
    """What §3 ranks each cluster by, from what the tick read and the reservations last read."""
    idle: dict[str, set[str]] = defaultdict(set)
    for pool in snapshot.idle_pools:
        idle[pool.cluster_id].add(pool.topology)
    per_cluster: dict[str, dict[str, int]] = defaultdict(dict)
    for queue, n in snapshot.queue_lengths.items():
        per_cluster[queue.cluster_id][queue.topology] = n
    return [
        ClusterLoad(
            c,
            frozenset(idle[c.id]),
            per_cluster[c.id],
            reservations.get(c.id),
            reservation_nodes(c, snapshot.reservation_pools),
        )
        for c in snapshot.clusters
    ]


def _count_one_more(loads: list[ClusterLoad], queue: QueueKey) -> list[ClusterLoad]:
    out = []
    for load in loads:
        if load.cluster.id == queue.cluster_id:
            lengths = dict(load.queue_lengths)
            lengths[queue.topology] = lengths.get(queue.topology, 0) + 1
            load = replace(load, queue_lengths=lengths)
        out.append(load)
    return out
