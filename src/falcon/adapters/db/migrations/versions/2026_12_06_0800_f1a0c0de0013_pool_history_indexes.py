"""Index the node-pool table for the reads made all the time: every pool keeps its row, so
without these they read the whole history (the live pools, a task's pool, a queue's newest
creations and deletions).

Revision ID: f1a0c0de0013
Revises: f1a0c0de0012
Create Date: 2026-12-06 08:00:00
"""

from __future__ import annotations

from alembic import op

revision = "f1a0c0de0013"
down_revision = "f1a0c0de0012"
branch_labels = None
depends_on = None

INDEXES = {
    "ix_falcon_node_pools__state__cluster_id": ["state", "cluster_id"],
    "ix_falcon_node_pools__holder_task_id__state__cluster_id": ["holder_task_id", "state", "cluster_id"],
    "ix_falcon_node_pools__cluster_id__topology__ready_at": ["cluster_id", "topology", "ready_at"],
    "ix_falcon_node_pools__cluster_id__topology__deleted_at": ["cluster_id", "topology", "deleted_at"],
}


def upgrade() -> None:
    with op.batch_alter_table("falcon_node_pools", schema=None) as batch_op:
        for name, columns in INDEXES.items():
            batch_op.create_index(name, columns, unique=False)


def downgrade() -> None:
    with op.batch_alter_table("falcon_node_pools", schema=None) as batch_op:
        for name in INDEXES:
            batch_op.drop_index(name)
