"""Agent runtime: parked calls, their answers, their rounds.

Revision ID: r001
Revises:
Create Date: 2026-12-01

Written by hand to mirror `askback.runtime._models`; `tests/runtime/test_runtime_parked_calls.py` checks that the two agree.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "r001"
down_revision: str | Sequence[str] | None = None
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "askback_runtime_calls",
        sa.Column("id", sa.String(64), nullable=False),
        sa.Column("run_id", sa.String(255), nullable=True),
        sa.Column("principal", sa.String(255), nullable=False),
        sa.Column("server", sa.Text(), nullable=False),
        sa.Column("protocol", sa.String(32), nullable=True),
        sa.Column("method", sa.String(32), nullable=False),
        sa.Column("target", sa.Text(), nullable=False),
        sa.Column("arguments", sa.Text(), nullable=True),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("round", sa.Integer(), nullable=False),
        sa.Column("pending", sa.Text(), nullable=True),
        sa.Column("waiting", sa.Integer(), nullable=False),
        sa.Column("deadline", sa.Float(), nullable=True),
        sa.Column("result", sa.Text(), nullable=True),
        sa.Column("error", sa.Text(), nullable=True),
        sa.Column("claim", sa.String(64), nullable=True),
        sa.Column("claimed_until", sa.Float(), nullable=True),
        sa.Column("created_at", sa.Float(), nullable=False),
        sa.Column("updated_at", sa.Float(), nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_askback_runtime_calls"),
    )
    op.create_index("ix_askback_runtime_calls_run_id", "askback_runtime_calls", ["run_id"])
    op.create_index("ix_askback_runtime_calls_status_created", "askback_runtime_calls", ["status", "created_at", "id"])
    op.create_index(
        "ix_askback_runtime_calls_principal_status",
        "askback_runtime_calls",
        ["principal", "status", "created_at", "id"],
    )
    op.create_table(
        "askback_runtime_answers",
        sa.Column("call_id", sa.String(64), nullable=False),
        sa.Column("round", sa.Integer(), nullable=False),
        sa.Column("key", sa.String(255), nullable=False),
        sa.Column("action", sa.String(8), nullable=False),
        sa.Column("content", sa.Text(), nullable=True),
        sa.Column("answered_by", sa.String(255), nullable=True),
        sa.Column("answered_at", sa.Float(), nullable=False),
        sa.PrimaryKeyConstraint("call_id", "round", "key", name="pk_askback_runtime_answers"),
    )
    op.create_table(
        "askback_runtime_rounds",
        sa.Column("call_id", sa.String(64), nullable=False),
        sa.Column("round", sa.Integer(), nullable=False),
        sa.Column("asked", sa.Text(), nullable=False),
        sa.Column("asked_at", sa.Float(), nullable=False),
        sa.Column("sent", sa.Text(), nullable=True),
        sa.Column("sent_at", sa.Float(), nullable=True),
        sa.PrimaryKeyConstraint("call_id", "round", name="pk_askback_runtime_rounds"),
    )


def downgrade() -> None:
    op.drop_table("askback_runtime_rounds")
    op.drop_table("askback_runtime_answers")
    op.drop_table("askback_runtime_calls")
