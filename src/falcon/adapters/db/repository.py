"""Reads and writes of Falcon's tables. Every function takes the session; none commits.

Writes are named for what they mean (``mark_running``, ``finish``, ``keep_pool``...) and take
typed arguments. Writes to the upstream ``job`` row are compare-and-set on its current status:
upstream may set Aborting at any moment, and a write that finds the row changed underneath it
does nothing and reports False instead of losing the abort. Every status and phase written is
checked against the domain's transition tables first (design §9).
"""

from __future__ import annotations

import functools
import itertools
import json
import re
from collections import Counter
from collections.abc import Collection, Iterable, Sequence
from datetime import UTC, datetime
from typing import Any, NamedTuple, TypeVarTuple, cast

import sqlalchemy as sa
from sqlalchemy.dialects.mysql import insert as mysql_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from sqlalchemy.orm import Session

from falcon.adapters.db.orm import (
    ClusterRow,
    JobRow,
    NodePoolRow,
    QueueRotationRow,
    RunOwnerRow,
    TaskProgressRow,
    Unreadable,
    WarmRuleRow,
)
from falcon.domain.explain import Acquirer, PoolFacts
from falcon.domain.lifecycle import (
    LIVE_POOL_STATES,
    DeleteAsk,
    NodePool,
    Outcome,
    Phase,
    PoolState,
    Progress,
    RoundSnapshot,
    WaitingRow,
    check_phase_move,
)
from falcon.domain.model import (
    Cluster,
    ClusterStatus,
    ProvisioningMode,
    QueueKey,
    RunningChanges,
    RunningRead,
    RunningTask,
    Task,
)
from falcon.domain.pool_economics import BusyPools, QueueObservations, fleet_arrival_gaps
from falcon.domain.scheduling import WaitingTask, pick_next, pick_order
from falcon.domain.status import Reason, Status, check_transition
from falcon.domain.warm_pools import WarmRule

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
    digits = value.strip().lstrip("-") if isinstance(value, str) else ""
    if digits.isascii() and digits.isdigit() and len(digits) <= 18:  # not "²", nor 5,000 digits
        return int(str(value))  # an upstream table that keeps numbers as text
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


_KEEP: Any = object()  # "leave this column as it is" in a status write


def _write_task(
    session: Session,
    task_id: str,
    expect: Sequence[Status],
    now: datetime,
    values: dict[Any, Any],
    status: Status | None = None,
    reason: Reason | None = _KEEP,
    expect_reason: Reason | None = _KEEP,
) -> bool:
    """Compare-and-set on the row's status (and ``expect_reason``, if given: None for a row upstream
    inserted that nobody has taken in); True if the row was in one of ``expect`` and changed.

    A status or reason written is checked against the state machine first (design §9): an
    illegal write is a bug in Falcon and raises before it reaches the row."""
    if status is not None or reason is not _KEEP:
        for current in expect:
            check_transition(current, status or current, None if reason is _KEEP else reason)
    if status is not None:
        values[JobRow.status] = status.value
    if reason is not _KEEP:
        values[JobRow.reason] = reason.value if reason else None
    values[JobRow.updated_at] = now
    query = sa.update(JobRow).where(JobRow.id == task_id, JobRow.status.in_([s.value for s in expect]))
    if expect_reason is not _KEEP:
        query = query.where(
            JobRow.reason == expect_reason.value if expect_reason else JobRow.reason.is_(None)
        )
    result = session.execute(query.values(values).execution_options(synchronize_session=False))
    return bool(getattr(result, "rowcount", 0))


def note_pending(
    session: Session,
    task_id: str,
    message: str,
    now: datetime,
    reason: Reason | None = None,
    node_pool_name: str | None = None,
) -> bool:
    """A Pending row's Message, with its phase Reason and node pool when they change."""
    values: dict[Any, Any] = {JobRow.message: message}
    if node_pool_name is not None:
        values[JobRow.node_pool_name] = node_pool_name
    return _write_task(
        session, task_id, [Status.PENDING], now, values, Status.PENDING if reason else None, reason or _KEEP
    )


def mark_dispatched(
    session: Session, task_id: str, job_name: str, job_uid: str, message: str, now: datetime
) -> bool:
    """The Job is submitted: its name and uid, and dispatched_at (kept from an earlier attempt),
    from which the timeout runs. False if the row is no longer Pending."""
    values: dict[Any, Any] = {
        JobRow.k8s_job_name: job_name,
        JobRow.job_uid: job_uid,
        JobRow.message: message,
        JobRow.dispatched_at: sa.func.coalesce(JobRow.dispatched_at, now),
    }
    return _write_task(session, task_id, [Status.PENDING], now, values)


def finish(session: Session, task_id: str, outcome: Outcome, expect: Sequence[Status], now: datetime) -> bool:
    """The terminal write: status, reason, message, finished_at (aborted_at for an abort), and the
    progress row marked done, in one transaction. False if the row was not in ``expect``."""
    values: dict[Any, Any] = {JobRow.message: outcome.message, JobRow.finished_at: now}
    if outcome.status is Status.ABORTED:
        values[JobRow.aborted_at] = now
    moved = _write_task(session, task_id, expect, now, values, outcome.status, outcome.reason)
    if moved:
        mark_done(session, task_id, now)
    return moved


def queue_task(session: Session, task_id: str, queue: QueueKey, now: datetime) -> bool:
    """Intake: the row waits in ``queue`` (Pending/Waiting on its cluster) with a progress row.

    Only a row nobody has taken in (reason NULL) moves: of two dispatchers reading the same new
    row, the second finds it taken and writes nothing, whatever the first did with it since."""
    values: dict[Any, Any] = {JobRow.cluster_id: queue.cluster_id, JobRow.message: ""}
    if not _write_task(
        session, task_id, [Status.PENDING], now, values, Status.PENDING, Reason.WAITING, expect_reason=None
    ):
        return False
    check_phase_move(None, Phase.WAITING)
    session.add(
        TaskProgressRow(
            task_id=task_id,
            phase=Phase.WAITING.value,
            cluster_id=queue.cluster_id,
            topology=queue.topology,
            attempt=0,
            queued_at=now,
            updated_at=now,
        )
    )
    return True


def start_acquiring(
    session: Session, task_id: str, queue: QueueKey, actor: str, lease_id: str, message: str, now: datetime
) -> int | None:
    """The dispatcher picked the waiting task and holds its queue's slot: Pending/Provisioning,
    phase acquiring with the lease, a new attempt and acquiring_at (the pick, kept if ever
    written again), and the queue's rotation. Returns the
    attempt; None if the task is no longer waiting (aborted, or picked already) or is not the
    queue's next by the pick rule over the database's waiting tasks and rotation.

    The dispatcher chose from its in-memory book, which another dispatcher's intake, picks or
    aborts leave stale; the database decides. Only the holder of the queue's slot (a Prefect limit
    of 1) gets here for this queue, so no other pick lands between this check and the write, and
    the write itself is a compare-and-set on Pending/Waiting: one claim per task, whoever races."""
    chosen = _next_in_queue(session, queue)
    if chosen is None or chosen[0] != task_id:
        return None
    values: dict[Any, Any] = {JobRow.message: message}
    if not _write_task(
        session, task_id, [Status.PENDING], now, values, Status.PENDING, Reason.PROVISIONING, Reason.WAITING
    ):
        return None
    attempt = chosen[1] + 1
    _move_progress(
        session,
        task_id,
        [Phase.WAITING],
        Phase.ACQUIRING,
        now,
        {
            TaskProgressRow.lease_id: lease_id,
            TaskProgressRow.attempt: attempt,
            TaskProgressRow.acquire_run_id: None,
            TaskProgressRow.acquiring_at: sa.func.coalesce(TaskProgressRow.acquiring_at, now),
        },
    )
    record_pick(session, queue, actor, now)
    return attempt


def _next_in_queue(session: Session, queue: QueueKey) -> tuple[str, int] | None:
    """The task the §4 pick rule gives the queue's slot now, from the database alone, and its
    attempts so far.

    The rule looks only at each actor's earliest task, so only those are read: every actor's
    tasks submitted at its earliest time (ties are broken by task id in Python, as the book does,
    not by the database's collation), with the queue's last actor, in one statement: a pick's
    record is a handful of round trips, each a wait for the interpreter lock in a busy process."""
    rank = sa.func.rank().over(partition_by=JobRow.actor, order_by=JobRow.created_at).label("actor_rank")
    ranked = (
        sa.select(JobRow.id, JobRow.actor, JobRow.name, JobRow.created_at, TaskProgressRow.attempt, rank)
        .join(TaskProgressRow, TaskProgressRow.task_id == JobRow.id)
        .where(*_waiting_in(queue))
        .subquery()
    )
    last_actor = (
        sa.select(QueueRotationRow.last_actor)
        .where(QueueRotationRow.cluster_id == queue.cluster_id, QueueRotationRow.topology == queue.topology)
        .scalar_subquery()
        .label("last_actor")
    )
    rows = session.execute(sa.select(ranked, last_actor).where(ranked.c.actor_rank == 1)).all()
    heads = [WaitingTask(row.id, row.actor, row.name, row.created_at) for row in rows]
    chosen = pick_next(heads, rows[0].last_actor if rows else None)
    if chosen is None:
        return None
    return chosen.task_id, next(row.attempt or 0 for row in rows if row.id == chosen.task_id)


def mark_running(session: Session, task_id: str, message: str, now: datetime) -> bool:
    """All pods run: Running, phase running, the lease dropped (the run releases the slot), and
    running_at, which ends the acquisition an ETA learns from (the first time is kept)."""
    moved = _write_task(
        session, task_id, [Status.PENDING], now, {JobRow.message: message}, Status.RUNNING, None
    )
    if moved:
        values: dict[Any, Any] = {
            TaskProgressRow.lease_id: None,
            TaskProgressRow.running_at: sa.func.coalesce(TaskProgressRow.running_at, now),
        }
        _move_progress(session, task_id, [Phase.ACQUIRING], Phase.RUNNING, now, values)
    return moved


def start_releasing(
    session: Session,
    task_id: str,
    outcome: Outcome,
    from_phases: Sequence[Phase],
    message: str,
    now: datetime,
    released_inline: bool = False,
) -> bool:
    """Remember the outcome and move to releasing; a Running row says so in its Message.

    ``released_inline``: the acquiring run releases the task itself and is recorded as its
    release run too. False if the task was not in ``from_phases`` (another step got there)."""
    values: dict[Any, Any] = {
        TaskProgressRow.outcome_status: outcome.status.value,
        TaskProgressRow.outcome_reason: outcome.reason.value if outcome.reason else None,
        TaskProgressRow.outcome_message: outcome.message,
        TaskProgressRow.lease_id: None,
    }
    if released_inline:
        values[TaskProgressRow.release_run_id] = TaskProgressRow.acquire_run_id
    moved = _move_progress(session, task_id, from_phases, Phase.RELEASING, now, values)
    if moved:
        _write_task(session, task_id, [Status.RUNNING], now, {JobRow.message: message})
    return moved


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
JSON_TABLE_BATCH = 1000  # rows per UPDATE ... JSON_TABLE statement: about 200 KB of JSON


def set_messages(session: Session, messages: dict[str, str], now: datetime) -> int:
    """Write Waiting messages; only rows still Pending/Waiting are touched. Returns rows given.

    A pick moves every position behind it, so a queue of 500 rewrites 500 messages. MariaDB 10.6+
    joins them in as one JSON_TABLE (10 ms for 500 rows on an idle server); other servers get one
    UPDATE ... CASE per batch (27 ms), which still saves PyMySQL's round trip per row of
    executemany (80 ms); SQLite has no round trips, so there a per-row executemany is the fast path."""
    job = cast(sa.Table, JobRow.__table__)
    waiting_row = sa.and_(job.c.status == Status.PENDING.value, job.c.reason == Reason.WAITING.value)
    if not messages:
        return 0
    if session.get_bind().dialect.name == "sqlite":
        rows = [{"b_id": task_id, "b_message": text} for task_id, text in messages.items()]
        statement = sa.update(job).where(job.c.id == sa.bindparam("b_id"), waiting_row)
        session.execute(statement.values(message=sa.bindparam("b_message"), updated_at=now), rows)
        return len(rows)
    items = list(messages.items())
    if (joined := _json_table_update(session)) is not None:
        for start in range(0, len(items), JSON_TABLE_BATCH):  # a statement stays far below max_allowed_packet
            session.execute(joined, {"rows": json.dumps(items[start : start + JSON_TABLE_BATCH]), "now": now})
        return len(items)
    for start in range(0, len(items), MESSAGE_BATCH):
        batch = dict(items[start : start + MESSAGE_BATCH])
        session.execute(
            sa.update(job)
            .where(job.c.id.in_(list(batch)), waiting_row)
            .values(message=sa.case(batch, value=job.c.id), updated_at=now)
        )
    return len(items)


_JSON_TABLE_UPDATES: dict[str, sa.TextClause | None] = {}  # per database URL


def _json_table_update(session: Session) -> sa.TextClause | None:
    """The JSON_TABLE form of set_messages where the server has it (MariaDB 10.6+), else None.

    The table function's columns take the character set and collation of job.id and job.message:
    comparing job.id with a column of another collation is an error ("Illegal mix of
    collations"), and upstream's table may use any."""
    bind = session.get_bind()
    key = str(bind.engine.url)
    if key not in _JSON_TABLE_UPDATES:
        dialect = bind.dialect
        has_it = getattr(dialect, "is_mariadb", False) and (dialect.server_version_info or ()) >= (10, 6)
        _JSON_TABLE_UPDATES[key] = _json_table_statement(session) if has_it else None
    return _JSON_TABLE_UPDATES[key]


def _json_table_statement(session: Session) -> sa.TextClause | None:
    found = session.execute(
        sa.text(
            "SELECT COLUMN_NAME, CHARACTER_SET_NAME, COLLATION_NAME FROM information_schema.COLUMNS"
            " WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = 'job' AND COLUMN_NAME IN ('id', 'message')"
        )
    ).all()
    columns = {str(name).lower(): (charset, collation) for name, charset, collation in found}
    names = [n for pair in columns.values() for n in pair]
    if set(columns) != {"id", "message"} or not all(
        isinstance(n, str) and _SQL_NAME.fullmatch(n) for n in names
    ):
        return None
    (id_charset, id_collation), (text_charset, text_collation) = columns["id"], columns["message"]
    return sa.text(
        "UPDATE job JOIN JSON_TABLE(:rows, '$[*]' COLUMNS("
        f" task_id VARCHAR(64) CHARACTER SET {id_charset} COLLATE {id_collation} PATH '$[0]',"
        f" text TEXT CHARACTER SET {text_charset} COLLATE {text_collation} PATH '$[1]')) AS given"
        " ON job.id = given.task_id"
        " SET job.message = given.text, job.updated_at = :now"
        f" WHERE job.status = '{Status.PENDING.value}' AND job.reason = '{Reason.WAITING.value}'"
    ).bindparams(sa.bindparam("now", type_=cast(sa.Table, JobRow.__table__).c.updated_at.type))


_SQL_NAME = re.compile(r"[A-Za-z0-9_]+")


def tasks_by_id(session: Session, task_ids: Iterable[str]) -> dict[str, Task]:
    wanted = sorted(set(task_ids))
    if not wanted:
        return {}
    return {row.id: _task(row) for row in session.scalars(sa.select(JobRow).where(JobRow.id.in_(wanted)))}


# -- Falcon's progress rows ----------------------------------------------------------------------


def _progress(row: Any) -> Progress:
    """A progress row as the domain's Progress; ``row`` is the ORM object or a Core row of the
    table's columns (the same names), which costs a fraction of the object to build."""
    queue = QueueKey(row.cluster_id, row.topology) if row.cluster_id and row.topology else None
    outcome = None
    if row.outcome_status:
        reason = Reason(row.outcome_reason) if row.outcome_reason else None
        outcome = Outcome(Status(row.outcome_status), reason, row.outcome_message or "")
    return Progress(
        task_id=row.task_id,
        phase=Phase(row.phase),
        queue=queue,
        lease_id=row.lease_id,
        attempt=row.attempt,
        acquire_run_id=row.acquire_run_id,
        release_run_id=row.release_run_id,
        outcome=outcome,
    )


def get_progress(session: Session, task_id: str) -> Progress | None:
    row = session.get(TaskProgressRow, task_id, populate_existing=True)
    return _progress(row) if row else None


# What Progress holds of a progress row: its times stay unread (a datetime costs PyMySQL more to
# decode than a string, and a round reads a row per running task).
_PROGRESS_COLUMNS = (
    TaskProgressRow.task_id,
    TaskProgressRow.phase,
    TaskProgressRow.cluster_id,
    TaskProgressRow.topology,
    TaskProgressRow.lease_id,
    TaskProgressRow.attempt,
    TaskProgressRow.acquire_run_id,
    TaskProgressRow.release_run_id,
    TaskProgressRow.outcome_status,
    TaskProgressRow.outcome_reason,
    TaskProgressRow.outcome_message,
)


def progress_in(session: Session, phases: Sequence[Phase]) -> list[Progress]:
    query = sa.select(*_PROGRESS_COLUMNS).where(TaskProgressRow.phase.in_([p.value for p in phases]))
    return [_progress(r) for r in session.execute(query)]


_RUNNING_COLUMNS = (
    TaskProgressRow.task_id,
    TaskProgressRow.cluster_id,
    TaskProgressRow.topology,
    JobRow.status.label("job_status"),
    JobRow.k8s_job_name,
    JobRow.dispatched_at,
    JobRow.timeout_seconds,
)


_Columns = TypeVarTuple("_Columns")

# The job rows upstream set to Aborting (few: found on the job table's status index), and the
# queue a progress row names: what several reads below select by.
_IS_ABORTING = JobRow.status == Status.ABORTING.value
_QUEUE = (TaskProgressRow.cluster_id, TaskProgressRow.topology)


def _of_running(query: sa.Select[*_Columns]) -> sa.Select[*_Columns]:
    """``query`` over the tasks in phase running, joined to their job rows: a progress row whose
    job row upstream deleted counts nowhere."""
    return (
        query.select_from(TaskProgressRow)
        .join(JobRow, JobRow.id == TaskProgressRow.task_id)
        .where(TaskProgressRow.phase == Phase.RUNNING.value)
    )


def running_tasks(session: Session, since: datetime | None = None) -> list[RunningTask]:
    """Every task in phase running (``since``: that reached Running since then) with what
    following its Job needs: one query, whatever their number, without the spec and Message (at
    1 000 running tasks, 96-102 → 49-52 ms on MariaDB), read as Core rows of the seven columns it
    needs, not ORM objects."""
    query = _of_running(sa.select(*_RUNNING_COLUMNS))
    if since is not None:
        query = query.where(TaskProgressRow.running_at >= since)
    return [_running_task(row) for row in session.execute(query)]


def _running_task(row: Any) -> RunningTask:
    unread: list[str] = []  # intake checked these columns; a row broken since is followed as it reads
    return RunningTask(
        row.task_id,
        Status(row.job_status),
        row.k8s_job_name,
        _time(row.dispatched_at, "dispatched_at", unread),
        _optional_int(row.timeout_seconds, "timeout_seconds", unread),
        QueueKey(row.cluster_id, row.topology) if row.cluster_id and row.topology else None,
    )


# -- the round's read ----------------------------------------------------------------------------

# What a NodePool is read from (``_pool``).
_POOL_COLUMNS = (
    NodePoolRow.cluster_id,
    NodePoolRow.name,
    NodePoolRow.topology,
    NodePoolRow.machine_type,
    NodePoolRow.mode,
    NodePoolRow.reservation,
    NodePoolRow.state,
    NodePoolRow.holder_task_id,
    NodePoolRow.idle_since,
)

# Every column a part of the round's read may fill (``_part``).
_ROUND_COLUMNS: dict[str, Any] = {
    **{column.name: column for column in _RUNNING_COLUMNS},
    **{column.name: column for column in _PROGRESS_COLUMNS},
    "holds_ready_pool": sa.literal(True),
    **{column.name: column for column in (*_POOL_COLUMNS, NodePoolRow.created_at)},
    "n": sa.literal(0),
}


# Whether a progress row's task holds a ready pool: a taker without a pool if it acquires.
_HOLDS_READY_POOL = (
    sa.exists()
    .where(NodePoolRow.holder_task_id == TaskProgressRow.task_id, NodePoolRow.state == PoolState.IN_USE.value)
    .label("holds_ready_pool")
)


def _part(shape: dict[str, Any], kind: str, *columns: Any) -> sa.Select[Any]:
    """One part of a read made as a UNION ALL: it has every column of ``shape`` (the name its
    rows are read by: the column whose type it has), NULL where ``columns`` has none, and its
    ``kind``. The first part's types decode every row, so each NULL is given its column's."""
    given = {column.name: column for column in columns}
    return sa.select(
        sa.literal(kind).label("kind"),
        *(
            given[name].label(name) if name in given else sa.type_coerce(sa.null(), source.type).label(name)
            for name, source in shape.items()
        ),
    )


@functools.cache
def _round_statement(
    every_running: bool, rechecks: bool, phases: tuple[Phase, ...], pool_states: tuple[PoolState, ...]
) -> sa.CompoundSelect[Any]:
    """``round_reads``' statement, built once per form (every running task or those since the
    ``since`` parameter; with or without a ``recheck`` part): building its parts took 1.6 ms of
    the interpreter a round, and the cache key of a statement built anew 0.4 ms more; a
    statement kept is keyed once."""
    new = _of_running(_part(_ROUND_COLUMNS, "new", *_RUNNING_COLUMNS))
    recheck = TaskProgressRow.task_id.in_(sa.bindparam("recheck", expanding=True))
    return sa.union_all(
        new if every_running else new.where(TaskProgressRow.running_at >= sa.bindparam("since")),
        *(
            [_of_running(_part(_ROUND_COLUMNS, "rechecked", *_RUNNING_COLUMNS)).where(recheck)]
            if rechecks
            else []
        ),
        _of_running(_part(_ROUND_COLUMNS, "aborting", TaskProgressRow.task_id)).where(_IS_ABORTING),
        _of_running(_part(_ROUND_COLUMNS, "count", sa.func.count().label("n"))),
        _part(_ROUND_COLUMNS, "supervised", *_PROGRESS_COLUMNS, _HOLDS_READY_POOL).where(
            TaskProgressRow.phase.in_([p.value for p in phases])
        ),
        _part(_ROUND_COLUMNS, "pool", *_POOL_COLUMNS, NodePoolRow.created_at).where(
            NodePoolRow.state.in_([s.value for s in pool_states])
        ),
    )


def round_reads(
    session: Session, running: RunningRead, phases: Sequence[Phase], pool_states: Sequence[PoolState]
) -> RoundSnapshot:
    """What every reconcile round reads, in one statement, a UNION ALL of its parts, each on its
    own index: under load each round trip, not the reads, was most of their time.

    - The tasks that reached Running at ``running.since`` or later (its running_at, on the
      progress rows' phase index; ``None``: every running task), those of ``running.recheck``
      still running (by id), the running ones upstream set to Aborting (few: found on the job
      table's status index), and how many run in all (an aggregate).
    - The progress rows in ``phases`` (ACQUIRING among them), each with whether its task holds
      a ready pool: the takers without one are counted among them.
    - The node pools in ``pool_states``, oldest record first."""
    if Phase.ACQUIRING not in phases:
        raise ValueError("the takers are acquiring tasks: ACQUIRING must be among the phases")
    parameters: dict[str, Any] = {}
    if running.since is not None:  # else every running task is read, those to recheck among them
        parameters["since"] = running.since
        if running.recheck:
            parameters["recheck"] = list(running.recheck)
    statement = _round_statement(
        "since" not in parameters, "recheck" in parameters, tuple(phases), tuple(pool_states)
    )
    rows = session.execute(statement, parameters).all()
    by_kind: dict[str, list[Any]] = {
        kind: [] for kind in ("new", "rechecked", "aborting", "count", "supervised", "pool")
    }
    for row in rows:
        by_kind[row.kind].append(row)
    pools = sorted(by_kind["pool"], key=lambda row: row.created_at)  # a UNION keeps no order
    return RoundSnapshot(
        running=RunningChanges(
            new=[_running_task(row) for row in by_kind["new"]],
            aborting={row.task_id for row in by_kind["aborting"]},
            count=sum(int(row.n) for row in by_kind["count"]),
            rechecked=[_running_task(row) for row in by_kind["rechecked"]],
        ),
        supervised=[_progress(row) for row in by_kind["supervised"]],
        takers_without_pool=_takers(by_kind["supervised"]),
        pools=[_pool(row) for row in pools],
    )


def _move_progress(
    session: Session,
    task_id: str,
    from_phases: Sequence[Phase],
    to: Phase,
    now: datetime,
    values: dict[Any, Any] | None = None,
) -> bool:
    """Compare-and-set on the progress row's phase, checked against the phase moves first."""
    for current in from_phases:
        check_phase_move(current, to)
    result = session.execute(
        sa.update(TaskProgressRow)
        .where(TaskProgressRow.task_id == task_id, TaskProgressRow.phase.in_([p.value for p in from_phases]))
        .values({**(values or {}), TaskProgressRow.phase: to.value, TaskProgressRow.updated_at: now})
        .execution_options(synchronize_session=False)
    )
    return bool(getattr(result, "rowcount", 0))


def mark_done(session: Session, task_id: str, now: datetime) -> None:
    """The task's terminal status is written: its progress row (created if it had none) says so."""
    ending = [Phase.WAITING, Phase.RELEASING, Phase.DONE]
    if _move_progress(session, task_id, ending, Phase.DONE, now, {TaskProgressRow.lease_id: None}):
        return
    row = session.get(TaskProgressRow, task_id)
    check_phase_move(Phase(row.phase) if row else None, Phase.DONE)  # raises for a task mid-way
    session.add(TaskProgressRow(task_id=task_id, phase=Phase.DONE.value, attempt=0, updated_at=now))


def set_acquire_run(
    session: Session,
    task_id: str,
    run_id: str,
    now: datetime,
    lease_id: str | None = None,
    attempt: int | None = None,
) -> bool:
    """Record the lifecycle run started for an acquiring task (a restart also brings its new
    lease and attempt)."""
    values: dict[Any, Any] = {TaskProgressRow.acquire_run_id: run_id}
    if attempt is not None:
        values.update({TaskProgressRow.lease_id: lease_id, TaskProgressRow.attempt: attempt})
    return _move_progress(session, task_id, [Phase.ACQUIRING], Phase.ACQUIRING, now, values)


def set_release_run(session: Session, task_id: str, run_id: str, now: datetime) -> bool:
    values: dict[Any, Any] = {TaskProgressRow.release_run_id: run_id}
    return _move_progress(session, task_id, [Phase.RELEASING], Phase.RELEASING, now, values)


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
        .where(TaskProgressRow.phase == Phase.WAITING.value, JobRow.status == Status.PENDING.value)
    )
    return [
        WaitingRow(
            QueueKey(cluster_id or "", topology or ""), WaitingTask(task_id, actor, name, created), message
        )
        for cluster_id, topology, task_id, actor, name, created, message in session.execute(query)
    ]


def waiting_count(session: Session, queue: QueueKey, up_to: int) -> int:
    """Tasks waiting in one queue, counted up to ``up_to``: what keep-or-delete asks when a task
    ends, which only needs to know whether they outnumber the idle pools. Counting a long queue
    in full read every waiting row (and its job row), at every task's end."""
    waiting = (
        sa.select(TaskProgressRow.task_id)
        .join(JobRow, JobRow.id == TaskProgressRow.task_id)
        .where(*_waiting_in(queue))
        .limit(up_to)
        .subquery()
    )
    return int(session.scalar(sa.select(sa.func.count()).select_from(waiting)) or 0)


def takers_without_pool(session: Session) -> dict[QueueKey, int]:
    """Acquiring tasks that hold no ready pool, per queue: each would take an idle pool of its
    queue at once (at provision, or by hand-over while its own is being created)."""
    query = sa.select(TaskProgressRow.phase, *_QUEUE, _HOLDS_READY_POOL).where(
        TaskProgressRow.phase == Phase.ACQUIRING.value
    )
    return _takers(session.execute(query))


def _takers(progress_rows: Iterable[Any]) -> dict[QueueKey, int]:
    """The takers without a pool among progress rows read with ``_HOLDS_READY_POOL``."""
    return dict(
        Counter(
            _queue_of(row)
            for row in progress_rows
            if row.phase == Phase.ACQUIRING.value and not row.holds_ready_pool
        )
    )


def _waiting_in(queue: QueueKey) -> tuple[sa.ColumnElement[bool], ...]:
    """The rows of tasks waiting in ``queue`` (a join of the job and progress tables)."""
    return (
        TaskProgressRow.cluster_id == queue.cluster_id,
        TaskProgressRow.topology == queue.topology,
        TaskProgressRow.phase == Phase.WAITING.value,
        JobRow.status == Status.PENDING.value,
    )


def queue_lengths(session: Session) -> dict[QueueKey, int]:
    """Tasks waiting or acquiring, per queue: the load figure cluster choice compares."""
    query = (
        sa.select(*_QUEUE, sa.func.count())
        .where(TaskProgressRow.phase.in_([Phase.WAITING.value, Phase.ACQUIRING.value]))
        .group_by(*_QUEUE)
    )
    return {QueueKey(c or "", t or ""): n for c, t, n in session.execute(query)}


def reservation_pool_counts(session: Session, states: Sequence[PoolState]) -> dict[QueueKey, int]:
    """Falcon's pools in ``states`` on a reservation, per (cluster, topology): what intake needs of
    them to estimate each reservation's room (``domain.lifecycle.reservation_pool_counts``)."""
    query = (
        sa.select(NodePoolRow.cluster_id, NodePoolRow.topology, sa.func.count())
        .where(
            NodePoolRow.state.in_([s.value for s in states]),
            NodePoolRow.mode == ProvisioningMode.RESERVATION.value,
        )
        .group_by(NodePoolRow.cluster_id, NodePoolRow.topology)
    )
    return {QueueKey(c, t): n for c, t, n in session.execute(query)}


# -- the tick's read -----------------------------------------------------------------------------


class TickRows(NamedTuple):
    """What every dispatcher tick reads before it decides anything (the Snapshot's steady part)."""

    new: list[Task]  # rows upstream inserted that Falcon has not taken in yet, oldest first
    aborting: list[tuple[Task, Phase | None]]  # set to Aborting, with Falcon's phase (None: not taken in)
    acquiring_queues: set[QueueKey]  # queues whose slot a task holds in the database
    waiting_counts: dict[QueueKey, int] | None  # only when asked: see ``_waiting_counted``


# Every column a part of the tick's read may fill (``_part``).
_TICK_COLUMNS: dict[str, Any] = {
    "task_id": JobRow.id,
    "phase": TaskProgressRow.phase,
    "cluster_id": TaskProgressRow.cluster_id,
    "topology": TaskProgressRow.topology,
    "n": sa.literal(0),
}


@functools.cache
def _tick_statement(intake_batch: int, with_counts: bool) -> sa.CompoundSelect[Any]:
    """``tick_reads``' statement, built once per form, as ``_round_statement``."""
    oldest = (  # a part of a UNION cannot be ordered and limited on SQLite: a subquery can
        sa.select(JobRow.id)
        .where(JobRow.status == Status.PENDING.value, JobRow.reason.is_(None))
        .order_by(JobRow.created_at, JobRow.id)
        .limit(intake_batch)
        .subquery()
    )
    parts = [
        _part(_TICK_COLUMNS, "new", oldest.c.id.label("task_id")),
        _part(_TICK_COLUMNS, "aborting", JobRow.id.label("task_id"), TaskProgressRow.phase)
        .join_from(JobRow, TaskProgressRow, TaskProgressRow.task_id == JobRow.id, isouter=True)
        .where(_IS_ABORTING),
        _part(_TICK_COLUMNS, "acquiring", *_QUEUE)
        .where(TaskProgressRow.phase == Phase.ACQUIRING.value)
        .distinct(),
        *(_waiting_counted() if with_counts else []),
    ]
    return sa.union_all(*parts)


def tick_reads(session: Session, intake_batch: int, with_counts: bool) -> TickRows:
    """The tick's reads in one statement, a UNION ALL of its parts, each on its own index: under
    load each round trip, not the reads, was most of their time (every tick makes them). The
    rows of new and Aborting tasks, which a steady tick has none of, are read after it when there
    are some: with their TEXT columns in the subquery that orders and limits the new rows, MariaDB
    built that subquery on disk (``Created_tmp_disk_tables``, one a read)."""
    rows = session.execute(_tick_statement(intake_batch, with_counts)).all()
    new_ids = [row.task_id for row in rows if row.kind == "new"]
    phases = {row.task_id: row.phase for row in rows if row.kind == "aborting"}
    fresh = tasks_by_id(session, new_ids).values()  # checked again: a server may read committed
    aborting = sa.select(JobRow).where(_IS_ABORTING)  # no list of ids: any number of them
    return TickRows(
        new=sorted(  # a UNION keeps no order
            (t for t in fresh if t.status is Status.PENDING and t.reason is None),
            key=lambda task: (task.created_at, task.id),
        ),
        aborting=[
            (_task(row), Phase(phase) if (phase := phases[row.id]) else None)
            for row in (session.scalars(aborting) if phases else ())
            if row.id in phases
        ],
        acquiring_queues={_queue_of(row) for row in rows if row.kind == "acquiring"},
        waiting_counts=_waiting_counts(rows) if with_counts else None,
    )


def _waiting_counted() -> list[sa.Select[Any]]:
    """Falcon's waiting progress rows per queue, and those of them whose task upstream set to
    Aborting: what the queue book holds is the first less the second, counted on the progress
    rows' (phase, cluster, topology) index alone. Joining every row's job row, as ``waiting_rows``
    does, made this count 30-80 ms of a tick at 10 000 waiting tasks on MariaDB; the Aborting rows
    are few. A waiting row whose job row is neither Pending nor Aborting (deleted or edited by
    hand) is counted here and not read by ``waiting_rows``: the book learns of it when it is
    loaded (``QueueBook.load``)."""
    waiting = TaskProgressRow.phase == Phase.WAITING.value
    aborting = sa.select(JobRow.id).where(_IS_ABORTING)
    counted = sa.func.count().label("n")
    return [
        _part(_TICK_COLUMNS, "waiting", *_QUEUE, counted).where(waiting).group_by(*_QUEUE),
        _part(_TICK_COLUMNS, "waiting_aborting", *_QUEUE, counted)
        .where(waiting, TaskProgressRow.task_id.in_(aborting))
        .group_by(*_QUEUE),
    ]


def _waiting_counts(rows: Sequence[Any]) -> dict[QueueKey, int]:
    counts: Counter[QueueKey] = Counter()
    for row in rows:
        if row.kind in ("waiting", "waiting_aborting"):
            counts[_queue_of(row)] += int(row.n) if row.kind == "waiting" else -int(row.n)
    return {q: n for q, n in counts.items() if n}


def _queue_of(row: Any) -> QueueKey:
    """The queue a row's cluster_id and topology name ("" for a column not set)."""
    return QueueKey(row.cluster_id or "", row.topology or "")


# -- queue rotation ------------------------------------------------------------------------------


def last_actors(session: Session) -> dict[QueueKey, str]:
    rows = session.scalars(sa.select(QueueRotationRow))
    return {QueueKey(r.cluster_id, r.topology): r.last_actor for r in rows}


def record_pick(session: Session, queue: QueueKey, actor: str, now: datetime) -> None:
    """The queue's last actor, for round robin, in one upsert. Picks of several queues are
    recorded at once: an UPDATE that finds no row takes a gap lock on MariaDB, and two queues'
    first picks, each then inserting into the other's gap, deadlocked."""
    table = cast(sa.Table, QueueRotationRow.__table__)
    pick = {"last_actor": actor, "updated_at": now}
    row = {"cluster_id": queue.cluster_id, "topology": queue.topology, **pick}
    if session.get_bind().dialect.name == "sqlite":
        keys = [table.c.cluster_id, table.c.topology]
        session.execute(
            sqlite_insert(table).values(row).on_conflict_do_update(index_elements=keys, set_=pick)
        )
    else:
        session.execute(mysql_insert(table).values(row).on_duplicate_key_update(pick))


# -- node pools ----------------------------------------------------------------------------------


def _pool(row: Any) -> NodePool:
    """A pool row as the domain's NodePool; ``row`` is the ORM object or a Core row of ``_POOL_COLUMNS``."""
    return NodePool(
        cluster_id=row.cluster_id,
        name=row.name,
        topology=row.topology,
        machine_type=row.machine_type,
        mode=ProvisioningMode(row.mode),
        reservation=row.reservation,
        state=PoolState(row.state),
        holder_task_id=row.holder_task_id,
        idle_since=row.idle_since,
    )


def get_pool(session: Session, cluster_id: str, name: str) -> NodePool | None:
    row = session.get(NodePoolRow, (cluster_id, name), populate_existing=True)
    return _pool(row) if row else None


def pools_in(session: Session, states: Sequence[PoolState]) -> list[NodePool]:
    return [_pool(r) for r in session.scalars(_pools_query(states))]


def queue_pools(session: Session, queue: QueueKey, states: Sequence[PoolState]) -> list[NodePool]:
    query = _pools_query(states).where(
        NodePoolRow.cluster_id == queue.cluster_id, NodePoolRow.topology == queue.topology
    )
    return [_pool(r) for r in session.scalars(query)]


def _pools_query(states: Sequence[PoolState]) -> sa.Select[NodePoolRow]:
    """The pools in ``states``, oldest record first."""
    return (
        sa.select(NodePoolRow)
        .where(NodePoolRow.state.in_([s.value for s in states]))
        .order_by(NodePoolRow.created_at)
    )


def held_pool(session: Session, cluster_id: str, task_id: str) -> NodePool | None:
    """The pool a task holds (being created for it, or in use by it), if any."""
    row = session.scalar(
        sa.select(NodePoolRow).where(
            NodePoolRow.cluster_id == cluster_id,
            NodePoolRow.holder_task_id == task_id,
            NodePoolRow.state.in_([PoolState.CREATING.value, PoolState.IN_USE.value]),
        )
    )
    return _pool(row) if row else None


def write_ahead_pool(session: Session, pool: NodePool, now: datetime, warm_rule: str | None = None) -> None:
    """Record a pool before asking GKE for it, so a crash can never leave an untracked pool.
    ``warm_rule``: a warm pool (no holder), created for that tidal rule."""
    if session.get(NodePoolRow, (pool.cluster_id, pool.name)) is not None:
        return
    session.add(
        NodePoolRow(
            cluster_id=pool.cluster_id,
            name=pool.name,
            topology=pool.topology,
            machine_type=pool.machine_type,
            mode=pool.mode.value,
            reservation=pool.reservation,
            state=pool.state.value,
            holder_task_id=pool.holder_task_id,
            idle_since=None,
            warm_rule=warm_rule,
            created_at=now,
            updated_at=now,
        )
    )


def _move_pool(
    session: Session,
    cluster_id: str,
    name: str,
    now: datetime,
    values: dict[Any, Any],
    expect_states: Sequence[PoolState] | None = None,
    expect_holder: str | None = None,
    unheld: bool = False,
    where: sa.ColumnElement[bool] | None = None,
) -> bool:
    query = sa.update(NodePoolRow).where(NodePoolRow.cluster_id == cluster_id, NodePoolRow.name == name)
    if where is not None:
        query = query.where(where)
    if expect_states is not None:
        query = query.where(NodePoolRow.state.in_([s.value for s in expect_states]))
    if expect_holder is not None:
        query = query.where(NodePoolRow.holder_task_id == expect_holder)
    if unheld:
        query = query.where(NodePoolRow.holder_task_id.is_(None))
    result = session.execute(
        query.values({**values, NodePoolRow.updated_at: now}).execution_options(synchronize_session=False)
    )
    return bool(getattr(result, "rowcount", 0))


def pool_ready(session: Session, cluster_id: str, name: str, now: datetime) -> None:
    values: dict[Any, Any] = {NodePoolRow.state: PoolState.IN_USE.value, NodePoolRow.ready_at: now}
    _move_pool(session, cluster_id, name, now, values, [PoolState.CREATING])


def replan_pool(session: Session, pool: NodePool, now: datetime) -> bool:
    """The holder's pool, recorded but not yet created, is to be created in another mode."""
    values: dict[Any, Any] = {NodePoolRow.mode: pool.mode.value, NodePoolRow.reservation: pool.reservation}
    creating = [PoolState.CREATING]
    return _move_pool(session, pool.cluster_id, pool.name, now, values, creating, pool.holder_task_id)


def keep_pool(session: Session, cluster_id: str, name: str, holder: str, now: datetime) -> bool:
    """Delayed deletion: the holder's ready pool goes idle for the queue's next task."""
    values: dict[Any, Any] = {
        NodePoolRow.state: PoolState.IDLE.value,
        NodePoolRow.holder_task_id: None,
        NodePoolRow.idle_since: now,
    }
    return _move_pool(session, cluster_id, name, now, values, [PoolState.IN_USE], holder)


def start_deleting_pool(
    session: Session, cluster_id: str, name: str, holder: str | None, now: datetime
) -> bool:
    """The holder's pool (being created or in use), or with ``holder`` None an idle one, is to go."""
    expect = [PoolState.IN_USE, PoolState.CREATING] if holder is not None else [PoolState.IDLE]
    values: dict[Any, Any] = {
        NodePoolRow.state: PoolState.DELETING.value,
        NodePoolRow.holder_task_id: None,
        NodePoolRow.deleting_at: now,
    }
    return _move_pool(session, cluster_id, name, now, values, expect, holder)


def delete_asked(session: Session, cluster_id: str, name: str, now: datetime) -> DeleteAsk | None:
    """A deletion of the marked pool may reach GKE from ``now`` on; None when it is not marked.
    The row is written first, so that the ask it replaces is read under its lock (SQLite takes
    none for a read, and would refuse the write after it if another had come between)."""
    if not _move_pool(session, cluster_id, name, now, {}, [PoolState.DELETING]):
        return None
    key = (NodePoolRow.cluster_id == cluster_id, NodePoolRow.name == name)
    replaced = session.scalar(sa.select(NodePoolRow.delete_asked_at).where(*key))
    _move_pool(session, cluster_id, name, now, {NodePoolRow.delete_asked_at: now})
    return DeleteAsk(now, replaced)


def delete_refused(session: Session, cluster_id: str, name: str, ask: DeleteAsk, now: datetime) -> None:
    """GKE refused ``ask``: the ask it replaced is back, unless another was recorded since."""
    values: dict[Any, Any] = {NodePoolRow.delete_asked_at: ask.replaced}
    mine = NodePoolRow.delete_asked_at == ask.at
    _move_pool(session, cluster_id, name, now, values, [PoolState.DELETING], where=mine)


def unmark_pool(session: Session, cluster_id: str, name: str, now: datetime, asked_before: datetime) -> bool:
    """A pool marked for deletion, which GKE has not begun deleting, is idle for its queue again;
    not while a deletion asked after ``asked_before`` may still reach GKE."""
    values: dict[Any, Any] = {
        NodePoolRow.state: PoolState.IDLE.value,
        NodePoolRow.idle_since: now,
        NodePoolRow.deleting_at: None,
        NodePoolRow.delete_asked_at: None,
        NodePoolRow.last_error: None,
    }
    quiet = sa.or_(NodePoolRow.delete_asked_at.is_(None), NodePoolRow.delete_asked_at <= asked_before)
    return _move_pool(session, cluster_id, name, now, values, [PoolState.DELETING], where=quiet)


def pool_deleted(session: Session, cluster_id: str, name: str, now: datetime) -> None:
    values: dict[Any, Any] = {
        NodePoolRow.state: PoolState.DELETED.value,
        NodePoolRow.last_error: None,
        NodePoolRow.deleted_at: sa.func.coalesce(NodePoolRow.deleted_at, now),  # seen gone again: no move
    }
    _move_pool(session, cluster_id, name, now, values)


def pool_delete_failed(session: Session, cluster_id: str, name: str, error: str, now: datetime) -> None:
    _move_pool(session, cluster_id, name, now, {NodePoolRow.last_error: error})


def idle_count(session: Session, queue: QueueKey) -> int:
    query = sa.select(sa.func.count()).where(
        NodePoolRow.cluster_id == queue.cluster_id,
        NodePoolRow.topology == queue.topology,
        NodePoolRow.state == PoolState.IDLE.value,
    )
    return int(session.scalar(query) or 0)


def deletions_marked_since(session: Session, cluster_id: str, since: datetime) -> int:
    query = sa.select(sa.func.count()).where(
        NodePoolRow.cluster_id == cluster_id,
        NodePoolRow.state == PoolState.DELETING.value,
        NodePoolRow.deleting_at > since,
    )
    return int(session.scalar(query) or 0)


def claim_idle_pool(session: Session, queue: QueueKey, task_id: str, now: datetime) -> NodePool | None:
    """Hand the oldest idle pool of this queue to ``task_id``; None if there is none to take."""
    values: dict[Any, Any] = {
        NodePoolRow.state: PoolState.IN_USE.value,
        NodePoolRow.holder_task_id: task_id,
        NodePoolRow.idle_since: None,
    }
    for row in session.scalars(
        sa.select(NodePoolRow)
        .where(
            NodePoolRow.cluster_id == queue.cluster_id,
            NodePoolRow.topology == queue.topology,
            NodePoolRow.state == PoolState.IDLE.value,
        )
        .order_by(NodePoolRow.idle_since)
    ):
        if _move_pool(session, row.cluster_id, row.name, now, values, [PoolState.IDLE]):
            return get_pool(session, row.cluster_id, row.name)
    return None


def hand_over(
    session: Session, queue: QueueKey, task_id: str, own: str, own_exists: bool, now: datetime
) -> NodePool | None:
    """Give ``task_id``, whose own pool ``own`` is still being created, the queue's oldest idle
    pool, and let go of its own in the same transaction, so that the task never holds two pools
    nor none: its own becomes unheld, followed to ready by a warm run and then kept or deleted as
    any idle pool (``own_exists``: GKE has it), or is closed (GKE never got it). None, and nothing
    changed, when there is no idle pool to take."""
    mine = session.get(NodePoolRow, (queue.cluster_id, own))
    if mine is None or mine.state != PoolState.CREATING.value or mine.holder_task_id != task_id:
        return None  # ready already, or not this task's: nothing to hand over
    taken = claim_idle_pool(session, queue, task_id, now)
    if taken is None:
        return None
    values: dict[Any, Any] = {NodePoolRow.holder_task_id: None}
    if not own_exists:
        values[NodePoolRow.state] = PoolState.DELETED.value
    _move_pool(session, queue.cluster_id, own, now, values, [PoolState.CREATING], task_id)
    return taken


# Queues per statement of queue_observations: SQLite allows 500 members in a compound SELECT.
QUEUES_PER_UNION = 100


def queue_observations(
    session: Session, queues: Collection[QueueKey], gaps: int, creations: int
) -> dict[QueueKey, QueueObservations]:
    """For each queue: the newest ``gaps`` gaps between its arrivals (intake times), its newest
    ``creations`` pool creations (write-ahead record to ready), per mode, and as many deletions of
    pools that were ready (marked for deletion to gone), oldest first. Three statements for any
    number of queues (a reconcile round asks for every queue with an idle pool), each the union
    of one index range per queue."""
    unique = list(dict.fromkeys(queues))  # each queue once
    arrivals: dict[QueueKey, list[datetime]] = {q: [] for q in unique}
    created: dict[QueueKey, list[tuple[datetime, datetime, ProvisioningMode]]] = {q: [] for q in unique}
    deleted: dict[QueueKey, list[tuple[datetime, datetime]]] = {q: [] for q in unique}
    progress, pools = TaskProgressRow, NodePoolRow
    for row in _newest_per_queue(
        session, unique, progress, [progress.queued_at], [progress.queued_at.is_not(None)], gaps + 1
    ):
        arrivals[QueueKey(row[0], row[1])].append(row[2])
    ready = [pools.ready_at.is_not(None)]
    for row in _newest_per_queue(
        session, unique, pools, [pools.ready_at, pools.created_at, pools.mode], ready, creations
    ):
        created[QueueKey(row[0], row[1])].append((row[2], row[3], ProvisioningMode(row[4])))
    gone = [*ready, pools.deleting_at.is_not(None), pools.deleted_at.is_not(None)]
    for row in _newest_per_queue(
        session, unique, pools, [pools.deleted_at, pools.deleting_at], gone, creations
    ):
        deleted[QueueKey(row[0], row[1])].append((row[2], row[3]))
    return {q: _observations(arrivals[q], created[q], deleted[q]) for q in unique}


def _newest_per_queue(
    session: Session,
    queues: list[QueueKey],
    table: type[TaskProgressRow] | type[NodePoolRow],
    columns: list[Any],
    where: list[Any],
    limit: int,
) -> list[tuple[Any, ...]]:
    """(cluster_id, topology, *columns) of each queue's newest ``limit`` rows matching ``where``,
    newest by the first column: one LIMITed subquery per queue, unioned (a LIMIT may not stand in
    a union's member itself, in SQLite and MySQL both), in statements of ``QUEUES_PER_UNION``."""
    rows: list[tuple[Any, ...]] = []
    for start in range(0, len(queues), QUEUES_PER_UNION):
        parts = [
            sa.select(table.cluster_id, table.topology, *columns)
            .where(table.cluster_id == q.cluster_id, table.topology == q.topology, *where)
            .order_by(columns[0].desc())
            .limit(limit)
            .subquery()
            for q in queues[start : start + QUEUES_PER_UNION]
        ]
        rows.extend(tuple(row) for row in session.execute(sa.union_all(*(sa.select(part) for part in parts))))
    return rows


def _observations(
    arrivals: list[datetime],
    created: list[tuple[datetime, datetime, ProvisioningMode]],
    deleted: list[tuple[datetime, datetime]],
) -> QueueObservations:
    """One queue's observations from its newest rows, in any order: arrival times, creations
    (ready, written ahead, mode) and deletions (gone, marked); each kind oldest first."""
    times = sorted(arrivals)
    by_mode: dict[ProvisioningMode, list[float]] = {}
    for ready_at, created_at, mode in sorted(created, key=lambda c: c[0]):
        by_mode.setdefault(mode, []).append((ready_at - created_at).total_seconds())
    return QueueObservations(
        arrival_gaps=tuple((b - a).total_seconds() for a, b in itertools.pairwise(times)),
        creation_seconds={mode: tuple(seconds) for mode, seconds in by_mode.items()},
        deletion_seconds=tuple((gone - marked).total_seconds() for gone, marked in sorted(deleted)),
    )


def busy_pools(session: Session, queue: QueueKey, runs: int, now: datetime) -> BusyPools:
    """The queue's pools in use, by their holders' phase (running: for how long; releasing: its
    Job ended), and how long the queue's and the fleet's newest ``runs`` finished Jobs ran. The
    past runs are read only when a pool is busy: a task about to create asks at every poll."""
    held = session.execute(
        sa.select(TaskProgressRow.phase, TaskProgressRow.running_at)
        .join(NodePoolRow, NodePoolRow.holder_task_id == TaskProgressRow.task_id)
        .where(
            NodePoolRow.cluster_id == queue.cluster_id,
            NodePoolRow.topology == queue.topology,
            NodePoolRow.state == PoolState.IN_USE.value,
        )
    ).all()
    ending = sum(1 for phase, _ in held if phase == Phase.RELEASING.value)
    running_for = tuple(
        (now - running_at).total_seconds() if running_at else 0.0
        for phase, running_at in held
        if phase in (Phase.ACQUIRING.value, Phase.RUNNING.value)
    )
    if not running_for and not ending:
        return BusyPools()
    return BusyPools(running_for, ending, _past_runs(session, queue, runs), _past_runs(session, None, runs))


def _past_runs(session: Session, queue: QueueKey | None, runs: int) -> tuple[float, ...]:
    """Seconds from all pods Running to the terminal status of the newest ``runs`` tasks that got
    there, of ``queue`` (its (queue, running_at) index) or of the fleet ((phase, running_at)),
    oldest first."""
    where = [TaskProgressRow.phase == Phase.DONE.value, TaskProgressRow.running_at.is_not(None)]
    if queue is not None:
        where += [TaskProgressRow.cluster_id == queue.cluster_id, TaskProgressRow.topology == queue.topology]
    rows = session.execute(
        sa.select(TaskProgressRow.running_at, JobRow.finished_at)
        .join(JobRow, JobRow.id == TaskProgressRow.task_id)
        .where(*where, JobRow.finished_at.is_not(None))
        .order_by(TaskProgressRow.running_at.desc())
        .limit(runs)
    ).all()
    return tuple((ended - started).total_seconds() for started, ended in reversed(rows) if started and ended)


def fleet_gaps(session: Session, arrivals: int) -> tuple[float, ...]:
    """The gaps between consecutive arrivals of each queue among the fleet's newest ``arrivals``,
    ordered by the later arrival. The newest arrivals are a span of time, so two arrivals of a
    queue next to each other among them are next to each other in the queue too."""
    newest = session.execute(
        sa.select(TaskProgressRow.cluster_id, TaskProgressRow.topology, TaskProgressRow.queued_at)
        .where(TaskProgressRow.queued_at.is_not(None))
        .order_by(TaskProgressRow.queued_at.desc())
        .limit(arrivals)
    ).all()
    return fleet_arrival_gaps((QueueKey(c, t), at) for c, t, at in newest if c and t and at)


def beat(session: Session, owner: str, now: datetime) -> None:
    """The run owner lives: its heartbeat, written every few seconds."""
    row = session.get(RunOwnerRow, owner)
    if row is None:
        session.add(RunOwnerRow(owner=owner, beat_at=now))
    else:
        row.beat_at = now


def last_beat(session: Session, owner: str) -> datetime | None:
    row = session.get(RunOwnerRow, owner)
    return row.beat_at if row else None


# -- tidal warm pools ----------------------------------------------------------------------------


def _warm_rule(row: WarmRuleRow) -> WarmRule:
    return WarmRule(
        name=row.name,
        queue=QueueKey(row.cluster_id, row.topology),
        cron=row.cron,
        pools=row.pools,
        created_at=row.created_at,
        last_error=row.last_error,
        failed_at=row.failed_at,
        warmed_fire_at=row.warmed_fire_at,
    )


def warm_rules(session: Session) -> list[WarmRule]:
    return [_warm_rule(r) for r in session.scalars(sa.select(WarmRuleRow).order_by(WarmRuleRow.name))]


def add_warm_rule(session: Session, rule: WarmRule) -> bool:
    """A new rule; False if one of that name exists (rules are replaced by remove, then add)."""
    if session.get(WarmRuleRow, rule.name) is not None:
        return False
    session.add(
        WarmRuleRow(
            name=rule.name,
            cluster_id=rule.queue.cluster_id,
            topology=rule.queue.topology,
            cron=rule.cron,
            pools=rule.pools,
            created_at=rule.created_at,
        )
    )
    return True


def remove_warm_rule(session: Session, name: str) -> bool:
    result = session.execute(sa.delete(WarmRuleRow).where(WarmRuleRow.name == name))
    return bool(getattr(result, "rowcount", 0))


def warm_origin(session: Session, cluster_id: str, name: str) -> str | None:
    """The tidal rule a pool was created for; None for a task's pool."""
    return session.scalar(
        sa.select(NodePoolRow.warm_rule).where(NodePoolRow.cluster_id == cluster_id, NodePoolRow.name == name)
    )


def warm_pool_ready(session: Session, cluster_id: str, name: str, now: datetime) -> bool:
    """A warm pool GKE finished creating waits idle for its queue's tasks, as a kept one does."""
    values: dict[Any, Any] = {
        NodePoolRow.state: PoolState.IDLE.value,
        NodePoolRow.idle_since: now,
        NodePoolRow.ready_at: now,
    }
    return _move_pool(session, cluster_id, name, now, values, [PoolState.CREATING], unheld=True)


def warm_pool_failed(session: Session, cluster_id: str, name: str, error: str, now: datetime) -> bool:
    """A warm pool that could not be created is to go; its rule remembers why, and when."""
    values: dict[Any, Any] = {
        NodePoolRow.state: PoolState.DELETING.value,
        NodePoolRow.last_error: error,
        NodePoolRow.deleting_at: now,
    }
    if not _move_pool(session, cluster_id, name, now, values, [PoolState.CREATING], unheld=True):
        return False
    rule = warm_origin(session, cluster_id, name)
    if rule is not None:
        warm_rule_failed(session, rule, error, now)
    return True


def warm_rule_failed(session: Session, name: str, error: str, now: datetime) -> None:
    """A warm creation of the rule failed: ``falcon tidal pool list`` shows why, and its queue
    is not warmed again for a while; then its fire is topped up again."""
    values = {WarmRuleRow.last_error: error, WarmRuleRow.failed_at: now, WarmRuleRow.warmed_fire_at: None}
    session.execute(sa.update(WarmRuleRow).where(WarmRuleRow.name == name).values(values))


def warm_rule_warmed(session: Session, name: str, fire: datetime) -> None:
    """The pools of the rule's fire at ``fire`` are recorded: that fire is not topped up again."""
    session.execute(sa.update(WarmRuleRow).where(WarmRuleRow.name == name).values(warmed_fire_at=fire))


def task_view_rows(session: Session, task_id: str) -> tuple[Task | None, Cluster | None, Progress | None]:
    """A task with its cluster and progress row, in one query."""
    query = (
        sa.select(JobRow, ClusterRow, TaskProgressRow)
        .outerjoin(ClusterRow, ClusterRow.id == JobRow.cluster_id)
        .outerjoin(TaskProgressRow, TaskProgressRow.task_id == JobRow.id)
        .where(JobRow.id == task_id)
        .execution_options(populate_existing=True)
    )
    found = session.execute(query).first()
    if found is None:
        return None, None, None
    job, cluster, progress = found
    return _task(job), _cluster(cluster) if cluster else None, _progress(progress) if progress else None


# -- falcon task why -----------------------------------------------------------------------------


def acquisition_times(session: Session, task_id: str) -> tuple[datetime | None, datetime | None]:
    """When the task was picked and when its pods all ran (None: not yet, or before they were kept)."""
    found = session.execute(
        sa.select(TaskProgressRow.acquiring_at, TaskProgressRow.running_at).where(
            TaskProgressRow.task_id == task_id
        )
    ).first()
    return (found[0], found[1]) if found else (None, None)


def acquisition_history(
    session: Session, queue: QueueKey, limit: int
) -> list[tuple[datetime | None, datetime | None]]:
    """The queue's newest ``limit`` acquisitions that reached Running, as (pick, Running) pairs,
    oldest first: one read of the (queue, running_at) index."""
    rows = session.execute(
        sa.select(TaskProgressRow.acquiring_at, TaskProgressRow.running_at)
        .where(
            TaskProgressRow.cluster_id == queue.cluster_id,
            TaskProgressRow.topology == queue.topology,
            TaskProgressRow.running_at.is_not(None),
            TaskProgressRow.acquiring_at.is_not(None),
        )
        .order_by(TaskProgressRow.running_at.desc())
        .limit(limit)
    ).all()
    return [(picked, running) for picked, running in reversed(rows)]


def waiting_order(session: Session, queue: QueueKey) -> list[WaitingTask]:
    """The queue's waiting tasks in the order the §4 rule picks them, from the database's waiting
    rows and rotation (what the Waiting Messages show, without the dispatcher's book)."""
    rows = session.execute(
        sa.select(JobRow.id, JobRow.actor, JobRow.name, JobRow.created_at)
        .join(TaskProgressRow, TaskProgressRow.task_id == JobRow.id)
        .where(*_waiting_in(queue))
    )
    waiting = [WaitingTask(task_id, actor, name, created) for task_id, actor, name, created in rows]
    rotation = session.get(QueueRotationRow, (queue.cluster_id, queue.topology), populate_existing=True)
    return pick_order(waiting, rotation.last_actor if rotation else None)


def queue_acquirer(session: Session, queue: QueueKey) -> Acquirer | None:
    """The task holding the queue's slot in the database, with the pool it holds; None if none."""
    found = session.execute(
        sa.select(JobRow, TaskProgressRow.acquiring_at)
        .join(TaskProgressRow, TaskProgressRow.task_id == JobRow.id)
        .where(
            TaskProgressRow.cluster_id == queue.cluster_id,
            TaskProgressRow.topology == queue.topology,
            TaskProgressRow.phase == Phase.ACQUIRING.value,
        )
        .order_by(TaskProgressRow.acquiring_at, JobRow.id)
        .limit(1)
    ).first()
    if found is None:
        return None
    job, acquiring_at = found
    task = _task(job)
    pool = session.scalar(
        sa.select(NodePoolRow).where(
            NodePoolRow.cluster_id == queue.cluster_id,
            NodePoolRow.holder_task_id == task.id,
            NodePoolRow.state.in_([PoolState.CREATING.value, PoolState.IN_USE.value]),
        )
    )
    return Acquirer(
        task_id=task.id,
        actor=task.actor,
        name=task.name,
        reason=task.reason,
        message=task.message,
        acquiring_at=acquiring_at,
        dispatched_at=task.dispatched_at,
        pool=_pool_facts(pool) if pool else None,
    )


def _pool_facts(row: NodePoolRow) -> PoolFacts:
    return PoolFacts(
        name=row.name,
        mode=ProvisioningMode(row.mode),
        state=PoolState(row.state),
        reservation=row.reservation,
        created_at=row.created_at,
        ready_at=row.ready_at,
    )


def pools_on_reservation(session: Session, cluster_id: str, reservation: str) -> list[str]:
    """The topology of each live pool Falcon has on the cluster's reservation (one per pool)."""
    return list(
        session.scalars(
            sa.select(NodePoolRow.topology).where(
                NodePoolRow.cluster_id == cluster_id,
                NodePoolRow.reservation == reservation,
                NodePoolRow.mode == ProvisioningMode.RESERVATION.value,
                NodePoolRow.state.in_([s.value for s in LIVE_POOL_STATES]),
            )
        )
    )
