"""What keep-or-delete by cost weighs: when each node pool became ready (with created_at, its
creation time) and when each task was queued (its queue's arrival gaps, read by queue and time
through the new index).

Revision ID: f1a0c0de0005
Revises: f1a0c0de0004
Create Date: 2026-11-30 23:00:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import mysql

revision = "f1a0c0de0005"
down_revision = "f1a0c0de0004"
branch_labels = None
depends_on = None

UTC_DATETIME = sa.DateTime().with_variant(mysql.DATETIME(fsp=6), "mysql", "mariadb")  # as in f1a0c0de0001
QUEUED_INDEX = "ix_falcon_task_progress__cluster_id__topology__queued_at"


def upgrade() -> None:
    with op.batch_alter_table("falcon_task_progress", schema=None) as batch_op:
        batch_op.add_column(sa.Column("queued_at", UTC_DATETIME, nullable=True))
        batch_op.create_index(QUEUED_INDEX, ["cluster_id", "topology", "queued_at"], unique=False)
    with op.batch_alter_table("falcon_node_pools", schema=None) as batch_op:
        batch_op.add_column(sa.Column("ready_at", UTC_DATETIME, nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("falcon_node_pools", schema=None) as batch_op:
        batch_op.drop_column("ready_at")
    with op.batch_alter_table("falcon_task_progress", schema=None) as batch_op:
        batch_op.drop_index(QUEUED_INDEX)
        batch_op.drop_column("queued_at")
