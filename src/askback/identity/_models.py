"""The table people's sign-in keeps, in the same database as everything else, under its own migration history.

`askback_people_sessions` holds one row per signed-in browser: the session cookie carries only a random id (signed),
and the row says whose session it is and when it ends. Only the id's SHA-256 digest is stored, so a copy of the
database cannot be turned into a working cookie. Signing out deletes the row, on every instance at once. A change here
needs a new migration beside it.
"""

from __future__ import annotations

from sqlalchemy import Float, String, Text
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

from askback.db.orm import product_metadata

__all__ = ["VERSION_TABLE", "Base", "SessionRow"]

VERSION_TABLE = "askback_identity_alembic_version"


class Base(DeclarativeBase):
    metadata = product_metadata()


class SessionRow(Base):
    """One person's session in one browser: the digest of its id, the person, their groups as the sign-in gave them
    (a JSON list of names), when it began and when it ends."""

    __tablename__ = "askback_people_sessions"

    id_digest: Mapped[str] = mapped_column(String(64), primary_key=True)
    principal: Mapped[str] = mapped_column(String(1024), index=True)
    created_at: Mapped[float] = mapped_column(Float)
    expires_at: Mapped[float] = mapped_column(Float, index=True)
    groups: Mapped[str] = mapped_column(Text, server_default="[]")
