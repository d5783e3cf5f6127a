"""Connected accounts: accounts, single-use authorization links, lifecycle events.

Revision ID: a001
Revises:
Create Date: 2026-12-01

Written by hand to mirror `askback.accounts._models`; `tests/accounts/test_accounts_store.py` checks that the two agree.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "a001"
down_revision: str | Sequence[str] | None = None
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "askback_accounts",
        sa.Column("id", sa.String(64), nullable=False),
        sa.Column("principal", sa.String(255), nullable=False),
        sa.Column("connection", sa.String(128), nullable=False),
        sa.Column("label", sa.String(128), nullable=False),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("reason", sa.Text(), nullable=True),
        sa.Column("credential", sa.Text(), nullable=True),
        sa.Column("expires_at", sa.Float(), nullable=True),
        sa.Column("scopes", sa.Text(), nullable=True),
        sa.Column("created_at", sa.Float(), nullable=False),
        sa.Column("updated_at", sa.Float(), nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_askback_accounts"),
        sa.UniqueConstraint("principal", "connection", "label", name="uq_askback_accounts_principal"),
    )
    op.create_table(
        "askback_account_links",
        sa.Column("token_digest", sa.String(64), nullable=False),
        sa.Column("account_id", sa.String(64), nullable=False),
        sa.Column("principal", sa.String(255), nullable=False),
        sa.Column("connection", sa.String(128), nullable=False),
        sa.Column("flow_id", sa.String(128), nullable=True),
        sa.Column("created_at", sa.Float(), nullable=False),
        sa.Column("expires_at", sa.Float(), nullable=False),
        sa.Column("used_at", sa.Float(), nullable=True),
        sa.Column("state_digest", sa.String(64), nullable=True),
        sa.Column("verifier", sa.Text(), nullable=True),
        sa.PrimaryKeyConstraint("token_digest", name="pk_askback_account_links"),
    )
    op.create_index("ix_askback_account_links_account_id", "askback_account_links", ["account_id"])
    op.create_index("ix_askback_account_links_state_digest", "askback_account_links", ["state_digest"])
    op.create_table(
        "askback_account_events",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("account_id", sa.String(64), nullable=False),
        sa.Column("at", sa.Float(), nullable=False),
        sa.Column("event", sa.String(32), nullable=False),
        sa.Column("before", sa.String(16), nullable=True),
        sa.Column("after", sa.String(16), nullable=False),
        sa.Column("detail", sa.Text(), nullable=True),
        sa.PrimaryKeyConstraint("id", name="pk_askback_account_events"),
    )
    op.create_index("ix_askback_account_events_account_id", "askback_account_events", ["account_id"])


def downgrade() -> None:
    op.drop_table("askback_account_events")
    op.drop_table("askback_account_links")
    op.drop_table("askback_accounts")
