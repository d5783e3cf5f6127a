"""The shared event log: one row per event (an account's lifecycle change, to begin with), read by cursor.

Revision ID: 0006
Revises: 0005
Create Date: 2026-12-02

`askback_events.id` is the cursor readers keep (increasing; PostgreSQL's identity, SQLite's rowid, never reused:
AUTOINCREMENT), `type` the event's name (`account.connected`), `at` when, `data` a JSON object. Subscribers on every
instance read it after the last id they saw. A downgrade drops the table and the events in it.

Written by hand to mirror `askback.store.models.EventRow`; `tests/store/test_store.py` checks that the two agree.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0006"
down_revision: str | Sequence[str] | None = "0005"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "askback_events",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("type", sa.String(64), nullable=False),
        sa.Column("at", sa.Float(), nullable=False),
        sa.Column("data", sa.Text(), nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_askback_events"),
        # SQLite would otherwise reuse the id of a deleted newest row, which a reader's cursor has already passed.
        sqlite_autoincrement=True,
    )
    op.create_index("ix_askback_events_type", "askback_events", ["type"])


def downgrade() -> None:
    op.drop_index("ix_askback_events_type", table_name="askback_events")
    op.drop_table("askback_events")
