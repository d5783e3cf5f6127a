"""The audit chain: each audit row hashes its content and the previous row's hash, per serving process.

Revision ID: 0003
Revises: 0002
Create Date: 2026-12-01

Rows written before this revision keep NULL in the new columns: they were never chained, and `askback audit
verify` reports them as such rather than as tampering. `askback_audit_chains` holds each chain's head (its last
seq and hash), updated in the same transaction as the rows it covers.

Written by hand to mirror `askback.store.models`; `tests/store/test_store.py` checks that the two agree.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0003"
down_revision: str | Sequence[str] | None = "0002"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "askback_audit_chains",
        sa.Column("chain", sa.String(255), nullable=False),
        sa.Column("seq", sa.Integer(), nullable=False),
        sa.Column("head", sa.String(64), nullable=False),
        sa.Column("started_at", sa.Float(), nullable=False),
        sa.PrimaryKeyConstraint("chain", name="pk_askback_audit_chains"),
    )
    op.add_column("askback_audit", sa.Column("chain", sa.String(255), nullable=True))
    op.add_column("askback_audit", sa.Column("seq", sa.Integer(), nullable=True))
    op.add_column("askback_audit", sa.Column("prev", sa.String(64), nullable=True))
    op.add_column("askback_audit", sa.Column("hash", sa.String(64), nullable=True))
    # Unique: one row per place in a chain. NULLs (unchained rows) never collide, on SQLite or PostgreSQL.
    op.create_index("ix_askback_audit_chain", "askback_audit", ["chain", "seq"], unique=True)


def downgrade() -> None:
    op.drop_index("ix_askback_audit_chain", table_name="askback_audit")
    # batch: SQLite drops columns by copying the table.
    with op.batch_alter_table("askback_audit") as batch:
        batch.drop_column("hash")
        batch.drop_column("prev")
        batch.drop_column("seq")
        batch.drop_column("chain")
    op.drop_table("askback_audit_chains")
