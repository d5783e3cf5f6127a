"""Webhooks: the cursors, the outbox of deliveries and the log of attempts.

Revision ID: w001
Revises:
Create Date: 2026-12-02

Written by hand to mirror `askback.webhooks._models`; `tests/webhooks/test_webhook_endpoints.py` checks that the two
agree.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "w001"
down_revision: str | Sequence[str] | None = None
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "askback_webhook_cursors",
        sa.Column("endpoint", sa.String(32), nullable=False),
        sa.Column("source", sa.String(16), nullable=False),
        sa.Column("cursor", sa.Integer(), nullable=False),
        sa.Column("url", sa.Text(), nullable=False),
        sa.PrimaryKeyConstraint("endpoint", "source", name="pk_askback_webhook_cursors"),
    )
    op.create_table(
        "askback_webhook_deliveries",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("endpoint", sa.String(32), nullable=False),
        sa.Column("url", sa.Text(), nullable=False),
        sa.Column("source", sa.String(16), nullable=False),
        sa.Column("event_id", sa.Integer(), nullable=False),
        sa.Column("type", sa.String(64), nullable=False),
        sa.Column("webhook_id", sa.String(96), nullable=False),
        sa.Column("body", sa.Text(), nullable=False),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("attempts", sa.Integer(), nullable=False),
        sa.Column("next_attempt_at", sa.Float(), nullable=False),
        sa.Column("lease_until", sa.Float(), nullable=True),
        sa.Column("leased_by", sa.String(64), nullable=True),
        sa.Column("last_status", sa.Integer(), nullable=True),
        sa.Column("last_error", sa.String(64), nullable=True),
        sa.Column("created_at", sa.Float(), nullable=False),
        sa.Column("delivered_at", sa.Float(), nullable=True),
        sa.PrimaryKeyConstraint("id", name="pk_askback_webhook_deliveries"),
        sa.UniqueConstraint("webhook_id", name="uq_askback_webhook_deliveries_webhook_id"),
    )
    op.create_index("ix_askback_webhook_deliveries_endpoint", "askback_webhook_deliveries", ["endpoint"])
    op.create_index("ix_askback_webhook_deliveries_status", "askback_webhook_deliveries", ["status"])
    op.create_table(
        "askback_webhook_attempts",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("delivery_id", sa.Integer(), nullable=False),
        sa.Column("attempt", sa.Integer(), nullable=False),
        sa.Column("at", sa.Float(), nullable=False),
        sa.Column("duration", sa.Float(), nullable=False),
        sa.Column("status", sa.Integer(), nullable=True),
        sa.Column("error", sa.String(64), nullable=True),
        sa.Column("leased_by", sa.String(64), nullable=True),
        sa.PrimaryKeyConstraint("id", name="pk_askback_webhook_attempts"),
    )
    op.create_index("ix_askback_webhook_attempts_delivery_id", "askback_webhook_attempts", ["delivery_id"])


def downgrade() -> None:
    op.drop_table("askback_webhook_attempts")
    op.drop_table("askback_webhook_deliveries")
    op.drop_table("askback_webhook_cursors")
