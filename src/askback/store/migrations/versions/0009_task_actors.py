"""Who acts for a task's caller: `askback_tasks.actors`.

Revision ID: 0009
Revises: 0008
Create Date: 2026-12-05

A task's handler reruns after the request that made it has ended, with a `Caller` rebuilt from the row; the actors
of the caller's token (RFC 8693's `act` chain) are kept with it so that every run carries them (an approval refuses
them as approvers). JSON, a list of principals; null for a task made before the column, read as no actors. A
downgrade drops the column.

Written by hand to mirror `askback.store.models.TaskRow`; `tests/store/test_store.py` checks that the two agree.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0009"
down_revision: str | Sequence[str] | None = "0008"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.add_column("askback_tasks", sa.Column("actors", sa.Text(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("askback_tasks") as batch:
        batch.drop_column("actors")
