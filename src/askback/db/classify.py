"""One answer to "does this driver error mean the database is not there?", for every caller.

A database that is down, unreachable, refusing logins or shutting down (on SQLite: a file that cannot be opened,
stays locked, is not a database, is corrupt, read-only or full, or a disk error) is `StoreUnavailableError`
(retryable, the cause chained, no password and no statement parameters in the message); every other error (a bad
statement, a missing table, a constraint) is a defect and goes through unchanged. The store, the round executor (an
application's own queries inside a tool) and the command line all classify here.
"""

from __future__ import annotations

import sqlite3
from types import TracebackType

from sqlalchemy import exc as sa_exc

from askback.errors import StoreUnavailableError

__all__ = ["DRIVER_ERRORS", "first_line", "is_busy", "raised_by_a_driver", "reachable", "unavailable_error"]

# What a driver raises, wrapped by SQLAlchemy or not: the errors worth classifying.
DRIVER_ERRORS = (sa_exc.DBAPIError, sa_exc.TimeoutError, OSError, sqlite3.DatabaseError)

# SQLSTATE classes that mean "the server could not be reached or would not let us in", not "bad statement":
# 08 connection exception, 28 invalid authorization, 3D no such database, 53 insufficient resources,
# 57 operator intervention (shutdown, not accepting connections yet).
_UNAVAILABLE_SQLSTATE_CLASSES = frozenset({"08", "28", "3D", "53", "57"})


def unavailable_error(
    exc: BaseException, *, doing: str = "reach the database", where: str | None = None
) -> StoreUnavailableError | None:
    """The `StoreUnavailableError` for `exc`, or `None` when `exc` does not mean the database is unreachable.
    `where` names the database (its URL with the password hidden) when the caller knows it."""
    if not isinstance(exc, DRIVER_ERRORS) or not _means_unavailable(exc):
        return None
    at = f" at {where}" if where else ""
    advice = (
        "Check that it is running and reachable with these credentials, then retry."
        if where
        else "Nothing was done twice; retry the same request when the database is back."
    )
    return StoreUnavailableError(
        f"Could not {doing}: the database{at} is unavailable ({first_line(exc)}). {advice}",
        public=f"Could not {doing}: the database is unavailable. Nothing was done twice; retry the same request later.",
    )


class reachable:
    """Turn "the database is not there" into `StoreUnavailableError`; let every other error through. (A class
    rather than a generator: it is around every transaction.)"""

    __slots__ = ("doing", "where")

    def __init__(self, doing: str, *, where: str | None = None) -> None:
        self.doing = doing
        self.where = where

    def __enter__(self) -> None:
        return None

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        if exc is None or not isinstance(exc, DRIVER_ERRORS):
            return None
        down = unavailable_error(exc, doing=self.doing, where=self.where)
        if down is None:
            return None
        raise down from exc


# SQLite's primary result codes that mean "the file cannot be used now", not "bad statement" (SQLITE_ERROR, 1: a
# syntax error, no such table or column): PERM, BUSY, LOCKED, NOMEM, READONLY, IOERR, CORRUPT, FULL, CANTOPEN,
# PROTOCOL, AUTH, NOTADB.
_UNAVAILABLE_SQLITE_CODES = frozenset({3, 5, 6, 7, 8, 10, 11, 13, 14, 15, 23, 26})


# The packages whose `OSError` (a refused connection, a timeout) is a database's: a tool's own `OSError` or
# `TimeoutError` (a missing file, a call to another service) is not.
_DRIVER_PACKAGES = ("sqlalchemy", "asyncpg", "psycopg", "aiosqlite", "sqlite3", "askback.db")


def raised_by_a_driver(exc: BaseException) -> bool:
    """Whether `exc` is a database's: a driver's own error class, or an `OSError` raised on its way through a driver
    (a frame of its traceback belongs to one of the database packages)."""
    if isinstance(exc, sa_exc.DBAPIError | sa_exc.TimeoutError | sqlite3.DatabaseError):
        return True
    if not isinstance(exc, OSError):
        return False
    tb = exc.__traceback__
    while tb is not None:
        module = str(tb.tb_frame.f_globals.get("__name__", ""))
        if any(module == name or module.startswith(name + ".") for name in _DRIVER_PACKAGES):
            return True
        tb = tb.tb_next
    return False


def _means_unavailable(exc: BaseException) -> bool:
    orig = exc.orig if isinstance(exc, sa_exc.DBAPIError) else exc
    if isinstance(orig, sqlite3.Error):
        code = getattr(orig, "sqlite_errorcode", None)
        if isinstance(code, int):
            return code & 0xFF in _UNAVAILABLE_SQLITE_CODES
    if isinstance(exc, OSError | sa_exc.TimeoutError | sa_exc.OperationalError | sa_exc.InterfaceError):
        return True
    if isinstance(exc, sqlite3.OperationalError):
        return True
    if isinstance(exc, sa_exc.DBAPIError):
        sqlstate = getattr(exc.orig, "sqlstate", None)
        return exc.connection_invalidated or (
            isinstance(sqlstate, str) and sqlstate[:2] in _UNAVAILABLE_SQLSTATE_CLASSES
        )
    return False


def first_line(exc: BaseException) -> str:
    """The driver's own message, first line only: SQLAlchemy's text would add the statement and its parameters,
    which can carry what a user typed into a form."""
    cause = exc.orig if isinstance(exc, sa_exc.DBAPIError) and exc.orig is not None else exc
    lines = str(cause).strip().splitlines()
    return lines[0] if lines else type(cause).__name__


def is_busy(exc: sqlite3.OperationalError) -> bool:
    """SQLite's "another connection holds the lock" (locked / busy), as opposed to a real failure."""
    text = str(exc).lower()
    return "locked" in text or "busy" in text
