"""When each node pool was marked for deletion and when it was gone: the queue's deletions, whose
node-time the keeping policy prices with a creation's (a pool deleted now and its successor
created later cost one delete more than a pool kept and reused).

Revision ID: f1a0c0de0009
Revises: f1a0c0de0008
Create Date: 2026-12-02 06:00:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import mysql

revision = "f1a0c0de0009"
down_revision = "f1a0c0de0008"
branch_labels = None
depends_on = None

UTC_DATETIME = sa.DateTime().with_variant(mysql.DATETIME(fsp=6), "mysql", "mariadb")  # as in f1a0c0de0001


def upgrade() -> None:
    with op.batch_alter_table("falcon_node_pools", schema=None) as batch_op:
        batch_op.add_column(sa.Column("deleting_at", UTC_DATETIME, nullable=True))
        batch_op.add_column(sa.Column("deleted_at", UTC_DATETIME, nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("falcon_node_pools", schema=None) as batch_op:
        batch_op.drop_column("deleted_at")
        batch_op.drop_column("deleting_at")
