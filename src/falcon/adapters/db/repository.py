"""Reads and writes of Falcon's tables. Every function takes the session; none commits.

Writes to the upstream ``job`` row are compare-and-set on its current status
(``update_task(..., expect=...)``): upstream may set Aborting at any moment, and a write that
finds the row changed underneath it does nothing and reports False instead of losing the abort.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, cast

import sqlalchemy as sa
from sqlalchemy.orm import Session

from falcon.adapters.db.orm import (
    ClusterRow,
    JobRow,
    NodePoolRow,
    QueueRotationRow,
    TaskProgressRow,
    Unreadable,
)
from falcon.domain.model import Cluster, ClusterStatus, QueueKey, Task
from falcon.domain.scheduling import WaitingTask
from falcon.domain.status import Reason, Status, check_transition


class Phase:
    """Values of falcon_task_progress.phase: Falcon's internal view of where a task is."""

    WAITING = "waiting"  # in its queue
    ACQUIRING = "acquiring"  # holds the queue slot: provisioning, dispatching, pods starting
    RUNNING = "running"  # all pods ran; followed by the dispatcher's reconciliation
    RELEASING = "releasing"  # outcome known; Job deletion and node-pool keep-or-delete under way
    DONE = "done"  # terminal status written


class PoolState:
    """Values of falcon_node_pools.state."""

    CREATING = "creating"  # name written ahead of the GKE create call
    IN_USE = "in_use"  # held by holder_task_id
    IDLE = "idle"  # kept for a waiting task of the same queue (delayed deletion)
    DELETING = "deleting"
    DELETED = "deleted"


# -- clusters -----------------------------------------------------------------------------------


def _cluster(row: ClusterRow) -> Cluster:
    return Cluster(
        id=row.id,
        name=row.name,
        project=row.project,
        location=row.location,
        tpu_type=row.tpu_type,
        gcs_bucket=row.gcs_bucket,
        default_reservation=row.default_reservation,
        status=ClusterStatus(row.status),
        namespace=row.namespace,
        zone=row.zone,
    )


def add_cluster(session: Session, cluster: Cluster, now: datetime) -> None:
    session.add(
        ClusterRow(
            id=cluster.id,
            name=cluster.name,
            project=cluster.project,
            location=cluster.location,
            tpu_type=cluster.tpu_type,
            gcs_bucket=cluster.gcs_bucket,
            default_reservation=cluster.default_reservation,
            zone=cluster.zone,
            namespace=cluster.namespace,
            status=cluster.status.value,
            created_at=now,
        )
    )


def list_clusters(session: Session) -> list[Cluster]:
    return [_cluster(r) for r in session.scalars(sa.select(ClusterRow).order_by(ClusterRow.name))]


def get_cluster(session: Session, cluster_id: str) -> Cluster | None:
    row = session.get(ClusterRow, cluster_id)
    return _cluster(row) if row else None


def lock_cluster(session: Session, cluster_id: str) -> None:
    """Serialise a decision per cluster until commit. A no-op UPDATE locks the row on MySQL and
    takes SQLite's write lock (SELECT ... FOR UPDATE would be silently ignored there)."""
    session.execute(
        sa.update(ClusterRow)
        .where(ClusterRow.id == cluster_id)
        .values(id=ClusterRow.id)
        .execution_options(synchronize_session=False)
    )


def find_cluster(session: Session, name: str, project: str, location: str) -> Cluster | None:
    row = session.scalar(
        sa.select(ClusterRow).where(
            ClusterRow.name == name, ClusterRow.project == project, ClusterRow.location == location
        )
    )
    return _cluster(row) if row else None


# -- tasks (the upstream job table) -------------------------------------------------------------


def _task(row: JobRow) -> Task:
    """The row as Falcon reads it. Values upstream got wrong do not raise: they are listed in
    ``Task.problems`` (and replaced by neutral values) so intake fails this one task."""
    problems: list[str] = []
    return Task(
        id=row.id,
        actor=_text(row.actor, "actor", problems),
        name=_text(row.name, "name", problems),
        tpu_type=_text(row.tpu_type, "tpu_type", problems),
        spec=_json(row.spec, problems),
        timeout_seconds=_optional_int(row.timeout_seconds, "timeout_seconds", problems),
        status=Status(row.status),
        reason=_known_reason(row.reason),
        message=row.message,
        cluster_id=row.cluster_id,
        node_pool_name=row.node_pool_name,
        k8s_job_name=row.k8s_job_name,
        created_at=_time(row.created_at, "created_at", problems) or UNKNOWN_TIME,
        dispatched_at=_time(row.dispatched_at, "dispatched_at", problems),
        finished_at=_time(row.finished_at, "finished_at", problems),
        aborting_at=_time(row.aborting_at, "aborting_at", problems),
        aborted_at=_time(row.aborted_at, "aborted_at", problems),
        problems=tuple(problems),
    )


UNKNOWN_TIME = datetime(1970, 1, 1, tzinfo=UTC)  # stands in for a timestamp the row got wrong


def _text(value: object, column: str, problems: list[str]) -> str:
    if isinstance(value, str) and value.strip():
        return value
    problems.append(f"{column} is {'empty' if isinstance(value, str) else _shown(value)}, a text is required")
    return "" if value is None else str(value)


def _json(value: object, problems: list[str]) -> Any:
    if isinstance(value, Unreadable):
        problems.append(f"spec is {value.problem}: {value.raw[:80]!r}")
        return None
    return value


def _optional_int(value: object, column: str, problems: list[str]) -> int | None:
    if value is None or (isinstance(value, int) and not isinstance(value, bool)):
        return value
    if isinstance(value, str) and value.strip().lstrip("-").isdigit():
        return int(value)  # an upstream table that keeps numbers as text
    problems.append(f"{column} is {_shown(value)}, an integer is required")
    return None


def _time(value: object, column: str, problems: list[str]) -> datetime | None:
    if value is None or isinstance(value, datetime):
        return value
    shown = value.raw if isinstance(value, Unreadable) else value
    problems.append(f"{column} is {str(shown)[:40]!r}, not a timestamp")
    return None


def _shown(value: object) -> str:
    return "NULL" if value is None else repr(value)[:40]


def _known_reason(value: str | None) -> Reason | None:
    """Reasons Falcon did not write (an upstream value, or NULL) read as None."""
    try:
        return Reason(value) if value is not None else None
    except ValueError:
        return None


def insert_task(
    session: Session,
    *,
    task_id: str,
    actor: str,
    name: str,
    tpu_type: str,
    spec: Any,
    timeout_seconds: int | None,
    now: datetime,
) -> None:
    """What upstream does: a new row, status Pending, reason NULL."""
    session.add(
        JobRow(
            id=task_id,
            actor=actor,
            name=name,
            tpu_type=tpu_type,
            spec=spec,
            timeout_seconds=timeout_seconds,
            status=Status.PENDING.value,
            created_at=now,
            updated_at=now,
        )
    )


def get_task(session: Session, task_id: str) -> Task | None:
    row = session.get(JobRow, task_id, populate_existing=True)
    return _task(row) if row else None


def list_tasks(session: Session, limit: int = 200, statuses: Iterable[Status] = ()) -> list[Task]:
    query = sa.select(JobRow).order_by(JobRow.created_at.desc()).limit(limit)
    wanted = [s.value for s in statuses]
    if wanted:
        query = query.where(JobRow.status.in_(wanted))
    return [_task(r) for r in session.scalars(query)]


def new_tasks(session: Session, limit: int) -> list[Task]:
    """Rows upstream inserted that Falcon has not taken in yet (Pending with no reason)."""
    query = (
        sa.select(JobRow)
        .where(JobRow.status == Status.PENDING.value, JobRow.reason.is_(None))
        .order_by(JobRow.created_at, JobRow.id)
        .limit(limit)
    )
    return [_task(r) for r in session.scalars(query)]


def update_task(
    session: Session, task_id: str, expect: Iterable[Status], now: datetime, **values: Any
) -> bool:
    """Compare-and-set on the row's status; True if the row was in one of ``expect`` and changed.

    Every status/reason Falcon writes is checked against the state machine first (design §9):
    an illegal write is a bug in Falcon and raises before it reaches the row."""
    expect = list(expect)
    _check_write(expect, values)
    values = {k: (v.value if isinstance(v, Status | Reason) else v) for k, v in values.items()}
    result = session.execute(
        sa.update(JobRow)
        .where(JobRow.id == task_id, JobRow.status.in_([s.value for s in expect]))
        .values(updated_at=now, **values)
        .execution_options(synchronize_session=False)
    )
    return bool(getattr(result, "rowcount", 0))


def _check_write(expect: list[Status], values: dict[str, Any]) -> None:
    if "status" not in values and "reason" not in values:
        return
    for current in expect:
        check_transition(current, values.get("status", current), values.get("reason"))


def request_abort(session: Session, task_id: str, now: datetime) -> bool:
    """Upstream's write (the CLI plays upstream locally): Aborting with aborting_at."""
    result = session.execute(
        sa.update(JobRow)
        .where(JobRow.id == task_id, JobRow.status.in_([Status.PENDING.value, Status.RUNNING.value]))
        .values(status=Status.ABORTING.value, aborting_at=now, updated_at=now)
        .execution_options(synchronize_session=False)
    )
    return bool(getattr(result, "rowcount", 0))


MESSAGE_BATCH = 200  # rows per UPDATE ... CASE statement on a server database


def set_messages(session: Session, messages: dict[str, str], now: datetime) -> int:
    """Write Waiting messages; only rows still Pending/Waiting are touched. Returns rows given.

    On a server (MySQL) one UPDATE ... CASE per batch saves a round trip per row (PyMySQL's
    executemany sends UPDATEs one by one); SQLite has no round trips but evaluates CASE per row
    against every branch, so there a per-row executemany is the fast path."""
    job = cast(sa.Table, JobRow.__table__)
    waiting_row = sa.and_(job.c.status == Status.PENDING.value, job.c.reason == Reason.WAITING.value)
    if session.get_bind().dialect.name == "sqlite":
        rows = [{"b_id": task_id, "b_message": text} for task_id, text in messages.items()]
        if rows:
            statement = sa.update(job).where(job.c.id == sa.bindparam("b_id"), waiting_row)
            session.execute(statement.values(message=sa.bindparam("b_message"), updated_at=now), rows)
        return len(rows)
    items = list(messages.items())
    for start in range(0, len(items), MESSAGE_BATCH):
        batch = dict(items[start : start + MESSAGE_BATCH])
        session.execute(
            sa.update(job)
            .where(job.c.id.in_(list(batch)), waiting_row)
            .values(message=sa.case(batch, value=job.c.id), updated_at=now)
        )
    return len(items)


def aborting_tasks(session: Session) -> list[tuple[Task, str | None]]:
    """Rows upstream set to Aborting, with Falcon's phase for them (None: never taken in)."""
    query = (
        sa.select(JobRow, TaskProgressRow.phase)
        .outerjoin(TaskProgressRow, TaskProgressRow.task_id == JobRow.id)
        .where(JobRow.status == Status.ABORTING.value)
    )
    return [(_task(row), phase) for row, phase in session.execute(query)]


# -- Falcon's progress rows ----------------------------------------------------------------------


@dataclass(frozen=True)
class Progress:
    task_id: str
    phase: str
    cluster_id: str | None
    topology: str | None
    lease_id: str | None
    attempt: int
    acquire_run_id: str | None
    release_run_id: str | None
    outcome_status: str | None
    outcome_reason: str | None
    outcome_message: str | None

    @property
    def queue(self) -> QueueKey | None:
        if self.cluster_id is None or self.topology is None:
            return None
        return QueueKey(self.cluster_id, self.topology)


def _progress(row: TaskProgressRow) -> Progress:
    return Progress(
        task_id=row.task_id,
        phase=row.phase,
        cluster_id=row.cluster_id,
        topology=row.topology,
        lease_id=row.lease_id,
        attempt=row.attempt,
        acquire_run_id=row.acquire_run_id,
        release_run_id=row.release_run_id,
        outcome_status=row.outcome_status,
        outcome_reason=row.outcome_reason,
        outcome_message=row.outcome_message,
    )


def start_progress(
    session: Session, task_id: str, phase: str, now: datetime, queue: QueueKey | None = None
) -> None:
    session.add(
        TaskProgressRow(
            task_id=task_id,
            phase=phase,
            cluster_id=queue.cluster_id if queue else None,
            topology=queue.topology if queue else None,
            attempt=0,
            updated_at=now,
        )
    )


def get_progress(session: Session, task_id: str) -> Progress | None:
    row = session.get(TaskProgressRow, task_id, populate_existing=True)
    return _progress(row) if row else None


def progress_in(session: Session, phases: Sequence[str]) -> list[Progress]:
    query = sa.select(TaskProgressRow).where(TaskProgressRow.phase.in_(phases))
    return [_progress(r) for r in session.scalars(query)]


# Pass as a value to update_progress to copy the row's own acquire run id (a run releasing inline).
ACQUIRE_RUN = TaskProgressRow.acquire_run_id


def mark_done(session: Session, task_id: str, now: datetime) -> None:
    """The task's terminal status is written: its progress row (created if it had none) says so."""
    if not update_progress(session, task_id, now, phase=Phase.DONE, lease_id=None):
        start_progress(session, task_id, Phase.DONE, now)


def update_progress(
    session: Session, task_id: str, now: datetime, expect_phase: Iterable[str] | None = None, **values: Any
) -> bool:
    query = sa.update(TaskProgressRow).where(TaskProgressRow.task_id == task_id)
    if expect_phase is not None:
        query = query.where(TaskProgressRow.phase.in_(list(expect_phase)))
    result = session.execute(
        query.values(updated_at=now, **values).execution_options(synchronize_session=False)
    )
    return bool(getattr(result, "rowcount", 0))


@dataclass(frozen=True)
class WaitingRow:
    queue: QueueKey
    task: WaitingTask
    message: str | None


def waiting_rows(session: Session) -> list[WaitingRow]:
    """Every waiting task with its queue and current message: one indexed query."""
    query = (
        sa.select(
            TaskProgressRow.cluster_id,
            TaskProgressRow.topology,
            JobRow.id,
            JobRow.actor,
            JobRow.name,
            JobRow.created_at,
            JobRow.message,
        )
        .join(JobRow, JobRow.id == TaskProgressRow.task_id)
        .where(TaskProgressRow.phase == Phase.WAITING, JobRow.status == Status.PENDING.value)
    )
    return [
        WaitingRow(
            QueueKey(cluster_id or "", topology or ""), WaitingTask(task_id, actor, name, created), message
        )
        for cluster_id, topology, task_id, actor, name, created, message in session.execute(query)
    ]


def waiting_count(session: Session, queue: QueueKey) -> int:
    """Tasks waiting in one queue: what keep-or-delete asks when a task ends."""
    query = (
        sa.select(sa.func.count())
        .select_from(TaskProgressRow)
        .join(JobRow, JobRow.id == TaskProgressRow.task_id)
        .where(
            TaskProgressRow.cluster_id == queue.cluster_id,
            TaskProgressRow.topology == queue.topology,
            TaskProgressRow.phase == Phase.WAITING,
            JobRow.status == Status.PENDING.value,
        )
    )
    return int(session.scalar(query) or 0)


def queue_lengths(session: Session) -> dict[QueueKey, int]:
    """Tasks waiting or acquiring, per queue: the load figure cluster choice compares."""
    query = (
        sa.select(TaskProgressRow.cluster_id, TaskProgressRow.topology, sa.func.count())
        .where(TaskProgressRow.phase.in_([Phase.WAITING, Phase.ACQUIRING]))
        .group_by(TaskProgressRow.cluster_id, TaskProgressRow.topology)
    )
    return {QueueKey(c or "", t or ""): n for c, t, n in session.execute(query)}


# -- queue rotation ------------------------------------------------------------------------------


def last_actors(session: Session) -> dict[QueueKey, str]:
    rows = session.scalars(sa.select(QueueRotationRow))
    return {QueueKey(r.cluster_id, r.topology): r.last_actor for r in rows}


def record_pick(session: Session, queue: QueueKey, actor: str, now: datetime) -> None:
    row = session.get(QueueRotationRow, (queue.cluster_id, queue.topology))
    if row is None:
        session.add(
            QueueRotationRow(
                cluster_id=queue.cluster_id, topology=queue.topology, last_actor=actor, updated_at=now
            )
        )
    else:
        row.last_actor = actor
        row.updated_at = now


# -- node pools ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class NodePool:
    cluster_id: str
    name: str
    topology: str
    machine_type: str
    mode: str
    reservation: str | None
    state: str
    holder_task_id: str | None
    idle_since: datetime | None


def _pool(row: NodePoolRow) -> NodePool:
    return NodePool(
        cluster_id=row.cluster_id,
        name=row.name,
        topology=row.topology,
        machine_type=row.machine_type,
        mode=row.mode,
        reservation=row.reservation,
        state=row.state,
        holder_task_id=row.holder_task_id,
        idle_since=row.idle_since,
    )


def get_pool(session: Session, cluster_id: str, name: str) -> NodePool | None:
    row = session.get(NodePoolRow, (cluster_id, name), populate_existing=True)
    return _pool(row) if row else None


def pools_in(session: Session, states: Sequence[str]) -> list[NodePool]:
    query = sa.select(NodePoolRow).where(NodePoolRow.state.in_(states)).order_by(NodePoolRow.created_at)
    return [_pool(r) for r in session.scalars(query)]


def write_ahead_pool(session: Session, pool: NodePool, now: datetime) -> None:
    """Record a pool before asking GKE for it, so a crash can never leave an untracked pool."""
    if session.get(NodePoolRow, (pool.cluster_id, pool.name)) is not None:
        return
    session.add(
        NodePoolRow(
            cluster_id=pool.cluster_id,
            name=pool.name,
            topology=pool.topology,
            machine_type=pool.machine_type,
            mode=pool.mode,
            reservation=pool.reservation,
            state=pool.state,
            holder_task_id=pool.holder_task_id,
            idle_since=None,
            created_at=now,
            updated_at=now,
        )
    )


def update_pool(
    session: Session,
    cluster_id: str,
    name: str,
    now: datetime,
    expect_state: Iterable[str] | None = None,
    expect_holder: str | None = None,
    **values: Any,
) -> bool:
    query = sa.update(NodePoolRow).where(NodePoolRow.cluster_id == cluster_id, NodePoolRow.name == name)
    if expect_state is not None:
        query = query.where(NodePoolRow.state.in_(list(expect_state)))
    if expect_holder is not None:
        query = query.where(NodePoolRow.holder_task_id == expect_holder)
    result = session.execute(
        query.values(updated_at=now, **values).execution_options(synchronize_session=False)
    )
    return bool(getattr(result, "rowcount", 0))


def idle_count(session: Session, queue: QueueKey) -> int:
    query = sa.select(sa.func.count()).where(
        NodePoolRow.cluster_id == queue.cluster_id,
        NodePoolRow.topology == queue.topology,
        NodePoolRow.state == PoolState.IDLE,
    )
    return int(session.scalar(query) or 0)


def claim_idle_pool(session: Session, queue: QueueKey, task_id: str, now: datetime) -> NodePool | None:
    """Hand the oldest idle pool of this queue to ``task_id``; None if there is none to take."""
    for row in session.scalars(
        sa.select(NodePoolRow)
        .where(
            NodePoolRow.cluster_id == queue.cluster_id,
            NodePoolRow.topology == queue.topology,
            NodePoolRow.state == PoolState.IDLE,
        )
        .order_by(NodePoolRow.idle_since)
    ):
        if update_pool(
            session,
            row.cluster_id,
            row.name,
            now,
            expect_state=[PoolState.IDLE],
            state=PoolState.IN_USE,
            holder_task_id=task_id,
            idle_since=None,
        ):
            return get_pool(session, row.cluster_id, row.name)
    return None
