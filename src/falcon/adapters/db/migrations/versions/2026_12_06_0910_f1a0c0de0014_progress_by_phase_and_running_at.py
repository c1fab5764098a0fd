"""Index progress rows by phase and running_at: the reconcile round's read of the tasks that
reached Running since its last read finds the few new ones, where it looked up every running
row.

Revision ID: f1a0c0de0014
Revises: f1a0c0de0013
Create Date: 2026-12-06 09:10:00
"""

from __future__ import annotations

from alembic import op

revision = "f1a0c0de0014"
down_revision = "f1a0c0de0013"
branch_labels = None
depends_on = None

NAME = "ix_falcon_task_progress__phase__running_at"


def upgrade() -> None:
    with op.batch_alter_table("falcon_task_progress", schema=None) as batch_op:
        batch_op.create_index(NAME, ["phase", "running_at"], unique=False)


def downgrade() -> None:
    with op.batch_alter_table("falcon_task_progress", schema=None) as batch_op:
        batch_op.drop_index(NAME)
