"""When a deletion of a marked node pool was last asked of GKE with no answer yet: such a request
may still reach GKE after the client gave up on it, so the pool is not taken back for its queue
until that can no longer happen (the chaos run saw a taken-back pool deleted under its new task).

Revision ID: f1a0c0de0011
Revises: f1a0c0de0010
Create Date: 2026-12-04 19:00:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import mysql

revision = "f1a0c0de0011"
down_revision = "f1a0c0de0010"
branch_labels = None
depends_on = None

UTC_DATETIME = sa.DateTime().with_variant(mysql.DATETIME(fsp=6), "mysql", "mariadb")  # as in f1a0c0de0001


def upgrade() -> None:
    with op.batch_alter_table("falcon_node_pools", schema=None) as batch_op:
        batch_op.add_column(sa.Column("delete_asked_at", UTC_DATETIME, nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("falcon_node_pools", schema=None) as batch_op:
        batch_op.drop_column("delete_asked_at")
