"""The audit trail's indexes, only those its reads need: `ix_askback_audit_tool` goes.

Revision ID: 0010
Revises: 0009
Create Date: 2026-12-06

Every audit row is inserted into each index of `askback_audit`, on every round. The reads (`askback audit` and
`Store.audit`, through `audit_rows.selecting`) always order by `at`, newest first, and stop at their limit: the
index on `at` serves the tail and the time windows, `flow_id` and `principal` pick the few rows of one flow or one
person. A tool's rows are a large share of the trail, which the `at` index, read newest first, finds as soon; its
index was paid on every insert for no read. The chain's unique `(chain, seq)` stays: it keeps the chain whole and
orders `askback audit verify`. A downgrade creates the index again.

Written by hand to mirror `askback.store.models.AuditRow`; `tests/store/test_store.py` checks that the two agree.
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

revision: str = "0010"
down_revision: str | Sequence[str] | None = "0009"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.drop_index("ix_askback_audit_tool", table_name="askback_audit")


def downgrade() -> None:
    op.create_index("ix_askback_audit_tool", "askback_audit", ["tool"])
