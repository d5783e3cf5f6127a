"""The store's base: the database connection, transactions on SQLite's fast path, and waking waiters in this
process when a claim settles. The ledgers and the audit log (`_flows`, `_audit_log`) build on it."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path
from typing import Any, TypeVar

import anyio
import anyio.to_thread
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from askback.db import migrate
from askback.db.classify import is_busy, reachable
from askback.db.engine import SQLITE_BUSY_TIMEOUT_MS
from askback.db.sqlite import RawConnection
from askback.store._models import VERSION_TABLE

__all__ = ["MIGRATIONS", "StoreBase"]

# The server kit's schema history.
MIGRATIONS = migrate.Component("server", Path(__file__).parent / "migrations", VERSION_TABLE)

_T = TypeVar("_T")


class StoreBase:
    """The connection and transactions every part of the store runs on."""

    def __init__(
        self,
        engine: AsyncEngine,
        *,
        safe_url: str,
        sqlite_path: str | None = None,
        components: tuple[migrate.Component, ...] = (MIGRATIONS,),
        audit_chain: str | None = None,
    ) -> None:
        self._engine = engine
        self._safe_url = safe_url
        self._sqlite_path = sqlite_path
        self._components = components
        self._raw: RawConnection | None = None
        self._waiters: set[anyio.Event] = set()
        self._audit_chain = audit_chain
        # The last committed (seq, hash) of each chain this store appended to: the head it expects to move on from.
        self._audit_heads: dict[str, tuple[int, str]] = {}

    @property
    def engine(self) -> AsyncEngine:
        """The SQLAlchemy engine, for an application that keeps its own tables in the same database."""
        return self._engine

    @property
    def safe_url(self) -> str:
        """The database URL with any password hidden."""
        return self._safe_url

    async def close(self) -> None:
        await self._engine.dispose()
        if self._raw is not None:
            self._raw.close()
            self._raw = None

    async def ping(self) -> None:
        """Raise `StoreUnavailableError` unless the database answers a trivial query."""
        with self._reachable("check the database"):
            async with self._engine.connect() as conn:
                await conn.execute(text("SELECT 1"))

    async def transaction(self, fn: Callable[[Any], _T], *, doing: str, immediate: bool = False) -> _T:
        """Run `fn(conn)` in one transaction, for a product's own tables: `conn.execute(statement, params)` with
        `.rowcount`, `.first()`, `.scalar()` and `.scalar_one()` on its result. Statements must be built once (module
        constants with bound parameters), as SQLite's fast path compiles each statement object once. `immediate`
        takes SQLite's write lock at BEGIN (for a transaction that reads, then writes). A database that cannot be
        reached is `StoreUnavailableError`, saying it could not `doing`."""
        with self._reachable(doing):
            return await self._run(fn, immediate=immediate)

    async def read(self, fn: Callable[[Any], _T], *, doing: str) -> _T:
        """Run the reads of `fn(conn)` outside any transaction: on PostgreSQL one round trip per statement (no
        BEGIN and COMMIT around it); on SQLite the fast path, as `transaction`. For reads that need no consistent
        snapshot across statements."""
        with self._reachable(doing):
            if self._sqlite_path is not None:
                return await self._run(fn)
            async with self._engine.connect() as conn:
                auto = await conn.execution_options(isolation_level="AUTOCOMMIT")
                return await auto.run_sync(fn)

    # Waiting for another attempt ---------------------------------------------------------------------------

    @contextmanager
    def watching(self) -> Iterator[anyio.Event]:
        """An event set the next time this process settles a claim (an outcome recorded, a claim released), so
        that a wait for another attempt in the same process wakes at once instead of at its next poll."""
        event = anyio.Event()
        self._waiters.add(event)
        try:
            yield event
        finally:
            self._waiters.discard(event)

    def _settled(self) -> None:
        waiters, self._waiters = self._waiters, set()
        for event in waiters:
            event.set()

    # Plumbing ---------------------------------------------------------------------------------------------

    async def _run(self, fn: Callable[[Any], _T], *, immediate: bool = False) -> _T:
        """Run `fn` in one transaction.

        SQLite: one of askback's transactions takes tens of microseconds, less than handing it to a thread, so it is
        first tried right here without waiting for locks; if another process holds the write lock it is rolled
        back and run again in a worker thread that waits (busy timeout), so the event loop never blocks on another
        process. PostgreSQL: the async driver."""
        if self._sqlite_path is not None:
            if self._raw is None:
                self._raw = RawConnection(self._sqlite_path, busy_timeout_ms=0)
            try:
                return self._raw.transaction(fn, immediate=immediate)
            except sqlite3.OperationalError as exc:
                if not is_busy(exc):
                    raise
            return await anyio.to_thread.run_sync(self._run_waiting, fn, immediate)
        async with self._engine.begin() as conn:
            return await conn.run_sync(fn)

    def _run_waiting(self, fn: Callable[[Any], _T], immediate: bool) -> _T:
        assert self._sqlite_path is not None
        raw = RawConnection(self._sqlite_path, busy_timeout_ms=SQLITE_BUSY_TIMEOUT_MS)
        try:
            return raw.transaction(fn, immediate=immediate)
        finally:
            raw.close()

    def _reachable(self, doing: str) -> AbstractContextManager[None]:
        return reachable(doing, where=self._safe_url)
