"""PostgreSQL connections: no test of each connection at checkout, replacement by age, and a transaction that meets a
connection the server dropped runs again once on a fresh one (real PostgreSQL; backends ended with
`pg_terminate_backend`, as a restart or an idle cut would end them)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest
import sqlalchemy as sa

from askback.db.database import Database
from askback.db.engine import PG_POOL_RECYCLE
from askback.errors import StoreUnavailableError

pytestmark = pytest.mark.anyio

SELF = sa.text("SELECT pg_backend_pid()")
TABLE = sa.text("CREATE TABLE IF NOT EXISTS marks (n integer)")
MARK = sa.text("INSERT INTO marks (n) VALUES (:n)")
COUNT = sa.text("SELECT count(*) FROM marks")


@pytest.fixture
async def database(fresh_pg_url: str) -> AsyncIterator[Database]:
    database = await Database.open(fresh_pg_url, components=(), migrate=False, check=False)
    try:
        yield database
    finally:
        await database.close()


async def _end_backends(url: str) -> int:
    """End every other backend of the database, as a server restart would, from a connection of its own."""
    other = await Database.open(url, components=(), migrate=False, check=False)
    try:

        def end(conn: Any) -> int:
            found = conn.execute(
                sa.text(
                    "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
                    "WHERE datname = current_database() AND pid <> pg_backend_pid()"
                )
            )
            return int(found.scalar_one())

        return await other.transaction(end, doing="end the other backends")
    finally:
        await other.close()


async def test_a_checkout_is_not_tested_and_connections_are_replaced_by_age(database: Database) -> None:
    pings: list[object] = []
    dialect = database.engine.dialect
    original = dialect.do_ping

    def counted(connection: Any) -> bool:
        pings.append(connection)
        return original(connection)

    dialect.do_ping = counted  # type: ignore[method-assign]
    for _ in range(20):
        await database.transaction(lambda conn: conn.execute(SELF).scalar_one(), doing="read")
        await database.read(lambda conn: conn.execute(SELF).scalar_one(), doing="read")
    assert pings == []
    assert database.engine.pool._recycle == PG_POOL_RECYCLE  # type: ignore[attr-defined]


async def test_a_transaction_on_a_dropped_connection_runs_again_once_and_writes_once(
    database: Database, fresh_pg_url: str
) -> None:
    await database.transaction(lambda conn: conn.execute(TABLE), doing="create")
    before = await database.transaction(lambda conn: conn.execute(SELF).scalar_one(), doing="read")
    assert await _end_backends(fresh_pg_url) >= 1
    calls: list[int] = []

    def mark(conn: Any) -> int:
        calls.append(1)
        conn.execute(MARK, {"n": 1})
        return int(conn.execute(SELF).scalar_one())

    after = await database.transaction(mark, doing="mark")
    assert after != before and len(calls) == 2  # the first attempt met the dropped connection
    assert await database.read(lambda conn: conn.execute(COUNT).scalar_one(), doing="count") == 1


async def test_a_read_on_a_dropped_connection_runs_again_once(database: Database, fresh_pg_url: str) -> None:
    before = await database.read(lambda conn: conn.execute(SELF).scalar_one(), doing="read")
    assert await _end_backends(fresh_pg_url) >= 1
    assert await database.read(lambda conn: conn.execute(SELF).scalar_one(), doing="read") != before


async def test_a_database_that_stays_down_is_unavailable_after_the_one_retry(database: Database) -> None:
    await database.transaction(lambda conn: conn.execute(SELF).scalar_one(), doing="read")
    calls: list[int] = []

    def ended_each_time(conn: Any) -> None:
        # Every attempt finds its own connection ended under it.
        calls.append(1)
        conn.execute(sa.text("SELECT pg_terminate_backend(pg_backend_pid())"))

    with pytest.raises(StoreUnavailableError, match="Could not mark"):
        await database.transaction(ended_each_time, doing="mark")
    assert len(calls) == 2


async def test_a_transaction_whose_connection_drops_at_its_commit_is_not_run_again(database: Database) -> None:
    # A deferred constraint trigger runs at COMMIT: this one ends its own backend there, so the client cannot know
    # whether the commit happened. Running the transaction again could do its work twice; it must not.
    def install(conn: Any) -> None:
        conn.execute(sa.text("CREATE TABLE IF NOT EXISTS marks (n integer)"))
        conn.execute(
            sa.text(
                "CREATE FUNCTION end_at_commit() RETURNS trigger LANGUAGE plpgsql AS "
                "$$ BEGIN PERFORM pg_terminate_backend(pg_backend_pid()); RETURN NULL; END $$"
            )
        )
        conn.execute(
            sa.text(
                "CREATE CONSTRAINT TRIGGER end_at_commit AFTER INSERT ON marks DEFERRABLE INITIALLY DEFERRED "
                "FOR EACH ROW EXECUTE FUNCTION end_at_commit()"
            )
        )

    await database.transaction(install, doing="install the trigger")
    calls: list[int] = []

    def mark(conn: Any) -> None:
        calls.append(1)
        conn.execute(MARK, {"n": 1})

    with pytest.raises(StoreUnavailableError, match="Could not mark"):
        await database.transaction(mark, doing="mark")
    assert calls == [1]
