"""Engines: one async SQLAlchemy engine per database, set up for several processes sharing it.

SQLite files are checked and put in WAL mode before the async driver touches them; every SQLite transaction
begins explicitly (`BEGIN`, or `BEGIN IMMEDIATE` when asked through `BEGIN_IMMEDIATE`). PostgreSQL pools replace
connections by age instead of testing each before use (`Database` retries a transaction once that failed on a
connection the server had dropped), and time out connecting in seconds.
"""

from __future__ import annotations

import contextlib
import sqlite3
import time
from collections.abc import MutableMapping, Sequence
from pathlib import Path
from typing import Any, NoReturn

import aiosqlite
import anyio
import anyio.to_thread
from sqlalchemy import Connection, event
from sqlalchemy.engine import URL
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine

from askback.db.classify import first_line, is_busy
from askback.errors import ConfigurationError, StoreUnavailableError

__all__ = [
    "BEGIN_IMMEDIATE",
    "PG_POOL_RECYCLE",
    "SQLITE_BUSY_TIMEOUT_MS",
    "create_engine",
    "probe_sqlite_file",
    "require_sqlite_file",
]

# Several processes write one SQLite file; a writer waits this long for another's transaction to finish
# before giving up with StoreUnavailableError.
SQLITE_BUSY_TIMEOUT_MS = 10_000
_PG_CONNECT_TIMEOUT = 10
_PG_POOL_SIZE = 16
# Seconds a pooled PostgreSQL connection is used for before it is replaced (at its next checkout): under the idle
# cuts of the usual proxies and balancers in front of a database, and rarely enough to cost nothing per request.
PG_POOL_RECYCLE = 600
# Execution option asking the SQLite BEGIN hook for a write lock up front (see _on_sqlite_begin).
BEGIN_IMMEDIATE = "askback_begin_immediate"


def create_engine(url: URL) -> AsyncEngine:
    if url.get_backend_name() != "sqlite":
        # Instances outlive database restarts and failovers. A test of each connection at checkout would cost three
        # round trips a transaction (BEGIN, an empty statement, ROLLBACK); instead connections are replaced by age,
        # and a dropped one is found by the statement that uses it: SQLAlchemy then discards every connection pooled
        # before the failure, and `Database` runs that transaction again once (see `Database._run`).
        # A connect timeout, so that a database host that drops packets fails a call in seconds, not a minute.
        # A pool larger than SQLAlchemy's default 5: a busy instance would otherwise open and close a connection
        # (a PostgreSQL backend and a login) for every request above five at a time.
        return create_async_engine(
            url,
            # An error's text never carries a statement's parameters (a person's answers, for one) into a log.
            hide_parameters=True,
            pool_pre_ping=False,
            pool_recycle=PG_POOL_RECYCLE,
            pool_size=_PG_POOL_SIZE,
            max_overflow=_PG_POOL_SIZE,
            connect_args={"timeout": _PG_CONNECT_TIMEOUT},
        )
    opener = _SQLiteOpener()
    engine = create_async_engine(url, async_creator=opener, hide_parameters=True)
    # Once, as SQLAlchemy does: a relative path is resolved now, not again at each connect in another directory.
    opener.arguments = engine.dialect.create_connect_args(engine.url)
    event.listen(engine.sync_engine, "connect", _on_sqlite_connect)
    event.listen(engine.sync_engine, "begin", _on_sqlite_begin)
    return engine


class _SQLiteConnection(aiosqlite.Connection):
    """aiosqlite's connection, whose `close` never waits on a worker thread that was already told to stop.

    SQLAlchemy ends a connection it invalidates under a cancellation twice over: a shielded graceful `close` in a task
    of its own, and, when its wait for that is cancelled too (anyio cancels every await of a cancelled scope), a
    forced `stop` beside it. aiosqlite's `close` then queues one more job behind the worker's last and awaits its
    reply for ever; the orphaned task hangs the event loop's shutdown (`asyncio.run`, `askback serve` after Ctrl-C).
    Here a close after a stop, or a stop made while the close waited, waits only for the worker thread to end."""

    async def close(self) -> None:
        if self._running and self._connection is None:
            return
        try:
            if self._running:
                try:
                    await self._execute(self._conn.close)  # type: ignore[no-untyped-call]  # aiosqlite's own
                finally:
                    self._connection = None
                    if self._running:
                        self.stop()
        finally:
            # The worker ends at the stop queued here or beside this close. Waiting for it, shielded, lets its last
            # replies reach the loop while the loop still runs.
            if self._thread.ident is not None:
                with anyio.CancelScope(shield=True):
                    await anyio.to_thread.run_sync(self._thread.join)


class _SQLiteOpener:
    """Opens an engine's driver connections with the arguments SQLAlchemy would give aiosqlite itself."""

    arguments: tuple[Sequence[str], MutableMapping[str, Any]] = ((), {})

    async def __call__(self) -> _SQLiteConnection:
        args, params = self.arguments
        database = str(args[0]) if args else ""
        connection = _SQLiteConnection(lambda: sqlite3.connect(database, **params), 64)
        # As SQLAlchemy does for aiosqlite: an engine never disposed must not keep the process from exiting.
        connection._thread.daemon = True
        try:
            await connection
        except BaseException:
            # A connect cancelled or failed stops the worker: its reply must reach the loop while it still runs.
            with anyio.CancelScope(shield=True):
                await anyio.to_thread.run_sync(connection._thread.join)
            raise
        return connection


def require_sqlite_file(url: URL) -> None:
    """Refuse a missing SQLite file when not migrating, rather than let SQLite create an empty one."""
    database = url.database or ""
    if database in ("", ":memory:") or database.startswith("file:"):
        return
    if not Path(database).exists():
        raise ConfigurationError(
            f"There is no askback database at {database}. Run `askback db upgrade` with the same "
            "ASKBACK_DATABASE_URL to create it, or correct ASKBACK_DATABASE_URL."
        )


def probe_sqlite_file(url: URL) -> None:
    """Open the SQLite file once with the plain driver, and put it in WAL mode, before the async engine does.

    A file that is not a database, or a path that cannot be opened, is then reported here in words. Through the
    async driver it would surface later, and a failed aiosqlite connect leaves a worker thread that calls back into
    the event loop after the caller's loop has closed (a stray "Event loop is closed" traceback). WAL is set once,
    here: several openers of a new file would otherwise each switch it from a rollback journal, and SQLite answers
    such a collision "locked" at once, without waiting, so it is retried until the busy timeout. Runs in a thread."""
    database = url.database or ""
    if database in ("", ":memory:") or database.startswith("file:"):
        return
    deadline = time.monotonic() + SQLITE_BUSY_TIMEOUT_MS / 1000
    while True:
        try:
            with contextlib.closing(sqlite3.connect(database, timeout=SQLITE_BUSY_TIMEOUT_MS / 1000)) as db:
                db.execute("PRAGMA journal_mode = WAL").fetchone()
            return
        except sqlite3.OperationalError as exc:
            if not is_busy(exc) or time.monotonic() > deadline:
                _refuse_sqlite_file(database, exc)
            time.sleep(0.01)
        except sqlite3.DatabaseError as exc:
            _refuse_sqlite_file(database, exc)


def _refuse_sqlite_file(database: str, exc: sqlite3.DatabaseError) -> NoReturn:
    reason = first_line(exc)
    if "not a database" in reason:
        raise ConfigurationError(
            f"{database} is not an SQLite database ({reason}); point ASKBACK_DATABASE_URL at an askback SQLite "
            "database, or at a path where askback may create one (sqlite:///askback.db)"
        ) from None
    raise StoreUnavailableError(
        f"Could not open the SQLite database at {database} ({reason}). Check that its folder exists and that "
        "this user may read and write there, or correct ASKBACK_DATABASE_URL."
    ) from None


def _on_sqlite_connect(dbapi_connection: Any, _record: Any) -> None:
    # The sqlite3 module emits BEGIN itself only before INSERT/UPDATE/DELETE, so a migration's DDL would be
    # committed statement by statement. Take BEGIN over (SQLAlchemy's documented recipe, _on_sqlite_begin).
    dbapi_connection.isolation_level = None
    cursor = dbapi_connection.cursor()
    try:
        # busy_timeout first: switching to WAL needs a lock another process may be holding.
        cursor.execute(f"PRAGMA busy_timeout = {SQLITE_BUSY_TIMEOUT_MS}")
        # WAL lets readers in other processes carry on while one process writes.
        cursor.execute("PRAGMA journal_mode = WAL")
        # In WAL mode NORMAL survives a crashed process (the commit is in the log); only a power loss can drop the
        # last commits. FULL would add a disk sync to every round. Use PostgreSQL where that matters.
        cursor.execute("PRAGMA synchronous = NORMAL")
        cursor.execute("PRAGMA foreign_keys = ON")
    finally:
        cursor.close()


def _on_sqlite_begin(conn: Connection) -> None:
    immediate = conn.get_execution_options().get(BEGIN_IMMEDIATE, False)
    conn.exec_driver_sql("BEGIN IMMEDIATE" if immediate else "BEGIN")
