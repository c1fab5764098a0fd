"""Run ids that name their owner: a flow run in the dispatcher's threads is recorded as
"<owner>/<run name>", longer than the 36 characters of a flow run id; and the owners' heartbeats
(falcon_run_owners), by which another dispatcher tells whether those runs are still alive.

Revision ID: f1a0c0de0006
Revises: f1a0c0de0005
Create Date: 2026-11-30 23:10:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import mysql

revision = "f1a0c0de0006"
down_revision = "f1a0c0de0005"
branch_labels = None
depends_on = None

RUN_ID_COLUMNS = ("acquire_run_id", "release_run_id")
NARROW, WIDE = sa.String(length=36), sa.String(length=160)
UTC_DATETIME = sa.DateTime().with_variant(mysql.DATETIME(fsp=6), "mysql", "mariadb")  # as in f1a0c0de0001


def upgrade() -> None:
    with op.batch_alter_table("falcon_task_progress", schema=None) as batch_op:
        for column in RUN_ID_COLUMNS:
            batch_op.alter_column(column, existing_type=NARROW, type_=WIDE, existing_nullable=True)
    op.create_table(
        "falcon_run_owners",
        sa.Column("owner", sa.String(length=64), nullable=False),
        sa.Column("beat_at", UTC_DATETIME, nullable=False),
        sa.PrimaryKeyConstraint("owner", name="pk_falcon_run_owners"),
    )


def downgrade() -> None:
    op.drop_table("falcon_run_owners")
    with op.batch_alter_table("falcon_task_progress", schema=None) as batch_op:
        for column in RUN_ID_COLUMNS:
            batch_op.alter_column(column, existing_type=WIDE, type_=NARROW, existing_nullable=True)
