"""SQLAlchemy 2.0 tables: the upstream ``job`` contract and Falcon's own bookkeeping.

``job`` belongs to the upstream component; Falcon writes only its scheduling columns (status,
reason, message, cluster_id, node_pool_name, k8s_job_name, job_uid and the timestamps). Everything
else Falcon needs to resume after a crash lives in the ``falcon_*`` tables and ``clusters``.
All timestamps are stored as naive UTC with microseconds and read back as aware UTC.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, ClassVar

import sqlalchemy as sa
from sqlalchemy.dialects import mysql
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column
from sqlalchemy.types import TypeDecorator

NAMING_CONVENTION = {
    "ix": "ix_%(table_name)s__%(column_0_N_name)s",
    "uq": "uq_%(table_name)s__%(column_0_N_name)s",
    "ck": "ck_%(table_name)s__%(constraint_name)s",
    "fk": "fk_%(table_name)s__%(column_0_N_name)s__%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}


class UtcDateTime(TypeDecorator[datetime]):
    """DATETIME(6) holding UTC; refuses naive datetimes so local time never sneaks in."""

    impl = sa.DateTime
    cache_ok = True

    def load_dialect_impl(self, dialect: sa.Dialect) -> sa.types.TypeEngine[Any]:
        if dialect.name in ("mysql", "mariadb"):
            return dialect.type_descriptor(mysql.DATETIME(fsp=6))
        return dialect.type_descriptor(sa.DateTime())

    def process_bind_param(self, value: datetime | None, dialect: sa.Dialect) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            raise ValueError("naive datetime given; Falcon stores UTC only")
        return value.astimezone(UTC).replace(tzinfo=None)

    def process_result_value(self, value: datetime | None, dialect: sa.Dialect) -> datetime | None:
        return value.replace(tzinfo=UTC) if value is not None else None

    def result_processor(self, dialect: sa.Dialect, coltype: object) -> Callable[[Any], Any]:
        """Upstream may write a timestamp Falcon cannot parse (SQLite keeps any text; MySQL may
        hand back a zero date as a string): read it as ``Unreadable`` instead of failing the query."""
        process = super().result_processor(dialect, coltype)

        def lenient(value: Any) -> Any:
            try:
                return process(value) if process else value
            except (ValueError, TypeError, AttributeError) as exc:
                return Unreadable(str(value), f"not a timestamp ({exc})")

        return lenient


@dataclass(frozen=True)
class Unreadable:
    """A column value upstream wrote that Falcon cannot decode; the row, not the query, fails."""

    raw: str
    problem: str


class LenientJson(TypeDecorator[Any]):
    """JSON that decodes per row: invalid JSON (SQLite stores any text) reads as ``Unreadable``,
    so one bad row never fails the batch it is loaded with."""

    impl = sa.JSON
    cache_ok = True

    def result_processor(self, dialect: sa.Dialect, coltype: object) -> Callable[[Any], Any]:
        def decode(value: Any) -> Any:
            if not isinstance(value, str | bytes):
                return value
            try:
                return json.loads(value)
            except ValueError as exc:
                return Unreadable(value if isinstance(value, str) else repr(value), f"not valid JSON ({exc})")

        return decode


class Base(DeclarativeBase):
    metadata = sa.MetaData(naming_convention=NAMING_CONVENTION)
    type_annotation_map: ClassVar[dict[Any, Any]] = {datetime: UtcDateTime()}


class JobRow(Base):
    """The upstream ``job`` table (one row = one task)."""

    __tablename__ = "job"

    id: Mapped[str] = mapped_column(sa.String(64), primary_key=True)
    actor: Mapped[str] = mapped_column(sa.String(128))
    name: Mapped[str] = mapped_column(sa.String(255))
    tpu_type: Mapped[str] = mapped_column(sa.String(32))
    spec: Mapped[Any] = mapped_column(LenientJson)
    timeout_seconds: Mapped[int | None] = mapped_column(sa.Integer)
    status: Mapped[str] = mapped_column(sa.String(16), default="Pending")
    reason: Mapped[str | None] = mapped_column(sa.String(64))
    message: Mapped[str | None] = mapped_column(sa.Text)
    cluster_id: Mapped[str | None] = mapped_column(sa.String(36))
    node_pool_name: Mapped[str | None] = mapped_column(sa.String(64))
    k8s_job_name: Mapped[str | None] = mapped_column(sa.String(128))
    job_uid: Mapped[str | None] = mapped_column(sa.String(64))
    created_at: Mapped[datetime]
    updated_at: Mapped[datetime]
    dispatched_at: Mapped[datetime | None]
    finished_at: Mapped[datetime | None]
    aborting_at: Mapped[datetime | None]
    aborted_at: Mapped[datetime | None]

    __table_args__ = (
        sa.Index("ix_job__status__created_at", "status", "created_at"),
        # intake's "Pending, reason NULL, oldest first" without stepping over the waiting rows
        sa.Index("ix_job__status__reason__created_at", "status", "reason", "created_at", "id"),
        sa.Index("ix_job__cluster_id__status", "cluster_id", "status"),
    )


class ClusterRow(Base):
    """The clusters registry (design §2), owned by Falcon."""

    __tablename__ = "clusters"

    id: Mapped[str] = mapped_column(sa.String(36), primary_key=True)
    name: Mapped[str] = mapped_column(sa.String(128))
    project: Mapped[str] = mapped_column(sa.String(128))
    location: Mapped[str] = mapped_column(sa.String(64))
    tpu_type: Mapped[str] = mapped_column(sa.String(32))
    gcs_bucket: Mapped[str] = mapped_column(sa.String(255))
    default_reservation: Mapped[str | None] = mapped_column(sa.String(255))
    zone: Mapped[str | None] = mapped_column(sa.String(64))  # node pools and reservation; NULL: location
    namespace: Mapped[str] = mapped_column(sa.String(63), default="falcon-jobs")
    status: Mapped[str] = mapped_column(sa.String(16), default="active")
    created_at: Mapped[datetime]

    __table_args__ = (
        sa.UniqueConstraint("project", "location", "name"),
        sa.CheckConstraint("status IN ('active', 'maintenance', 'offline')", name="status"),
    )


class NodePoolRow(Base):
    """Every node pool Falcon creates, written before the GKE create call (write-ahead)."""

    __tablename__ = "falcon_node_pools"

    cluster_id: Mapped[str] = mapped_column(sa.String(36), primary_key=True)
    name: Mapped[str] = mapped_column(sa.String(64), primary_key=True)
    topology: Mapped[str] = mapped_column(sa.String(32))
    machine_type: Mapped[str] = mapped_column(sa.String(64))
    mode: Mapped[str] = mapped_column(sa.String(16))
    reservation: Mapped[str | None] = mapped_column(sa.String(255))
    state: Mapped[str] = mapped_column(sa.String(16))
    holder_task_id: Mapped[str | None] = mapped_column(sa.String(64))
    idle_since: Mapped[datetime | None]
    last_error: Mapped[str | None] = mapped_column(sa.Text)
    warm_rule: Mapped[str | None] = mapped_column(sa.String(63))  # the tidal rule it was created for
    ready_at: Mapped[datetime | None]  # minus created_at: how long its creation took
    deleting_at: Mapped[datetime | None]  # marked for deletion (GKE may not have started yet)
    delete_asked_at: Mapped[datetime | None]  # a deletion may be on its way to GKE since then
    deleted_at: Mapped[datetime | None]  # minus deleting_at: how long its deletion took
    created_at: Mapped[datetime]
    updated_at: Mapped[datetime]

    # Every pool keeps its row, so the table only grows: each read made all the time finds its
    # rows on an index (benchmarks/bench_pool_history.py).
    __table_args__ = (
        sa.Index("ix_falcon_node_pools__cluster_id__topology__state", "cluster_id", "topology", "state"),
        sa.Index("ix_falcon_node_pools__state__cluster_id", "state", "cluster_id"),  # the live pools
        # A task's pool. The state and cluster, which its reads name too, make SQLite (no
        # statistics unless asked) choose it over the state's index or the primary key's prefix.
        sa.Index(
            "ix_falcon_node_pools__holder_task_id__state__cluster_id", "holder_task_id", "state", "cluster_id"
        ),
        # A queue's newest creations and deletions, which the keeping policy learns from.
        sa.Index(
            "ix_falcon_node_pools__cluster_id__topology__ready_at", "cluster_id", "topology", "ready_at"
        ),
        sa.Index(
            "ix_falcon_node_pools__cluster_id__topology__deleted_at", "cluster_id", "topology", "deleted_at"
        ),
    )


class WarmRuleRow(Base):
    """Tidal warm-pool rules: how many idle pools a (cluster, topology) queue keeps ready from each
    fire of a cron expression on (``falcon tidal pool add``)."""

    __tablename__ = "falcon_warm_rules"

    name: Mapped[str] = mapped_column(sa.String(63), primary_key=True)
    cluster_id: Mapped[str] = mapped_column(sa.String(36))
    topology: Mapped[str] = mapped_column(sa.String(32))
    cron: Mapped[str] = mapped_column(sa.String(255))
    pools: Mapped[int] = mapped_column(sa.Integer)
    last_error: Mapped[str | None] = mapped_column(sa.Text)  # the latest failed warm creation
    failed_at: Mapped[datetime | None]
    warmed_fire_at: Mapped[datetime | None]  # the fire whose pools were last recorded (once per fire)
    created_at: Mapped[datetime]

    __table_args__ = (sa.Index("ix_falcon_warm_rules__cluster_id__topology", "cluster_id", "topology"),)


class RunOwnerRow(Base):
    """A process that runs flow runs in its threads (a dispatcher), and when it last said it lives."""

    __tablename__ = "falcon_run_owners"

    owner: Mapped[str] = mapped_column(sa.String(64), primary_key=True)
    beat_at: Mapped[datetime]


class QueueRotationRow(Base):
    """Which actor got each queue's slot last: the round-robin state, kept across restarts."""

    __tablename__ = "falcon_queue_rotation"

    cluster_id: Mapped[str] = mapped_column(sa.String(36), primary_key=True)
    topology: Mapped[str] = mapped_column(sa.String(32), primary_key=True)
    last_actor: Mapped[str] = mapped_column(sa.String(128))
    updated_at: Mapped[datetime]


class TaskProgressRow(Base):
    """Falcon's internal phase of a task, its queue-slot lease and the Prefect runs working on it.

    Kept apart from the user-facing status, as SkyPilot keeps status apart from schedule state:
    after upstream sets Aborting, this is what still says which phase the task was in.
    """

    __tablename__ = "falcon_task_progress"

    task_id: Mapped[str] = mapped_column(sa.String(64), primary_key=True)
    phase: Mapped[str] = mapped_column(sa.String(16))
    cluster_id: Mapped[str | None] = mapped_column(sa.String(36))
    topology: Mapped[str | None] = mapped_column(sa.String(32))
    lease_id: Mapped[str | None] = mapped_column(sa.String(36))
    attempt: Mapped[int] = mapped_column(sa.Integer, default=0)
    # a Prefect flow run id, or "<dispatcher flow run id>/<run name>" for a run in its threads
    acquire_run_id: Mapped[str | None] = mapped_column(sa.String(160))
    release_run_id: Mapped[str | None] = mapped_column(sa.String(160))
    outcome_status: Mapped[str | None] = mapped_column(sa.String(16))
    outcome_reason: Mapped[str | None] = mapped_column(sa.String(64))
    outcome_message: Mapped[str | None] = mapped_column(sa.Text)
    queued_at: Mapped[datetime | None]  # intake: the queue's arrivals, whose gaps keep-or-delete weighs
    acquiring_at: Mapped[datetime | None]  # the pick: the queue's slot held from here ...
    running_at: Mapped[datetime | None]  # ... to all pods Running: the acquisitions an ETA resamples
    updated_at: Mapped[datetime]

    __table_args__ = (
        # The counts per queue of a phase (the queue book's check, queue lengths) read it alone.
        sa.Index("ix_falcon_task_progress__phase__cluster_id__topology", "phase", "cluster_id", "topology"),
        sa.Index("ix_falcon_task_progress__cluster_id__topology__phase", "cluster_id", "topology", "phase"),
        sa.Index(
            "ix_falcon_task_progress__cluster_id__topology__queued_at", "cluster_id", "topology", "queued_at"
        ),
        sa.Index("ix_falcon_task_progress__queued_at", "queued_at"),  # the fleet's newest arrivals
        sa.Index(
            "ix_falcon_task_progress__cluster_id__topology__running_at",
            "cluster_id",
            "topology",
            "running_at",
        ),
        # The tasks that reached Running since the round's last read: found among the few new
        # ones, not by looking up every running row.
        sa.Index("ix_falcon_task_progress__phase__running_at", "phase", "running_at"),
    )
