"""`Database`: one database opened once per process, shared by every askback product. It holds the engine, runs
transactions and reads (on SQLite's fast path where it can), takes the database-wide locks, and brings each
component's schema (its own Alembic history) to its newest revision or checks that it is there.

It knows no product's tables: the server kit's ledgers and audit log, the event log (`askback.store`), the runtime's
parked calls and each product's own tables are repositories built on it. A product is handed the `Database` (and
the repositories it uses), never more.

Several processes share one database (one machine with SQLite, many with PostgreSQL), so whatever must happen one at
a time is decided by the database: SQLite's write lock taken at BEGIN (BEGIN IMMEDIATE), or a PostgreSQL advisory
lock held until the transaction ends. Driver failures become `StoreUnavailableError` here (`askback.db.classify`).
"""

from __future__ import annotations

import hashlib
import sqlite3
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AbstractContextManager, asynccontextmanager
from typing import Any, TypeVar

import anyio
import anyio.to_thread
from sqlalchemy import Connection, text
from sqlalchemy import exc as sa_exc
from sqlalchemy.engine import make_url
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from askback.db import migrate
from askback.db.classify import is_busy, reachable
from askback.db.engine import (
    BEGIN_IMMEDIATE,
    SQLITE_BUSY_TIMEOUT_MS,
    create_engine,
    probe_sqlite_file,
    require_sqlite_file,
)
from askback.db.sqlite import RawConnection
from askback.db.urls import normalize_database_url, safe_database_url
from askback.errors import ConfigurationError

__all__ = ["Database", "hold_lock"]

_T = TypeVar("_T")

# Any fixed numbers, the same in every askback process: the PostgreSQL advisory locks migrators and set-ups queue on.
_PG_MIGRATION_LOCK = 0x61736B62
_PG_SETUP_LOCK = 0x61736B63
_ADVISORY = text("SELECT pg_advisory_xact_lock(:key)")


def _lock_number(key: str) -> int:
    """The same signed 64-bit number for `key` in every process (Python's own `hash` of a str differs per process)."""
    return int.from_bytes(hashlib.sha256(f"askback.lock:{key}".encode()).digest()[:8], "big", signed=True)


def hold_lock(conn: Connection, key: str) -> None:
    """Inside a product's transaction (`Database.transaction(..., immediate=True)`'s `conn`): hold the lock named
    `key` among every process sharing the database until the transaction ends, for a count-then-insert that must not
    interleave with another (a cap per principal). PostgreSQL: the advisory lock of `key`'s number, so other keys
    go on; SQLite: the immediate transaction already holds the database's write lock."""
    if conn.dialect.name == "postgresql":
        conn.execute(_ADVISORY, {"key": _lock_number(key)})


class _StaleConnection(Exception):
    """A statement of a transaction found its pooled connection dropped by the server, before any commit."""


async def _dropped_is_stale(work: Awaitable[_T], attempt: int) -> _T:
    try:
        return await work
    except sa_exc.DBAPIError as exc:
        if attempt == 1 and exc.connection_invalidated:
            raise _StaleConnection from exc
        raise


class Database:
    """The engine, transactions, locks and schema of one database. Make one with `await Database.open(url, ...)`."""

    def __init__(
        self,
        engine: AsyncEngine,
        *,
        safe_url: str,
        sqlite_path: str | None = None,
        components: tuple[migrate.Component, ...] = (),
    ) -> None:
        self._engine = engine
        self._safe_url = safe_url
        self._sqlite_path = sqlite_path
        self.components = components
        self._raw: RawConnection | None = None

    @classmethod
    async def open(
        cls,
        url: str,
        *,
        components: tuple[migrate.Component, ...],
        migrate: bool | None = None,
        check: bool = True,
    ) -> Database:
        """Connect, then migrate `components` (`migrate=True`) or check that their schema is current
        (`migrate=False`). `migrate=None` migrates SQLite, whose file belongs to this deployment, and never
        PostgreSQL, whose schema changes only through `askback db upgrade`. `check=False` skips the check (for the
        upgrade itself)."""
        parsed = make_url(normalize_database_url(url))
        is_sqlite = parsed.get_backend_name() == "sqlite"
        if migrate is None:
            migrate = is_sqlite
        if is_sqlite and not migrate and check:
            require_sqlite_file(parsed)
        if is_sqlite:
            # In a thread: another process may hold the file's lock while it creates or migrates it.
            await anyio.to_thread.run_sync(probe_sqlite_file, parsed)
        database = cls(
            create_engine(parsed),
            safe_url=safe_database_url(parsed),
            sqlite_path=parsed.database if is_sqlite else None,
            components=components,
        )
        try:
            if migrate:
                await database.upgrade()
            elif check:
                await database.require_head()
        except BaseException:
            await database.close()
            raise
        return database

    @property
    def engine(self) -> AsyncEngine:
        """The SQLAlchemy engine, for an application that keeps its own tables in the same database."""
        return self._engine

    @property
    def safe_url(self) -> str:
        """The database URL with any password hidden."""
        return self._safe_url

    @property
    def is_sqlite(self) -> bool:
        return self._sqlite_path is not None

    async def close(self) -> None:
        await self._engine.dispose()
        if self._raw is not None:
            self._raw.close()
            self._raw = None

    def reachable(self, doing: str) -> AbstractContextManager[None]:
        """Around work on this database: a driver failure becomes `StoreUnavailableError`, saying it could not
        `doing`, and where (the URL without its password)."""
        return reachable(doing, where=self._safe_url)

    async def ping(self) -> None:
        """Raise `StoreUnavailableError` unless the database answers a trivial query."""
        with self.reachable("check the database"):
            async with self._engine.connect() as conn:
                await conn.execute(text("SELECT 1"))

    async def transaction(self, fn: Callable[[Any], _T], *, doing: str, immediate: bool = False) -> _T:
        """Run `fn(conn)` in one transaction, for a product's own tables: `conn.execute(statement, params)` with
        `.rowcount`, `.first()`, `.scalar()` and `.scalar_one()` on its result. Statements must be built once (module
        constants with bound parameters), as SQLite's fast path compiles each statement object once. `immediate`
        takes SQLite's write lock at BEGIN (for a transaction that reads, then writes). A database that cannot be
        reached is `StoreUnavailableError`, saying it could not `doing`."""
        with self.reachable(doing):
            return await self._run(fn, immediate=immediate)

    async def read(self, fn: Callable[[Any], _T], *, doing: str) -> _T:
        """Run the reads of `fn(conn)` outside any transaction: on PostgreSQL one round trip per statement (no
        BEGIN and COMMIT around it); on SQLite the fast path, as `transaction`. For reads that need no consistent
        snapshot across statements."""
        with self.reachable(doing):
            if self._sqlite_path is not None:
                return await self._run(fn)
            return await self._on_a_live_connection(fn, autocommit=True)

    @asynccontextmanager
    async def exclusive(self) -> AsyncIterator[AsyncConnection]:
        """A transaction that runs alone among every process sharing the database (SQLite's write lock taken at
        BEGIN; a PostgreSQL advisory lock), for an application's idempotent set-up: creating its tables,
        seeding rows. A deferred SQLite transaction that reads and then writes fails at once with "database is
        locked" when another process writes in between; this one waits its turn instead."""
        engine = self._engine.execution_options(**{BEGIN_IMMEDIATE: True})
        with self.reachable("set up the application's tables"):
            async with engine.begin() as conn:
                if conn.dialect.name == "postgresql":
                    await conn.execute(_ADVISORY, {"key": _PG_SETUP_LOCK})
                yield conn

    @asynccontextmanager
    async def locked(self, key: str) -> AsyncIterator[AsyncConnection]:
        """A transaction that holds the lock named `key` among every process sharing the database, for work that must
        happen once at a time across instances and touches nothing but the database (never wait for the network while
        holding it): PostgreSQL takes the advisory lock `pg_advisory_xact_lock` of a stable 64-bit hash of `key`, so
        other keys go on; SQLite takes the database's write lock at BEGIN (BEGIN IMMEDIATE), so every other writer
        waits, up to its busy timeout. The lock lasts until the transaction ends: do the writes that go with it
        through the connection yielded (on SQLite a write through any other connection would wait for this one), and
        commit early with `await conn.commit()` if the commit must not be cancelled with the block."""
        engine = self._engine.execution_options(**{BEGIN_IMMEDIATE: True})
        number = _lock_number(key)
        with self.reachable(f"take the lock {key!r}"):
            async with engine.begin() as conn:
                if conn.dialect.name == "postgresql":
                    await conn.execute(_ADVISORY, {"key": number})
                yield conn

    # The schema ---------------------------------------------------------------------------------------------

    async def upgrade(self) -> None:
        """Bring every component's schema to its newest revision; a no-op when they are there."""
        # Migrators must run one at a time: two processes would both create the tables, and two in one
        # process would trample Alembic's module-global context. So each takes a database-wide lock before
        # Alembic reads the version tables: SQLite's write lock (BEGIN IMMEDIATE) or a PostgreSQL advisory
        # lock, both held until this transaction ends; whoever comes second then finds the schema at head.
        engine = self._engine.execution_options(**{BEGIN_IMMEDIATE: True})
        components = self.components
        with self.reachable("upgrade the database schema"):
            async with engine.begin() as conn:
                if conn.dialect.name == "postgresql":
                    await conn.execute(_ADVISORY, {"key": _PG_MIGRATION_LOCK})
                await conn.run_sync(lambda sync: migrate.upgrade(sync, components))

    async def revisions(self) -> dict[str, str | None]:
        """The revision the database is at for each of its components (`None`: never created)."""
        components = self.components

        def read(sync: Connection) -> dict[str, str | None]:
            return {c.name: migrate.read_revision(sync, c) for c in components}

        with self.reachable("read the database schema revision"):
            async with self._engine.connect() as conn:
                return await conn.run_sync(read)

    async def schema_behind(self) -> bool:
        """True when the database is at an older revision than this release needs, for any component. A newer
        revision (a later release already upgraded it, during a rolling update) is not "behind": migrations keep
        the previous release working."""
        found = await self.revisions()
        return any(migrate.schema_status(found[c.name], c) in ("behind", "missing") for c in self.components)

    async def require_head(self) -> None:
        """Raise `ConfigurationError`, saying what to run, unless every component's schema is current."""
        found = await self.revisions()
        for component in self.components:
            current = found[component.name]
            status = migrate.schema_status(current, component)
            head = migrate.head_revision(component)
            if status == "current":
                continue
            if status == "missing":
                raise ConfigurationError(
                    f"The database at {self._safe_url} has no askback tables yet. Run `askback db upgrade` with "
                    "the same ASKBACK_DATABASE_URL to create them, then start askback again."
                )
            if status == "ahead":
                raise ConfigurationError(
                    f"The database at {self._safe_url} is at schema revision {current!r}, which this version of "
                    f"askback does not know (its newest is {head!r}): a newer askback upgraded it. Install that "
                    "newer askback here too, or point ASKBACK_DATABASE_URL at another database."
                )
            raise ConfigurationError(
                f"The database at {self._safe_url} is at schema revision {current!r}, but this askback needs "
                f"{head!r}. Run `askback db upgrade` with the same ASKBACK_DATABASE_URL, then start askback again."
            )

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
        return await self._on_a_live_connection(fn, autocommit=False)

    async def _on_a_live_connection(self, fn: Callable[[Any], _T], *, autocommit: bool) -> _T:
        """PostgreSQL: run `fn` in a transaction (or, `autocommit`, statement by statement), once more if its
        connection turns out to have been dropped by the server (a restart, a failover, an idle cut), which SQLAlchemy
        then discards with every connection pooled before it. Only a failure inside `fn` is retried: the
        transaction did not commit, so running it again does nothing twice. A failure at the commit itself is not
        retried (whether it committed is unknown) and surfaces as `StoreUnavailableError`, retryable by the client:
        the ledgers' claims then decide, so no effect runs twice."""
        for attempt in (1, 2):
            try:
                async with self._engine.connect() as conn:
                    if autocommit:
                        conn = await conn.execution_options(isolation_level="AUTOCOMMIT")
                        return await _dropped_is_stale(conn.run_sync(fn), attempt)
                    async with conn.begin():
                        result = await _dropped_is_stale(conn.run_sync(fn), attempt)
                    return result
            except _StaleConnection:
                continue
        raise AssertionError("unreachable: the second attempt raises")

    def _run_waiting(self, fn: Callable[[Any], _T], immediate: bool) -> _T:
        assert self._sqlite_path is not None
        raw = RawConnection(self._sqlite_path, busy_timeout_ms=SQLITE_BUSY_TIMEOUT_MS)
        try:
            return raw.transaction(fn, immediate=immediate)
        finally:
            raw.close()
