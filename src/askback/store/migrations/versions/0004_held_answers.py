"""Answers held on the server (`ASKBACK_ANSWERS=server`): a flow's answers by flow id and round, sealed.

Revision ID: 0004
Revises: 0003
Create Date: 2026-12-01

Written by hand to mirror `askback.store.models.HeldAnswersRow`; `tests/store/test_store.py` checks that the two agree.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0004"
down_revision: str | Sequence[str] | None = "0003"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "askback_held_answers",
        sa.Column("flow_id", sa.String(128), nullable=False),
        sa.Column("round", sa.Integer(), autoincrement=False, nullable=False),
        sa.Column("sealed", sa.Text(), nullable=False),
        sa.Column("expires_at", sa.Float(), nullable=False),
        sa.PrimaryKeyConstraint("flow_id", "round", name="pk_askback_held_answers"),
    )
    op.create_index("ix_askback_held_answers_expires_at", "askback_held_answers", ["expires_at"])


def downgrade() -> None:
    op.drop_index("ix_askback_held_answers_expires_at", table_name="askback_held_answers")
    op.drop_table("askback_held_answers")
