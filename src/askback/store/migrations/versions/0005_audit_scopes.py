"""The caller's token scopes on each audit row.

Revision ID: 0005
Revises: 0004
Create Date: 2026-12-02

`askback_audit.scopes` holds the scopes the caller's access token granted, sorted and space-separated. Rows written
before this revision keep NULL there, and a row with NULL scopes hashes exactly as before (encoding
"askback.audit/1"), so the chains they are in still verify; a row with scopes hashes them too ("askback.audit/2").
A downgrade drops the column, and with it the scopes the rows' hashes cover: those rows then fail
`askback audit verify` as edited.

Written by hand to mirror `askback.store.models.AuditRow`; `tests/store/test_store.py` checks that the two agree.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0005"
down_revision: str | Sequence[str] | None = "0004"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.add_column("askback_audit", sa.Column("scopes", sa.Text(), nullable=True))


def downgrade() -> None:
    # batch: SQLite drops columns by copying the table.
    with op.batch_alter_table("askback_audit") as batch:
        batch.drop_column("scopes")
