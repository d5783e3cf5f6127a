"""The rounds ledger: one row per answered round of a flow, so that copies of a round answer alike.

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-30

Written by hand to mirror `askback.store.models.RoundRow`; `tests/store/test_store.py` checks that the two agree.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0002"
down_revision: str | Sequence[str] | None = "0001"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "askback_rounds",
        sa.Column("flow_id", sa.String(128), nullable=False),
        sa.Column("round", sa.Integer(), autoincrement=False, nullable=False),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("outcome", sa.Text(), nullable=True),
        sa.Column("instance", sa.String(255), nullable=True),
        sa.Column("started_at", sa.Float(), nullable=False),
        sa.Column("finished_at", sa.Float(), nullable=True),
        sa.PrimaryKeyConstraint("flow_id", "round", name="pk_askback_rounds"),
    )


def downgrade() -> None:
    op.drop_table("askback_rounds")
