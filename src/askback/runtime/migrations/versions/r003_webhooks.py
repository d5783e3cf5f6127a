"""Agent runtime: the webhooks its receiver took in, by `webhook-id`, so that a redelivered one is acted on once.

Revision ID: r003
Revises: r002
Create Date: 2027-02-01

Written by hand to mirror `askback.runtime._models`; `tests/runtime/test_runtime_parked_calls.py` checks that the two
agree.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "r003"
down_revision: str | Sequence[str] | None = "r002"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "askback_runtime_webhooks",
        sa.Column("id", sa.String(255), nullable=False),
        sa.Column("type", sa.String(64), nullable=False),
        sa.Column("received_at", sa.Float(), nullable=False),
        sa.Column("claim", sa.String(64), nullable=True),
        sa.Column("claimed_until", sa.Float(), nullable=True),
        sa.Column("done_at", sa.Float(), nullable=True),
        sa.PrimaryKeyConstraint("id", name="pk_askback_runtime_webhooks"),
    )


def downgrade() -> None:
    op.drop_table("askback_runtime_webhooks")
