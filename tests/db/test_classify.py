"""What a driver error means: "the database is not there" (`StoreUnavailableError`, retryable) or a defect that goes
through as it is, on SQLite as on PostgreSQL (real drivers, real files and servers)."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from askback.db.classify import reachable
from askback.db.database import Database
from askback.errors import StoreUnavailableError

pytestmark = pytest.mark.anyio

SYNTAX = sa.text("SELEC 1")
MISSING_TABLE = sa.text("SELECT n FROM no_such_table")
MISSING_COLUMN = sa.text("SELECT no_such_column")
CREATE = sa.text("CREATE TABLE marks (n integer primary key, s text)")
PAGES = sa.text("PRAGMA page_count")
INSERT = sa.text("INSERT INTO marks (s) VALUES (:s)")
COUNT = sa.text("SELECT count(*) FROM marks")


@pytest.mark.parametrize("statement", [SYNTAX, MISSING_TABLE, MISSING_COLUMN], ids=["syntax", "table", "column"])
@pytest.mark.parametrize("any_database", ["sqlite", "postgresql"], indirect=True)
async def test_a_statement_the_database_refuses_is_a_defect_not_an_outage(any_database: str, statement: Any) -> None:
    database = await Database.open(any_database, components=(), migrate=False, check=False)
    try:
        for run in (database.transaction, database.read):
            try:
                await run(lambda conn: conn.execute(statement).first(), doing="run a bad statement")
            except StoreUnavailableError as exc:
                pytest.fail(f"a refused statement was reported as an outage: {exc}")
            except Exception as exc:  # the driver's own error, as it is
                assert "no_such" in str(exc) or "syntax" in str(exc).lower()
            else:
                pytest.fail("the statement ran")
        assert await database.transaction(lambda conn: conn.execute(sa.text("SELECT 1")).scalar(), doing="go on") == 1
    finally:
        await database.close()


def test_an_sqlite_file_that_cannot_be_opened_is_unavailable(tmp_path: Path) -> None:
    with pytest.raises(StoreUnavailableError, match="unable to open database file") as caught, reachable("open"):
        sqlite3.connect(tmp_path / "no-such-folder" / "a.db").execute("SELECT 1")
    assert isinstance(caught.value.__cause__, sqlite3.OperationalError)


def test_an_sqlite_file_that_is_not_a_database_is_unavailable(tmp_path: Path) -> None:
    path = tmp_path / "a.db"
    path.write_bytes(b"not a database, " * 256)
    with pytest.raises(StoreUnavailableError, match="not a database"), reachable("read"), sqlite3.connect(path) as db:
        db.execute("SELECT 1 FROM sqlite_master")


def test_an_sqlite_file_locked_by_another_writer_is_unavailable(tmp_path: Path) -> None:
    path = tmp_path / "a.db"
    holder = sqlite3.connect(path, isolation_level=None)
    other = sqlite3.connect(path, timeout=0)
    try:
        holder.execute("CREATE TABLE t (n integer)")
        holder.execute("BEGIN EXCLUSIVE")
        with pytest.raises(StoreUnavailableError, match="locked"), reachable("write"):
            other.execute("INSERT INTO t VALUES (1)")
    finally:
        holder.close()
        other.close()


def test_an_sqlite_syntax_error_goes_through_as_it_is() -> None:
    with (
        pytest.raises(sqlite3.OperationalError, match="syntax error"),
        reachable("run"),
        sqlite3.connect(":memory:") as db,
    ):
        db.execute("SELEC 1")


async def test_an_sqlite_file_full_in_the_middle_of_a_transaction_is_unavailable_and_the_connection_goes_on(
    tmp_path: Path,
) -> None:
    # SQLite rolls a transaction back itself when the file cannot grow: the error that ended it is the one reported,
    # and the next transaction runs (no transaction is left open on the connection).
    database = await Database.open(f"sqlite:///{tmp_path / 'a.db'}", components=(), migrate=False, check=False)
    try:
        await database.transaction(lambda conn: conn.execute(CREATE), doing="create")
        pages = await database.transaction(lambda conn: conn.execute(PAGES).scalar(), doing="count pages")
        await database.transaction(
            lambda conn: conn.execute(sa.text(f"PRAGMA max_page_count = {pages + 2}")), doing="cap"
        )

        def fill(conn: Any) -> None:
            for _ in range(50):
                conn.execute(INSERT, {"s": "x" * 3000})

        with pytest.raises(StoreUnavailableError, match="database or disk is full") as caught:
            await database.transaction(fill, doing="fill the file")
        assert getattr(caught.value.__cause__, "sqlite_errorcode", 0) & 0xFF == 13  # SQLITE_FULL
        assert await database.transaction(lambda conn: conn.execute(COUNT).scalar(), doing="count") == 0
        await database.transaction(lambda conn: conn.execute(sa.text("PRAGMA max_page_count = 1000000")), doing="uncap")
        await database.transaction(lambda conn: conn.execute(INSERT, {"s": "fits"}), doing="write")
        assert await database.transaction(lambda conn: conn.execute(COUNT).scalar(), doing="count") == 1
    finally:
        await database.close()
