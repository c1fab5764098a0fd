"""Index falcon_task_progress by queue and phase (keep-or-delete counts one queue's waiters).

Revision ID: f1a0c0de0002
Revises: f1a0c0de0001
Create Date: 2026-11-29 23:00:00
"""

from __future__ import annotations

from alembic import op

revision = "f1a0c0de0002"
down_revision = "f1a0c0de0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("falcon_task_progress", schema=None) as batch_op:
        batch_op.create_index(
            "ix_falcon_task_progress__cluster_id__topology__phase",
            ["cluster_id", "topology", "phase"],
            unique=False,
        )


def downgrade() -> None:
    with op.batch_alter_table("falcon_task_progress", schema=None) as batch_op:
        batch_op.drop_index("ix_falcon_task_progress__cluster_id__topology__phase")
