"""The groups a person's sign-in gave them, kept with their session (a JSON list of names; `[]` for the sessions
begun before).

Revision ID: i002
Revises: i001
Create Date: 2026-12-05

Written by hand to mirror `askback.identity._models`; `tests/identity/test_people_sessions.py` checks that the two agree.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "i002"
down_revision: str | Sequence[str] | None = "i001"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.add_column("askback_people_sessions", sa.Column("groups", sa.Text(), nullable=False, server_default="[]"))


def downgrade() -> None:
    with op.batch_alter_table("askback_people_sessions") as batch:
        batch.drop_column("groups")
