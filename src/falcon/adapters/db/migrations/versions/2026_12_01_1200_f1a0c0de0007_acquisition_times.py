"""When each task was picked and when its pods all ran: the acquisitions (pick to Running) of a
queue, which `falcon task why` resamples for its ETA, read newest first by queue through the new
index.

Revision ID: f1a0c0de0007
Revises: f1a0c0de0006
Create Date: 2026-12-01 12:00:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import mysql

revision = "f1a0c0de0007"
down_revision = "f1a0c0de0006"
branch_labels = None
depends_on = None

UTC_DATETIME = sa.DateTime().with_variant(mysql.DATETIME(fsp=6), "mysql", "mariadb")  # as in f1a0c0de0001
RUNNING_INDEX = "ix_falcon_task_progress__cluster_id__topology__running_at"


def upgrade() -> None:
    with op.batch_alter_table("falcon_task_progress", schema=None) as batch_op:
        batch_op.add_column(sa.Column("acquiring_at", UTC_DATETIME, nullable=True))
        batch_op.add_column(sa.Column("running_at", UTC_DATETIME, nullable=True))
        batch_op.create_index(RUNNING_INDEX, ["cluster_id", "topology", "running_at"], unique=False)


def downgrade() -> None:
    with op.batch_alter_table("falcon_task_progress", schema=None) as batch_op:
        batch_op.drop_index(RUNNING_INDEX)
        batch_op.drop_column("running_at")
        batch_op.drop_column("acquiring_at")
