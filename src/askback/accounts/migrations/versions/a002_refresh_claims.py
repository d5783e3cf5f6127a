"""The refresh claim and the backoff of a connected account: who is calling the provider now and until when
(`refresh_owner`, `refresh_until`), and, for an account in ERROR, how many refreshes failed in a row and when the
provider may be tried again (`failures`, `retry_at`).

Revision ID: a002
Revises: a001
Create Date: 2026-12-02

Written by hand to mirror `askback.accounts._models`; `tests/accounts/test_accounts_store.py` checks that the two agree.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "a002"
down_revision: str | Sequence[str] | None = "a001"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.add_column("askback_accounts", sa.Column("refresh_owner", sa.String(64), nullable=True))
    op.add_column("askback_accounts", sa.Column("refresh_until", sa.Float(), nullable=True))
    op.add_column("askback_accounts", sa.Column("failures", sa.Integer(), nullable=False, server_default="0"))
    op.add_column("askback_accounts", sa.Column("retry_at", sa.Float(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("askback_accounts") as batch:
        batch.drop_column("retry_at")
        batch.drop_column("failures")
        batch.drop_column("refresh_until")
        batch.drop_column("refresh_owner")
