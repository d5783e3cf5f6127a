"""Agent runtime: a call the server made a task keeps the task's id and the poll interval the server asked for.

Revision ID: r004
Revises: r003
Create Date: 2027-03-01

Written by hand to mirror `askback.runtime._models`; `tests/runtime/test_runtime_parked_calls.py` checks that the two
agree.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "r004"
down_revision: str | Sequence[str] | None = "r003"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.add_column("askback_runtime_calls", sa.Column("task_id", sa.String(255), nullable=True))
    op.add_column("askback_runtime_calls", sa.Column("poll_interval", sa.Float(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("askback_runtime_calls") as batch:
        batch.drop_column("poll_interval")
        batch.drop_column("task_id")
