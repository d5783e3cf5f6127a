"""Approvals: requests and the votes on them.

Revision ID: p001
Revises:
Create Date: 2026-12-05

Written by hand to mirror `askback.approvals._models`; `tests/approvals/test_approvals_schema.py` checks that the two
agree.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "p001"
down_revision: str | Sequence[str] | None = None
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "askback_approval_requests",
        sa.Column("id", sa.String(64), nullable=False),
        sa.Column("key", sa.String(64), nullable=False),
        sa.Column("title", sa.String(200), nullable=False),
        sa.Column("policy", sa.Text(), nullable=False),
        sa.Column("tool", sa.String(255), nullable=False),
        sa.Column("arguments", sa.Text(), nullable=False),
        sa.Column("answers", sa.Text(), nullable=False),
        sa.Column("requester", sa.String(255), nullable=True),
        sa.Column("actors", sa.Text(), nullable=False),
        sa.Column("summary", sa.Text(), nullable=True),
        sa.Column("digest", sa.String(64), nullable=False),
        sa.Column("flow_id", sa.String(128), nullable=False),
        sa.Column("flows", sa.Text(), nullable=False),
        sa.Column("consumed_by_flow", sa.String(128), nullable=True),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("created_at", sa.Float(), nullable=False),
        sa.Column("expires_at", sa.Float(), nullable=False),
        sa.Column("decided_at", sa.Float(), nullable=True),
        sa.Column("reason", sa.Text(), nullable=True),
        sa.PrimaryKeyConstraint("id", name="pk_askback_approval_requests"),
    )
    op.create_index("ix_askback_approval_requests_digest", "askback_approval_requests", ["digest"])
    op.create_index("ix_askback_approval_requests_requester", "askback_approval_requests", ["requester", "status"])
    op.create_index("ix_askback_approval_requests_status", "askback_approval_requests", ["status", "created_at"])
    op.create_table(
        "askback_approval_votes",
        sa.Column("request_id", sa.String(64), nullable=False),
        sa.Column("approver", sa.String(255), nullable=False),
        sa.Column("decision", sa.String(8), nullable=False),
        sa.Column("reason", sa.Text(), nullable=False),
        sa.Column("method", sa.String(255), nullable=False),
        sa.Column("at", sa.Float(), nullable=False),
        sa.PrimaryKeyConstraint("request_id", "approver", name="pk_askback_approval_votes"),
    )


def downgrade() -> None:
    op.drop_table("askback_approval_votes")
    op.drop_table("askback_approval_requests")
