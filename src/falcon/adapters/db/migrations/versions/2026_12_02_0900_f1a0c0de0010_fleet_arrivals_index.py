"""Index the arrivals by time alone: the keeping policy reads the fleet's newest arrivals (the
gaps a queue too new to have its own is taken to look like) without reading every task's row.

Revision ID: f1a0c0de0010
Revises: f1a0c0de0009
Create Date: 2026-12-02 09:00:00
"""

from __future__ import annotations

from alembic import op

revision = "f1a0c0de0010"
down_revision = "f1a0c0de0009"
branch_labels = None
depends_on = None

INDEX = "ix_falcon_task_progress__queued_at"


def upgrade() -> None:
    with op.batch_alter_table("falcon_task_progress", schema=None) as batch_op:
        batch_op.create_index(INDEX, ["queued_at"], unique=False)


def downgrade() -> None:
    with op.batch_alter_table("falcon_task_progress", schema=None) as batch_op:
        batch_op.drop_index(INDEX)
