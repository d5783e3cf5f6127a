"""The tables webhooks keep, in the same database as everything else, under their own migration history.

- `askback_webhook_cursors`: for each endpoint and each source of events (the shared event log, the audit log),
  the last event already turned into deliveries; moved on in the same transaction that inserts them.
- `askback_webhook_deliveries`: the outbox, one row per (event, endpoint), with the exact body sent on every try.
- `askback_webhook_attempts`: every attempt of every delivery: when, how long, the HTTP status or the error's kind.

No secret is stored: an endpoint is named by the digest of its URL, and what a receiver answered is kept only as its
status code. A change here needs a new migration beside it.
"""

from __future__ import annotations

from sqlalchemy import Float, Integer, String, Text
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

from askback.db.orm import product_metadata

__all__ = ["VERSION_TABLE", "AttemptRow", "Base", "CursorRow", "DeliveryRow"]

VERSION_TABLE = "askback_webhooks_alembic_version"


class Base(DeclarativeBase):
    metadata = product_metadata()


class CursorRow(Base):
    """How far one endpoint has read one source: `source` is `events` (the shared event log) or `audit`."""

    __tablename__ = "askback_webhook_cursors"

    endpoint: Mapped[str] = mapped_column(String(32), primary_key=True)
    source: Mapped[str] = mapped_column(String(16), primary_key=True)
    cursor: Mapped[int] = mapped_column(Integer)
    url: Mapped[str] = mapped_column(Text)


class DeliveryRow(Base):
    """One event for one endpoint. `status` is `pending` (due at `next_attempt_at`, taken by `leased_by` until
    `lease_until` while an attempt runs), `delivered` or `failed` (the schedule ran out)."""

    __tablename__ = "askback_webhook_deliveries"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    endpoint: Mapped[str] = mapped_column(String(32), index=True)
    url: Mapped[str] = mapped_column(Text)
    source: Mapped[str] = mapped_column(String(16))
    event_id: Mapped[int] = mapped_column(Integer)
    type: Mapped[str] = mapped_column(String(64))
    webhook_id: Mapped[str] = mapped_column(String(96), unique=True)
    body: Mapped[str] = mapped_column(Text)
    status: Mapped[str] = mapped_column(String(16), index=True)
    attempts: Mapped[int] = mapped_column(Integer)
    next_attempt_at: Mapped[float] = mapped_column(Float)
    lease_until: Mapped[float | None] = mapped_column(Float)
    leased_by: Mapped[str | None] = mapped_column(String(64))
    last_status: Mapped[int | None] = mapped_column(Integer)
    last_error: Mapped[str | None] = mapped_column(String(64))
    created_at: Mapped[float] = mapped_column(Float)
    delivered_at: Mapped[float | None] = mapped_column(Float)


class AttemptRow(Base):
    """One attempt: `status` the HTTP status the receiver answered, or `error` the kind of failure (`timeout`,
    `connect`, `network`) when it answered nothing."""

    __tablename__ = "askback_webhook_attempts"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    delivery_id: Mapped[int] = mapped_column(Integer, index=True)
    attempt: Mapped[int] = mapped_column(Integer)
    at: Mapped[float] = mapped_column(Float)
    duration: Mapped[float] = mapped_column(Float)
    status: Mapped[int | None] = mapped_column(Integer)
    error: Mapped[str | None] = mapped_column(String(64))
    leased_by: Mapped[str | None] = mapped_column(String(64))
