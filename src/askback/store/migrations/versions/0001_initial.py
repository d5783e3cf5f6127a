"""The first schema: the effects ledger, flow completions and the audit log.

Revision ID: 0001
Revises:
Create Date: 2026-01-01

Written by hand to mirror `askback.store.models`; `tests/store/test_store.py` checks that the two agree.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0001"
down_revision: str | Sequence[str] | None = None
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "askback_effects",
        sa.Column("flow_id", sa.String(128), nullable=False),
        sa.Column("name", sa.String(255), nullable=False),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("outcome", sa.Text(), nullable=True),
        sa.Column("instance", sa.String(255), nullable=True),
        sa.Column("started_at", sa.Float(), nullable=False),
        sa.Column("finished_at", sa.Float(), nullable=True),
        sa.PrimaryKeyConstraint("flow_id", "name", name="pk_askback_effects"),
    )
    op.create_table(
        "askback_flows",
        sa.Column("flow_id", sa.String(128), nullable=False),
        sa.Column("tool", sa.String(255), nullable=False),
        sa.Column("principal", sa.String(255), nullable=True),
        sa.Column("result", sa.Text(), nullable=False),
        sa.Column("completed_at", sa.Float(), nullable=False),
        sa.PrimaryKeyConstraint("flow_id", name="pk_askback_flows"),
    )
    op.create_table(
        "askback_audit",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("at", sa.Float(), nullable=False),
        sa.Column("event", sa.String(32), nullable=False),
        sa.Column("tool", sa.String(255), nullable=True),
        sa.Column("flow_id", sa.String(128), nullable=True),
        sa.Column("principal", sa.String(255), nullable=True),
        sa.Column("round", sa.Integer(), nullable=True),
        sa.Column("keys", sa.Text(), nullable=False),
        sa.Column("mode", sa.String(32), nullable=True),
        sa.Column("action", sa.String(16), nullable=True),
        sa.Column("content", sa.Text(), nullable=True),
        sa.Column("outcome", sa.Text(), nullable=True),
        sa.Column("detail", sa.Text(), nullable=True),
        sa.Column("instance", sa.String(255), nullable=True),
        sa.PrimaryKeyConstraint("id", name="pk_askback_audit"),
    )
    for column in ("at", "tool", "flow_id", "principal"):
        op.create_index(f"ix_askback_audit_{column}", "askback_audit", [column])


def downgrade() -> None:
    op.drop_table("askback_audit")
    op.drop_table("askback_flows")
    op.drop_table("askback_effects")
