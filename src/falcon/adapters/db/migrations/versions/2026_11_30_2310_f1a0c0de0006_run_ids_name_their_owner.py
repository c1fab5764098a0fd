"""Run ids that name their owner: a flow run in the dispatcher's threads is recorded as
"<dispatcher flow run id>/<run name>", longer than the 36 characters of a flow run id.

Revision ID: f1a0c0de0006
Revises: f1a0c0de0005
Create Date: 2026-11-30 23:10:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "f1a0c0de0006"
down_revision = "f1a0c0de0005"
branch_labels = None
depends_on = None

RUN_ID_COLUMNS = ("acquire_run_id", "release_run_id")
NARROW, WIDE = sa.String(length=36), sa.String(length=160)


def upgrade() -> None:
    with op.batch_alter_table("falcon_task_progress", schema=None) as batch_op:
        for column in RUN_ID_COLUMNS:
            batch_op.alter_column(column, existing_type=NARROW, type_=WIDE, existing_nullable=True)


def downgrade() -> None:
    with op.batch_alter_table("falcon_task_progress", schema=None) as batch_op:
        for column in RUN_ID_COLUMNS:
            batch_op.alter_column(column, existing_type=WIDE, type_=NARROW, existing_nullable=True)
