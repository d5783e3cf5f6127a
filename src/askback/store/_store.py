"""`Store`: opening the database, its schema (each component's Alembic history), and database-wide locks. What it
stores is in `_flows` (ledgers, completions, held answers), `_audit_log` and `_events` (the shared event log)."""

from __future__ import annotations

import hashlib
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import anyio
import anyio.to_thread
from sqlalchemy import Connection, text
from sqlalchemy.engine import make_url
from sqlalchemy.ext.asyncio import AsyncConnection

from askback.db import migrate
from askback.db.engine import BEGIN_IMMEDIATE, create_engine, probe_sqlite_file, require_sqlite_file
from askback.db.urls import normalize_database_url
from askback.errors import ConfigurationError
from askback.store._base import MIGRATIONS
from askback.store._events import Events
from askback.store._flows import Flows

__all__ = ["Store", "hold_lock"]

# Any fixed number, the same in every askback process: the PostgreSQL advisory lock that migrators queue on.
_PG_MIGRATION_LOCK = 0x61736B62
_PG_SETUP_LOCK = 0x61736B63


_ADVISORY = text("SELECT pg_advisory_xact_lock(:key)")


def _lock_number(key: str) -> int:
    """The same signed 64-bit number for `key` in every process (Python's own `hash` of a str differs per process)."""
    return int.from_bytes(hashlib.sha256(f"askback.lock:{key}".encode()).digest()[:8], "big", signed=True)


def hold_lock(conn: Connection, key: str) -> None:
    """Inside a product's transaction (`Store.transaction(..., immediate=True)`'s `conn`): hold the lock named `key`
    among every process sharing the database until the transaction ends, for a count-then-insert that must not
    interleave with another (a cap per principal). PostgreSQL: the advisory lock of `key`'s number, so other keys
    go on; SQLite: the immediate transaction already holds the database's write lock."""
    if conn.dialect.name == "postgresql":
        conn.execute(_ADVISORY, {"key": _lock_number(key)})


class Store(Events, Flows):
    """The database behind effects, rounds, completions, audit and events. Make one with `await Store.open(url)`."""

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
        parsed = make_url(normalize_database_url(url))
        is_sqlite = parsed.get_backend_name() == "sqlite"
        if migrate is None:
            migrate = is_sqlite
        if is_sqlite and not migrate and check:
            require_sqlite_file(parsed)
        if is_sqlite:
            # In a thread: another process may hold the file's lock while it creates or migrates it.
            await anyio.to_thread.run_sync(probe_sqlite_file, parsed)
        store = cls(
            create_engine(parsed),
            safe_url=parsed.render_as_string(hide_password=True),
            sqlite_path=parsed.database if is_sqlite else None,
            components=components,
            audit_chain=audit_chain,
        )
        try:
            if migrate:
                await store.upgrade()
            elif check:
                await store._require_head()
        except BaseException:
            await store.close()
            raise
        return store

    async def upgrade(self) -> None:
        """Bring every component's schema to its newest revision; a no-op when they are there."""
        # Migrators must run one at a time: two processes would both create the tables, and two in one
        # process would trample Alembic's module-global context. So each takes a database-wide lock before
        # Alembic reads the version tables: SQLite's write lock (BEGIN IMMEDIATE) or a PostgreSQL advisory
        # lock, both held until this transaction ends; whoever comes second then finds the schema at head.
        engine = self._engine.execution_options(**{BEGIN_IMMEDIATE: True})
        components = self._components
        with self._reachable("upgrade the database schema"):
            async with engine.begin() as conn:
                if conn.dialect.name == "postgresql":
                    await conn.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": _PG_MIGRATION_LOCK})
                await conn.run_sync(lambda sync: migrate.upgrade(sync, components))

    @asynccontextmanager
    async def exclusive(self) -> AsyncIterator[AsyncConnection]:
        """A transaction that runs alone among every process sharing the database (SQLite's write lock taken at
        BEGIN; a PostgreSQL advisory lock), for an application's idempotent set-up: creating its tables,
        seeding rows. A deferred SQLite transaction that reads and then writes fails at once with "database is
        locked" when another process writes in between; this one waits its turn instead."""
        engine = self._engine.execution_options(**{BEGIN_IMMEDIATE: True})
        with self._reachable("set up the application's tables"):
            async with engine.begin() as conn:
                if conn.dialect.name == "postgresql":
                    await conn.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": _PG_SETUP_LOCK})
                yield conn

    @asynccontextmanager
    async def locked(self, key: str) -> AsyncIterator[AsyncConnection]:
        """A transaction that holds the lock named `key` among every process sharing the database, for work that must
        happen once at a time across instances and touches nothing but the database (never wait for the network while
        holding it): PostgreSQL takes the advisory lock `pg_advisory_xact_lock` of a stable 64-bit hash of `key`, so
        other keys go on; SQLite takes the database's write lock at BEGIN (BEGIN IMMEDIATE), so every other writer
        waits, up to its busy timeout. The lock lasts
        until the transaction ends: do the writes that go with it through the connection yielded (on SQLite a write
        through any other connection would wait for this one), and commit early with `await conn.commit()` if the
        commit must not be cancelled with the block."""
        engine = self._engine.execution_options(**{BEGIN_IMMEDIATE: True})
        number = _lock_number(key)
        with self._reachable(f"take the lock {key!r}"):
            async with engine.begin() as conn:
                if conn.dialect.name == "postgresql":
                    await conn.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": number})
                yield conn

    async def revisions(self) -> dict[str, str | None]:
        """The revision the database is at for each of this store's components (`None`: never created)."""
        components = self._components

        def read(sync: Connection) -> dict[str, str | None]:
            return {c.name: migrate.read_revision(sync, c) for c in components}

        with self._reachable("read the database schema revision"):
            async with self._engine.connect() as conn:
                return await conn.run_sync(read)

    async def schema_behind(self) -> bool:
        """True when the database is at an older revision than this release needs, for any component. A newer
        revision (a later release already upgraded it, during a rolling update) is not "behind": migrations keep
        the previous release working."""
        found = await self.revisions()
        return any(migrate.schema_status(found[c.name], c) in ("behind", "missing") for c in self._components)

    async def current_revision(self) -> str | None:
        """The server kit's schema revision; `None` when its tables were never created."""
        return (await self.revisions())[MIGRATIONS.name]

    @staticmethod
    def head_revision() -> str:
        """The server kit's schema revision this version of askback needs."""
        return migrate.head_revision(MIGRATIONS)

    async def _require_head(self) -> None:
        found = await self.revisions()
        for component in self._components:
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
