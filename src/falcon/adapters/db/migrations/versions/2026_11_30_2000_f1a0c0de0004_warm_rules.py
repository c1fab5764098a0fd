"""Tidal warm pools: the falcon_warm_rules table, and which rule a node pool was created for.

Revision ID: f1a0c0de0004
Revises: f1a0c0de0003
Create Date: 2026-11-30 20:00:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import mysql

revision = "f1a0c0de0004"
down_revision = "f1a0c0de0003"
branch_labels = None
depends_on = None

UTC_DATETIME = sa.DateTime().with_variant(mysql.DATETIME(fsp=6), "mysql", "mariadb")  # as in f1a0c0de0001


def upgrade() -> None:
    op.create_table(
        "falcon_warm_rules",
        sa.Column("name", sa.String(length=63), nullable=False),
        sa.Column("cluster_id", sa.String(length=36), nullable=False),
        sa.Column("topology", sa.String(length=32), nullable=False),
        sa.Column("cron", sa.String(length=255), nullable=False),
        sa.Column("pools", sa.Integer(), nullable=False),
        sa.Column("last_error", sa.Text(), nullable=True),
        sa.Column("failed_at", UTC_DATETIME, nullable=True),
        sa.Column("warmed_fire_at", UTC_DATETIME, nullable=True),
        sa.Column("created_at", UTC_DATETIME, nullable=False),
        sa.PrimaryKeyConstraint("name", name="pk_falcon_warm_rules"),
    )
    with op.batch_alter_table("falcon_warm_rules", schema=None) as batch_op:
        batch_op.create_index(
            "ix_falcon_warm_rules__cluster_id__topology", ["cluster_id", "topology"], unique=False
        )
    with op.batch_alter_table("falcon_node_pools", schema=None) as batch_op:
        batch_op.add_column(sa.Column("warm_rule", sa.String(length=63), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("falcon_node_pools", schema=None) as batch_op:
        batch_op.drop_column("warm_rule")
    op.drop_table("falcon_warm_rules")
