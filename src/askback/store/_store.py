"""`Store`: the shared database and the repositories on it, composed. `database` (a `Database`: the engine,
transactions, locks and schema), `flows` (the ledgers, completions and held answers: the server kit's), `audit_log`
and `events` (the shared event log). A product is handed the parts it uses, never the whole store."""

from __future__ import annotations

import warnings
from collections.abc import Callable, Sequence
from contextlib import AbstractAsyncContextManager
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from askback.audit import AuditEvent, AuditFilter
from askback.db import migrate
from askback.db.database import Database
from askback.store._audit_log import AuditLog
from askback.store._events import EventLog, StoredEvent
from askback.store._flows import Flows
from askback.store.models import VERSION_TABLE

__all__ = ["MIGRATIONS", "Store"]

# The server kit's schema history.
MIGRATIONS = migrate.Component("server", Path(__file__).parent / "migrations", VERSION_TABLE, head="0010")

_T = TypeVar("_T")

# Undocumented names a `Store` had before it was composed, and the part each moved to (`Store.__getattr__`).
_MOVED = {
    "add_audit_many": ("audit_log", "add_many"),
    "verify_audit": ("audit_log", "verify"),
    "claim_effect": ("flows", "claim_effect"),
    "finish_effect": ("flows", "finish_effect"),
    "release_effect": ("flows", "release_effect"),
    "effect": ("flows", "effect"),
    "claim_round": ("flows", "claim_round"),
    "round_outcome": ("flows", "round_outcome"),
    "finish_flow": ("flows", "finish_flow"),
    "held_answers": ("flows", "held_answers"),
    "watching": ("flows", "watching"),
    "safe_url": ("database", "safe_url"),
    "ping": ("database", "ping"),
    "upgrade": ("database", "upgrade"),
    "revisions": ("database", "revisions"),
    "schema_behind": ("database", "schema_behind"),
}


def _moved(old: str, new: str) -> None:
    warnings.warn(f"Store.{old} is deprecated: use Store.{new}", DeprecationWarning, stacklevel=3)


class Store:
    """The database behind effects, rounds, completions, audit and events, and the repositories on it. Make one
    with `await Store.open(url)`."""

    def __init__(self, database: Database, *, audit_chain: str | None = None) -> None:
        self.database = database
        self.audit_log = AuditLog(database, chain=audit_chain)
        self.flows = Flows(database, self.audit_log)
        self.events = EventLog(database)

    @classmethod
    async def open(
        cls,
        url: str,
        *,
        migrate: bool | None = None,
        check: bool = True,
        components: tuple[migrate.Component, ...] = (MIGRATIONS,),
        audit_chain: str | None = None,
    ) -> Store:
        """Connect, then migrate (`migrate=True`) or check that the schema is current (`migrate=False`).

        `migrate=None` migrates SQLite, whose file belongs to this deployment, and never PostgreSQL, whose
        schema changes only through `askback db upgrade`. `check=False` skips the check (for the upgrade itself).
        `components` are the schema histories this store needs (the server kit's by default). `audit_chain` names
        the audit chain this store appends to; by default the process's own (`askback.audit.emit.chain_id`).
        """
        database = await Database.open(url, components=components, migrate=migrate, check=check)
        return cls(database, audit_chain=audit_chain)

    async def close(self) -> None:
        try:
            await self.events.close()
        finally:
            await self.database.close()

    async def current_revision(self) -> str | None:
        """The server kit's schema revision; `None` when its tables were never created."""
        return (await self.database.revisions())[MIGRATIONS.name]

    @staticmethod
    def head_revision() -> str:
        """The server kit's schema revision this version of askback needs."""
        return migrate.head_revision(MIGRATIONS)

    # What a store did itself before it was composed (documented), each now a part's: deprecated -----------------

    @property
    def engine(self) -> AsyncEngine:
        """Deprecated: `store.database.engine`."""
        _moved("engine", "database.engine")
        return self.database.engine

    async def transaction(self, fn: Callable[[Any], _T], *, doing: str, immediate: bool = False) -> _T:
        """Deprecated: `store.database.transaction`."""
        _moved("transaction", "database.transaction")
        return await self.database.transaction(fn, doing=doing, immediate=immediate)

    async def read(self, fn: Callable[[Any], _T], *, doing: str) -> _T:
        """Deprecated: `store.database.read`."""
        _moved("read", "database.read")
        return await self.database.read(fn, doing=doing)

    def exclusive(self) -> AbstractAsyncContextManager[AsyncConnection]:
        """Deprecated: `store.database.exclusive()`."""
        _moved("exclusive", "database.exclusive")
        return self.database.exclusive()

    def locked(self, key: str) -> AbstractAsyncContextManager[AsyncConnection]:
        """Deprecated: `store.database.locked(key)`."""
        _moved("locked", "database.locked")
        return self.database.locked(key)

    async def audit(self, flt: AuditFilter = AuditFilter()) -> list[AuditEvent]:
        """Deprecated: `store.audit_log.query(flt)`."""
        _moved("audit", "audit_log.query")
        return await self.audit_log.query(flt)

    async def prune_held(self, *, now: float) -> int:
        """Deprecated: `store.flows.prune_held(now=...)`."""
        _moved("prune_held", "flows.prune_held")
        return await self.flows.prune_held(now=now)

    async def events_after(self, cursor: int, *, types: Sequence[str] = (), limit: int = 500) -> list[StoredEvent]:
        """Deprecated: `store.events.events_after`."""
        _moved("events_after", "events.events_after")
        return await self.events.events_after(cursor, types=types, limit=limit)

    async def latest_event_id(self) -> int:
        """Deprecated: `store.events.latest_event_id`."""
        _moved("latest_event_id", "events.latest_event_id")
        return await self.events.latest_event_id()

    # A bounded wait that answers whether anything came, as `EventLog.wait_for_events` is.
    async def wait_for_events(self, cursor: int, *, timeout: float) -> bool:  # noqa: ASYNC109
        """Deprecated: `store.events.wait_for_events`."""
        _moved("wait_for_events", "events.wait_for_events")
        return await self.events.wait_for_events(cursor, timeout=timeout)

    @property
    def event_poll_interval(self) -> float:
        """Deprecated: `store.events.poll_interval`."""
        _moved("event_poll_interval", "events.poll_interval")
        return self.events.poll_interval

    @event_poll_interval.setter
    def event_poll_interval(self, seconds: float) -> None:
        _moved("event_poll_interval", "events.poll_interval")
        self.events.poll_interval = seconds

    if not TYPE_CHECKING:
        # Hidden from type checkers, so typed code names the part at once; other code is warned.

        def __getattr__(self, name: str) -> Any:
            # Reached only for a name the store does not have: an undocumented one that moved to a part.
            moved = _MOVED.get(name)
            if moved is None:
                raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")
            part, attribute = moved
            _moved(name, f"{part}.{attribute}")
            return getattr(getattr(self, part), attribute)
