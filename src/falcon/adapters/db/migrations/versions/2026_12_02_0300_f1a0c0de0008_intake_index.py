"""Index the rows intake looks for (status Pending, reason NULL, oldest first), so that a tick
finds new rows without stepping over every waiting one.

Revision ID: f1a0c0de0008
Revises: f1a0c0de0007
Create Date: 2026-12-02 03:00:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "f1a0c0de0008"
down_revision = "f1a0c0de0007"
branch_labels = None
depends_on = None

INTAKE_INDEX = "ix_job__status__reason__created_at"
FALCONS_JOB_INDEX = "ix_job__status__created_at"  # made by f1a0c0de0001 only where it made `job`


def _index_names() -> set[str]:
    return {index["name"] or "" for index in sa.inspect(op.get_bind()).get_indexes("job")}


def upgrade() -> None:
    if FALCONS_JOB_INDEX not in _index_names():
        return  # upstream owns `job`: its indexes are its owner's to add (README, the job table contract)
    with op.batch_alter_table("job", schema=None) as batch_op:
        batch_op.create_index(INTAKE_INDEX, ["status", "reason", "created_at", "id"], unique=False)


def downgrade() -> None:
    if INTAKE_INDEX not in _index_names():
        return
    with op.batch_alter_table("job", schema=None) as batch_op:
        batch_op.drop_index(INTAKE_INDEX)
