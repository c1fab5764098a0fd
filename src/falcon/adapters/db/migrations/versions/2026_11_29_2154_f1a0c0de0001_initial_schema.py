"""initial schema

Revision ID: f1a0c0de0001
Revises:
Create Date: 2026-11-29 21:54:09.864439
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import mysql

# DATETIME(6) on MySQL/MariaDB: the job contract keeps microseconds.
UTC_DATETIME = sa.DateTime().with_variant(mysql.DATETIME(fsp=6), "mysql", "mariadb")

revision = "f1a0c0de0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "clusters",
        sa.Column("id", sa.String(length=36), nullable=False),
        sa.Column("name", sa.String(length=128), nullable=False),
        sa.Column("project", sa.String(length=128), nullable=False),
        sa.Column("location", sa.String(length=64), nullable=False),
        sa.Column("tpu_type", sa.String(length=32), nullable=False),
        sa.Column("gcs_bucket", sa.String(length=255), nullable=False),
        sa.Column("default_reservation", sa.String(length=255), nullable=True),
        sa.Column("reservation_zone", sa.String(length=64), nullable=True),
        sa.Column("namespace", sa.String(length=63), nullable=False),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("created_at", UTC_DATETIME, nullable=False),
        sa.CheckConstraint(
            "status IN ('active', 'maintenance', 'offline')", name=op.f("ck_clusters__status")
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_clusters")),
        sa.UniqueConstraint("project", "location", "name", name=op.f("uq_clusters__project_location_name")),
    )
    op.create_table(
        "falcon_node_pools",
        sa.Column("cluster_id", sa.String(length=36), nullable=False),
        sa.Column("name", sa.String(length=64), nullable=False),
        sa.Column("topology", sa.String(length=32), nullable=False),
        sa.Column("machine_type", sa.String(length=64), nullable=False),
        sa.Column("mode", sa.String(length=16), nullable=False),
        sa.Column("reservation", sa.String(length=255), nullable=True),
        sa.Column("state", sa.String(length=16), nullable=False),
        sa.Column("holder_task_id", sa.String(length=64), nullable=True),
        sa.Column("idle_since", UTC_DATETIME, nullable=True),
        sa.Column("last_error", sa.Text(), nullable=True),
        sa.Column("created_at", UTC_DATETIME, nullable=False),
        sa.Column("updated_at", UTC_DATETIME, nullable=False),
        sa.PrimaryKeyConstraint("cluster_id", "name", name=op.f("pk_falcon_node_pools")),
    )
    with op.batch_alter_table("falcon_node_pools", schema=None) as batch_op:
        batch_op.create_index(
            "ix_falcon_node_pools__cluster_id__topology__state",
            ["cluster_id", "topology", "state"],
            unique=False,
        )

    op.create_table(
        "falcon_queue_rotation",
        sa.Column("cluster_id", sa.String(length=36), nullable=False),
        sa.Column("topology", sa.String(length=32), nullable=False),
        sa.Column("last_actor", sa.String(length=128), nullable=False),
        sa.Column("updated_at", UTC_DATETIME, nullable=False),
        sa.PrimaryKeyConstraint("cluster_id", "topology", name=op.f("pk_falcon_queue_rotation")),
    )
    op.create_table(
        "falcon_task_progress",
        sa.Column("task_id", sa.String(length=64), nullable=False),
        sa.Column("phase", sa.String(length=16), nullable=False),
        sa.Column("cluster_id", sa.String(length=36), nullable=True),
        sa.Column("topology", sa.String(length=32), nullable=True),
        sa.Column("lease_id", sa.String(length=36), nullable=True),
        sa.Column("attempt", sa.Integer(), nullable=False),
        sa.Column("acquire_run_id", sa.String(length=36), nullable=True),
        sa.Column("release_run_id", sa.String(length=36), nullable=True),
        sa.Column("outcome_status", sa.String(length=16), nullable=True),
        sa.Column("outcome_reason", sa.String(length=64), nullable=True),
        sa.Column("outcome_message", sa.Text(), nullable=True),
        sa.Column("updated_at", UTC_DATETIME, nullable=False),
        sa.PrimaryKeyConstraint("task_id", name=op.f("pk_falcon_task_progress")),
    )
    with op.batch_alter_table("falcon_task_progress", schema=None) as batch_op:
        batch_op.create_index("ix_falcon_task_progress__phase", ["phase"], unique=False)

    if sa.inspect(op.get_bind()).has_table("job"):
        return  # upstream owns an existing job table: leave it as it is
    op.create_table(
        "job",
        sa.Column("id", sa.String(length=64), nullable=False),
        sa.Column("actor", sa.String(length=128), nullable=False),
        sa.Column("name", sa.String(length=255), nullable=False),
        sa.Column("tpu_type", sa.String(length=32), nullable=False),
        sa.Column("spec", sa.JSON(), nullable=False),
        sa.Column("timeout_seconds", sa.Integer(), nullable=True),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("reason", sa.String(length=64), nullable=True),
        sa.Column("message", sa.Text(), nullable=True),
        sa.Column("cluster_id", sa.String(length=36), nullable=True),
        sa.Column("node_pool_name", sa.String(length=64), nullable=True),
        sa.Column("k8s_job_name", sa.String(length=128), nullable=True),
        sa.Column("job_uid", sa.String(length=64), nullable=True),
        sa.Column("created_at", UTC_DATETIME, nullable=False),
        sa.Column("updated_at", UTC_DATETIME, nullable=False),
        sa.Column("dispatched_at", UTC_DATETIME, nullable=True),
        sa.Column("finished_at", UTC_DATETIME, nullable=True),
        sa.Column("aborting_at", UTC_DATETIME, nullable=True),
        sa.Column("aborted_at", UTC_DATETIME, nullable=True),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_job")),
    )
    with op.batch_alter_table("job", schema=None) as batch_op:
        batch_op.create_index("ix_job__cluster_id__status", ["cluster_id", "status"], unique=False)
        batch_op.create_index("ix_job__status__created_at", ["status", "created_at"], unique=False)


def downgrade() -> None:
    with op.batch_alter_table("job", schema=None) as batch_op:
        batch_op.drop_index("ix_job__status__created_at")
        batch_op.drop_index("ix_job__cluster_id__status")

    op.drop_table("job")
    with op.batch_alter_table("falcon_task_progress", schema=None) as batch_op:
        batch_op.drop_index("ix_falcon_task_progress__phase")

    op.drop_table("falcon_task_progress")
    op.drop_table("falcon_queue_rotation")
    with op.batch_alter_table("falcon_node_pools", schema=None) as batch_op:
        batch_op.drop_index("ix_falcon_node_pools__cluster_id__topology__state")

    op.drop_table("falcon_node_pools")
    op.drop_table("clusters")
