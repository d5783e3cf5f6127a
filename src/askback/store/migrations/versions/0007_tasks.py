"""Durable tasks (the `io.modelcontextprotocol/tasks` extension): one row per task.

Revision ID: 0007
Revises: 0006
Create Date: 2026-12-02

`askback_tasks` keeps a task's principal, tool call, status, flow state, outstanding questions and answers, its
result or error, and the lease of the instance running it. `expires_at` is indexed for lazy pruning. A downgrade
drops the table and the tasks in it.

Written by hand to mirror `askback.store.models.TaskRow`; `tests/store/test_store.py` checks that the two agree.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0007"
down_revision: str | Sequence[str] | None = "0006"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "askback_tasks",
        sa.Column("task_id", sa.String(128), nullable=False),
        sa.Column("principal", sa.String(255), nullable=True),
        sa.Column("scopes", sa.Text(), nullable=True),
        sa.Column("tool", sa.String(255), nullable=False),
        sa.Column("arguments", sa.Text(), nullable=False),
        sa.Column("capabilities", sa.Text(), nullable=False),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("status_message", sa.Text(), nullable=True),
        sa.Column("created_at", sa.Float(), nullable=False),
        sa.Column("updated_at", sa.Float(), nullable=False),
        sa.Column("expires_at", sa.Float(), nullable=False),
        sa.Column("ttl_ms", sa.Integer(), nullable=False),
        sa.Column("poll_ms", sa.Integer(), nullable=False),
        sa.Column("flow", sa.Text(), nullable=False),
        sa.Column("outstanding", sa.Text(), nullable=False),
        sa.Column("responses", sa.Text(), nullable=False),
        sa.Column("result", sa.Text(), nullable=True),
        sa.Column("error", sa.Text(), nullable=True),
        sa.Column("lease_owner", sa.String(255), nullable=True),
        sa.Column("lease_until", sa.Float(), nullable=True),
        sa.PrimaryKeyConstraint("task_id", name="pk_askback_tasks"),
    )
    op.create_index("ix_askback_tasks_expires_at", "askback_tasks", ["expires_at"])


def downgrade() -> None:
    op.drop_index("ix_askback_tasks_expires_at", table_name="askback_tasks")
    op.drop_table("askback_tasks")
