"""People's sessions in the shared store: begun at sign-in, read on every page, ended at sign-out.

The session cookie holds only a random session id (signed, `_session.SessionSigner`); the row it names
(`askback_people_sessions`, by the id's digest) says whose session it is, the groups their sign-in gave them
(`_groups`), and when it ends. So a session, and the groups it carries, ends for
every copy of its cookie, on every instance sharing the database, the moment its row goes: at sign-out, when its
lifetime runs out (checked against the clock on each read), or when the same person signs in once too often
(`per_person` sessions at most: the oldest ends). Rows past their end are deleted by the next sign-in, so the table
holds at most the live sessions.

Which of a person's sessions a new sign-in ends is decided from plain values (`evicted`); the rest is I/O.
"""

from __future__ import annotations

import hashlib
import secrets
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, cast

from sqlalchemy import Connection, Table, bindparam, delete, insert, select

from askback.identity._groups import groups_column, groups_of_column
from askback.identity._models import SessionRow

if TYPE_CHECKING:
    from askback.db.database import Database

__all__ = ["Sessions", "evicted", "new_session_id"]

_TABLE = cast(Table, SessionRow.__table__)
_s = _TABLE.c

_READ = select(_s.principal, _s.groups, _s.expires_at).where(_s.id_digest == bindparam("digest"))
_ADD = insert(_TABLE)
_END = delete(_TABLE).where(_s.id_digest == bindparam("b_digest"))
_PRUNE = delete(_TABLE).where(_s.expires_at <= bindparam("b_now"))
_OF_PERSON = select(_s.id_digest, _s.created_at).where(_s.principal == bindparam("principal"))


def new_session_id() -> str:
    """A fresh session id: 256 random bits, URL-safe."""
    return secrets.token_urlsafe(32)


def _digest(session_id: str) -> str:
    return hashlib.sha256(session_id.encode()).hexdigest()


def evicted(live: Sequence[tuple[str, float]], *, keep: int) -> list[str]:
    """Of a person's live sessions `(digest, began)`, the ones to end so that `keep` remain: the oldest first
    (ties broken by digest, so every instance chooses the same)."""
    newest_first = sorted(live, key=lambda row: (row[1], row[0]), reverse=True)
    return [digest for digest, _ in newest_first[keep:]]


class Sessions:
    """People's sessions kept in `store` (opened with the identity component among its migrations)."""

    def __init__(self, database: Database) -> None:
        self.database = database

    async def begin(
        self, principal: str, *, now: float, ttl: float, per_person: int, groups: Iterable[str] = ()
    ) -> str:
        """A new session of `principal` (in `groups`) from `now` for `ttl` seconds: its id (for the cookie; only its
        digest is stored). Ends the sessions that have run out, and `principal`'s oldest beyond `per_person`."""
        session_id = new_session_id()
        row = {
            "id_digest": _digest(session_id),
            "principal": principal,
            "groups": groups_column(groups),
            "created_at": now,
            "expires_at": now + ttl,
        }

        def write(conn: Connection) -> None:
            conn.execute(_PRUNE, {"b_now": now})
            conn.execute(_ADD, row)
            live = [(r.id_digest, r.created_at) for r in conn.execute(_OF_PERSON, {"principal": principal}).all()]
            ended = evicted(live, keep=per_person)
            if ended:
                conn.execute(_END, [{"b_digest": digest} for digest in ended])

        await self.database.transaction(write, doing="begin a person's session", immediate=True)
        return session_id

    async def principal_of(self, session_id: str, *, now: float) -> str | None:
        """Whose session `session_id` is, while it lasts; `None` for one that ended, ran out or never was."""
        found = await self.person_of(session_id, now=now)
        return None if found is None else found[0]

    async def person_of(self, session_id: str, *, now: float) -> tuple[str, frozenset[str]] | None:
        """Whose session `session_id` is and their groups, while it lasts; `None` for one that ended, ran out or
        never was."""

        def read(conn: Connection) -> tuple[str, frozenset[str]] | None:
            found = conn.execute(_READ, {"digest": _digest(session_id)}).first()
            if found is None or now >= found.expires_at:
                return None
            return str(found.principal), groups_of_column(found.groups)

        return await self.database.read(read, doing="read a person's session")

    async def end(self, session_id: str) -> None:
        """End the session `session_id` for every copy of its cookie, on every instance."""

        def write(conn: Connection) -> None:
            conn.execute(_END, {"b_digest": _digest(session_id)})

        await self.database.transaction(write, doing="end a person's session", immediate=True)
