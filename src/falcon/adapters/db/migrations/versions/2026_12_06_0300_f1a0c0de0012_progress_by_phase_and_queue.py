"""Index progress rows by phase, then queue: the per-queue counts of waiting (and acquiring)
tasks read the index alone, where the index on phase made them look up every row.

Revision ID: f1a0c0de0012
Revises: f1a0c0de0011
Create Date: 2026-12-06 03:00:00
"""

from __future__ import annotations

from alembic import op

revision = "f1a0c0de0012"
down_revision = "f1a0c0de0011"
branch_labels = None
depends_on = None

OLD = "ix_falcon_task_progress__phase"
NEW = "ix_falcon_task_progress__phase__cluster_id__topology"


def upgrade() -> None:
    with op.batch_alter_table("falcon_task_progress", schema=None) as batch_op:
        batch_op.create_index(NEW, ["phase", "cluster_id", "topology"], unique=False)
        batch_op.drop_index(OLD)


def downgrade() -> None:
    with op.batch_alter_table("falcon_task_progress", schema=None) as batch_op:
        batch_op.create_index(OLD, ["phase"], unique=False)
        batch_op.drop_index(NEW)
