"""askback's per-round statements on a plain `sqlite3` connection.

A round runs three or four tiny transactions. Through SQLAlchemy's connection machinery each costs a few hundred
microseconds of Python; the statements themselves take tens. So for SQLite the store compiles its prebuilt
SQLAlchemy statements once and runs them here, on a connection that quacks like the parts of SQLAlchemy's
`Connection` the store uses (`execute` with `rowcount`, `first`, `scalar`, `scalar_one`). The SQL is still
SQLAlchemy's: nothing is written twice, and the PostgreSQL path runs the same functions on a real `Connection`.
"""

from __future__ import annotations

import contextlib
import sqlite3
from collections.abc import Callable, Sequence
from types import SimpleNamespace
from typing import Any, ClassVar, TypeVar

from sqlalchemy.dialects import sqlite
from sqlalchemy.sql.compiler import SQLCompiler
from sqlalchemy.sql.expression import Executable

_T = TypeVar("_T")
_DIALECT = sqlite.dialect(paramstyle="qmark")


class RawResult:
    def __init__(self, cursor: sqlite3.Cursor) -> None:
        self.rowcount = cursor.rowcount
        self._columns = [d[0] for d in cursor.description] if cursor.description else []
        self._rows: list[Any] = cursor.fetchall() if cursor.description else []

    def first(self) -> Any:
        return SimpleNamespace(**dict(zip(self._columns, self._rows[0], strict=True))) if self._rows else None

    def all(self) -> list[Any]:
        return [SimpleNamespace(**dict(zip(self._columns, row, strict=True))) for row in self._rows]

    def scalar(self) -> Any:
        return self._rows[0][0] if self._rows else None

    def tuples(self) -> list[tuple[Any, ...]]:
        """The rows as plain tuples, in the statement's column order (for long listings)."""
        return list(self._rows)

    def scalar_one(self) -> Any:
        if len(self._rows) != 1:
            raise LookupError(f"expected exactly one row, got {len(self._rows)}")
        return self._rows[0][0]


class RawConnection:
    """One sqlite3 connection in autocommit mode; `transaction(fn)` brackets `fn` in BEGIN/COMMIT."""

    dialect = SimpleNamespace(name="sqlite")
    _compiled: ClassVar[dict[tuple[int, tuple[str, ...]], tuple[str, list[tuple[str, bool, Any]]]]] = {}

    def __init__(self, path: str, *, busy_timeout_ms: int) -> None:
        self._db = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
        self._db.execute(f"PRAGMA busy_timeout = {busy_timeout_ms}")
        self._db.execute("PRAGMA journal_mode = WAL")
        self._db.execute("PRAGMA synchronous = NORMAL")
        self._db.execute("PRAGMA foreign_keys = ON")

    def close(self) -> None:
        self._db.close()

    def transaction(self, fn: Callable[[Any], _T], *, immediate: bool = False) -> _T:
        """`immediate` takes the write lock at BEGIN: a transaction that reads before it writes must, because in WAL
        mode a deferred one that another connection wrote under since its read fails at its first write at once
        (SQLITE_BUSY, without waiting)."""
        self._db.execute("BEGIN IMMEDIATE" if immediate else "BEGIN")
        try:
            result = fn(self)
            self._db.execute("COMMIT")
        except BaseException:
            # After some errors (a full disk, an I/O error) SQLite has already rolled the transaction back: only one
            # still open is rolled back here, and a failure to do so never hides the error that ended it. A failed
            # COMMIT is rolled back too, so that the connection is left outside any transaction.
            if self._db.in_transaction:
                with contextlib.suppress(sqlite3.Error):
                    self._db.execute("ROLLBACK")
            raise
        return result

    def execute(
        self, statement: Executable, params: dict[str, Any] | Sequence[dict[str, Any]] | None = None
    ) -> RawResult:
        many = isinstance(params, Sequence) and not isinstance(params, dict)
        rows: Sequence[dict[str, Any]] = params if many else [params or {}]  # type: ignore[assignment, list-item]
        sql, order = self._compile(statement, tuple(rows[0]) if rows else ())
        values = [[row[name] if given else literal for name, given, literal in order] for row in rows]
        cursor = self._db.cursor()
        try:
            if many:
                cursor.executemany(sql, values)
            else:
                cursor.execute(sql, values[0])
            return RawResult(cursor)
        finally:
            cursor.close()

    def _compile(self, statement: Executable, keys: tuple[str, ...]) -> tuple[str, list[tuple[str, bool, Any]]]:
        """The SQL text, and for each `?` in order: the parameter's name, whether the caller gives it, and the
        literal value compiled into the statement when not (such as `status = 'running'`)."""
        # The prebuilt statements live for the process, so their id is a stable cache key.
        key = (id(statement), keys)
        found = self._compiled.get(key)
        if found is None:
            compiled: SQLCompiler = statement.compile(dialect=_DIALECT, column_keys=list(keys))  # type: ignore[attr-defined]
            order = [
                (name, name in keys, None if name in keys else compiled.binds[name].effective_value)
                for name in compiled.positiontup or []
            ]
            found = (compiled.string, order)
            self._compiled[key] = found
        return found
