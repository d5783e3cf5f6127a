"""Agent runtime: the name a server gives itself, kept with each call so that its questions say who asks.

Revision ID: r002
Revises: r001
Create Date: 2027-01-10

Written by hand to mirror `askback.runtime._models`; `tests/runtime/test_runtime_parked_calls.py` checks that the two agree.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "r002"
down_revision: str | Sequence[str] | None = "r001"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.add_column("askback_runtime_calls", sa.Column("server_name", sa.Text(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("askback_runtime_calls") as batch:
        batch.drop_column("server_name")
