"""When a task first started an effect: `askback_tasks.effect_started_at`.

Revision ID: 0008
Revises: 0007
Create Date: 2026-12-09

A task's effect claim sets it in the claim's transaction and nothing clears it, so a cancel that comes after an
effect started is refused even when the effect raised and its claim was released. Tasks that have not ended and
whose flow already has an effect in the ledger get the time of their earliest one, so that what a cancel decides
does not change for them at the upgrade. A downgrade drops the column.

Written by hand to mirror `askback.store.models.TaskRow`; `tests/store/test_store.py` checks that the two agree.
"""

from __future__ import annotations

import json
from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0008"
down_revision: str | Sequence[str] | None = "0007"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_STATE_PREFIX = "askback/1:"


def upgrade() -> None:
    op.add_column("askback_tasks", sa.Column("effect_started_at", sa.Float(), nullable=True))
    conn = op.get_bind()
    live = conn.execute(
        sa.text("SELECT task_id, flow FROM askback_tasks WHERE status IN ('working', 'input_required')")
    ).all()
    for task_id, flow in live:
        try:
            flow_id = str(json.loads(str(flow)[len(_STATE_PREFIX) :])["f"])
        except (ValueError, KeyError, TypeError):
            continue
        first = conn.execute(
            sa.text("SELECT MIN(started_at) FROM askback_effects WHERE flow_id = :flow_id"), {"flow_id": flow_id}
        ).scalar()
        if first is not None:
            conn.execute(
                sa.text("UPDATE askback_tasks SET effect_started_at = :at WHERE task_id = :task_id"),
                {"at": first, "task_id": task_id},
            )


def downgrade() -> None:
    with op.batch_alter_table("askback_tasks") as batch:
        batch.drop_column("effect_started_at")
