"""Rename clusters.reservation_zone to zone: it is the zone of every node pool, not only
of the reservation (a slice lives in one zone; a regional cluster must name it).

Revision ID: f1a0c0de0003
Revises: f1a0c0de0002
Create Date: 2026-11-30 12:00:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "f1a0c0de0003"
down_revision = "f1a0c0de0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("clusters", schema=None) as batch_op:
        batch_op.alter_column(
            "reservation_zone",
            new_column_name="zone",
            existing_type=sa.String(length=64),
            existing_nullable=True,
        )


def downgrade() -> None:
    with op.batch_alter_table("clusters", schema=None) as batch_op:
        batch_op.alter_column(
            "zone",
            new_column_name="reservation_zone",
            existing_type=sa.String(length=64),
            existing_nullable=True,
        )
