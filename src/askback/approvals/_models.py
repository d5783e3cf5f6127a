"""The tables approvals keep, in the same database as everything else, under their own migration history.

A request holds what its approvers are shown: the call's arguments with the policy's hidden ones replaced by null
(their values are in the digest, never stored), the answers given before it was asked, and the tool's summary. A vote
is one person's decision; the primary key (request, approver) is what makes a second decision by the same person
impossible on every instance. A change here needs a new migration beside it.
"""

from __future__ import annotations

from sqlalchemy import Float, Index, String, Text
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

from askback.core.caller import MAX_PRINCIPAL
from askback.db.orm import product_metadata

__all__ = ["VERSION_TABLE", "Base", "RequestRow", "VoteRow"]

VERSION_TABLE = "askback_approvals_alembic_version"


class Base(DeclarativeBase):
    metadata = product_metadata()


class RequestRow(Base):
    """One approval request: one exact call (`digest`) of one requester, waiting for, or decided by, its approvers.

    `flows` are the flows that waited on it (a JSON list, the one that made it first): a flow that asks again finds
    the request it waited on, whatever became of it, so a denial reaches every flow that asked."""

    __tablename__ = "askback_approval_requests"
    __table_args__ = (
        # Reuse: the requests for one exact call.
        Index("ix_askback_approval_requests_digest", "digest"),
        # The cap: a requester's pending requests.
        Index("ix_askback_approval_requests_requester", "requester", "status"),
        # The approvers' list and the operators' listing: by status, newest first.
        Index("ix_askback_approval_requests_status", "status", "created_at"),
    )

    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    key: Mapped[str] = mapped_column(String(64))
    title: Mapped[str] = mapped_column(String(200))
    policy: Mapped[str] = mapped_column(Text)
    tool: Mapped[str] = mapped_column(String(255))
    arguments: Mapped[str] = mapped_column(Text)
    answers: Mapped[str] = mapped_column(Text)
    requester: Mapped[str | None] = mapped_column(String(MAX_PRINCIPAL))
    actors: Mapped[str] = mapped_column(Text)
    summary: Mapped[str | None] = mapped_column(Text)
    digest: Mapped[str] = mapped_column(String(64))
    flow_id: Mapped[str] = mapped_column(String(128))
    flows: Mapped[str] = mapped_column(Text)
    consumed_by_flow: Mapped[str | None] = mapped_column(String(128))
    status: Mapped[str] = mapped_column(String(16))
    created_at: Mapped[float] = mapped_column(Float)
    expires_at: Mapped[float] = mapped_column(Float)
    decided_at: Mapped[float | None] = mapped_column(Float)
    reason: Mapped[str | None] = mapped_column(Text)


class VoteRow(Base):
    """One person's decision on a request: at most one per (request, approver)."""

    __tablename__ = "askback_approval_votes"

    request_id: Mapped[str] = mapped_column(String(64), primary_key=True)
    approver: Mapped[str] = mapped_column(String(MAX_PRINCIPAL), primary_key=True)
    decision: Mapped[str] = mapped_column(String(8))
    reason: Mapped[str] = mapped_column(Text)
    method: Mapped[str] = mapped_column(String(255))
    at: Mapped[float] = mapped_column(Float)
