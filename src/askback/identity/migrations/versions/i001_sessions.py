"""People's sessions: one row per signed-in browser, deleted when the person signs out.

Revision ID: i001
Revises:
Create Date: 2027-01-20

Written by hand to mirror `askback.identity._models`; `tests/identity/test_people_sessions.py` checks that the two agree.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "i001"
down_revision: str | Sequence[str] | None = None
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "askback_people_sessions",
        sa.Column("id_digest", sa.String(64), nullable=False),
        sa.Column("principal", sa.String(1024), nullable=False),
        sa.Column("created_at", sa.Float(), nullable=False),
        sa.Column("expires_at", sa.Float(), nullable=False),
        sa.PrimaryKeyConstraint("id_digest", name="pk_askback_people_sessions"),
    )
    op.create_index("ix_askback_people_sessions_principal", "askback_people_sessions", ["principal"])
    op.create_index("ix_askback_people_sessions_expires_at", "askback_people_sessions", ["expires_at"])


def downgrade() -> None:
    op.drop_index("ix_askback_people_sessions_expires_at", table_name="askback_people_sessions")
    op.drop_index("ix_askback_people_sessions_principal", table_name="askback_people_sessions")
    op.drop_table("askback_people_sessions")
