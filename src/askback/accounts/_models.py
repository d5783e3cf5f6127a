"""The tables connected accounts keep, in the same database as everything else, under their own migration history.

Credentials are stored only as the vault's ciphertext (`credential`); link tokens only as a SHA-256 digest, so a
copy of the database cannot be turned into a working link. A change here needs a new migration beside it.
"""

from __future__ import annotations

from sqlalchemy import Float, Integer, String, Text, UniqueConstraint
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

from askback.db.orm import product_metadata

__all__ = ["VERSION_TABLE", "AccountEventRow", "AccountRow", "Base", "LinkRow"]

VERSION_TABLE = "askback_accounts_alembic_version"


class Base(DeclarativeBase):
    metadata = product_metadata()


class AccountRow(Base):
    """One connected account: a principal's grant (or key) for one connection; `label` tells apart several
    accounts of one provider for one person ('' for the only one)."""

    __tablename__ = "askback_accounts"
    __table_args__ = (UniqueConstraint("principal", "connection", "label"),)

    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    principal: Mapped[str] = mapped_column(String(255))
    connection: Mapped[str] = mapped_column(String(128))
    label: Mapped[str] = mapped_column(String(128), default="")
    status: Mapped[str] = mapped_column(String(16))
    reason: Mapped[str | None] = mapped_column(Text)
    credential: Mapped[str | None] = mapped_column(Text)  # the vault's ciphertext, never the credential itself
    expires_at: Mapped[float | None] = mapped_column(Float)
    scopes: Mapped[str | None] = mapped_column(Text)
    created_at: Mapped[float] = mapped_column(Float)
    updated_at: Mapped[float] = mapped_column(Float)
    # The refresh claim (`askback.accounts.tokens`): who is calling the provider for this account now, and until
    # when its claim holds (a holder that died loses it then). Both NULL when nobody is.
    refresh_owner: Mapped[str | None] = mapped_column(String(64))
    refresh_until: Mapped[float | None] = mapped_column(Float)
    # The backoff of an account in ERROR: refreshes failed in a row, and when the provider may be tried again.
    failures: Mapped[int] = mapped_column(Integer, server_default="0")
    retry_at: Mapped[float | None] = mapped_column(Float)


class LinkRow(Base):
    """A single-use authorization link, bound to the principal, the connection and the flow that asked."""

    __tablename__ = "askback_account_links"

    token_digest: Mapped[str] = mapped_column(String(64), primary_key=True)
    account_id: Mapped[str] = mapped_column(String(64), index=True)
    principal: Mapped[str] = mapped_column(String(255))
    connection: Mapped[str] = mapped_column(String(128))
    flow_id: Mapped[str | None] = mapped_column(String(128))
    created_at: Mapped[float] = mapped_column(Float)
    expires_at: Mapped[float] = mapped_column(Float)
    used_at: Mapped[float | None] = mapped_column(Float)
    # Set when the page sends the person on to the provider: the OAuth `state` (its digest) that the callback must
    # bring back, and the PKCE verifier (sealed by the vault), cleared when the callback uses it.
    state_digest: Mapped[str | None] = mapped_column(String(64), index=True)
    verifier: Mapped[str | None] = mapped_column(Text)


class AccountEventRow(Base):
    """An account's lifecycle: every status change, with its reason."""

    __tablename__ = "askback_account_events"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    account_id: Mapped[str] = mapped_column(String(64), index=True)
    at: Mapped[float] = mapped_column(Float)
    event: Mapped[str] = mapped_column(String(32))
    before: Mapped[str | None] = mapped_column(String(16))
    after: Mapped[str] = mapped_column(String(16))
    detail: Mapped[str | None] = mapped_column(Text)
