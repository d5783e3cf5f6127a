"""What a database error or a database URL may show: never a password (in either place a URL can carry one), never a
statement's parameters (a person's answers go into statements as parameters)."""

from __future__ import annotations

from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy.engine import make_url

from askback.db.database import Database
from askback.db.urls import normalize_database_url, safe_database_url

pytestmark = pytest.mark.anyio

ANSWER = "answer-text-4711"


@pytest.mark.parametrize(
    "url",
    [
        "postgresql://askback:pw-4711@db.internal:5432/askback",
        "postgresql://askback@db.internal:5432/askback?password=pw-4711",
        "postgresql://askback@db.internal:5432/askback?PASSWORD=pw-4711&sslpassword=pw-4711&ssl=require",
    ],
    ids=["before the host", "as a query parameter", "as query parameters in other spellings"],
)
def test_a_database_url_is_shown_without_its_password(url: str) -> None:
    shown = safe_database_url(make_url(normalize_database_url(url)))
    assert "pw-4711" not in shown
    assert "db.internal:5432/askback" in shown


async def test_a_failed_statement_names_no_parameter(any_database: str) -> None:
    database = await Database.open(any_database, components=(), migrate=False, check=False)
    try:
        await database.transaction(
            lambda conn: conn.execute(sa.text("CREATE TABLE notes (body text CHECK (length(body) < 3))")),
            doing="create",
        )
        engine_error: list[str] = []

        async with database.engine.connect() as conn:
            try:
                await conn.execute(sa.text("INSERT INTO notes (body) VALUES (:body)"), {"body": ANSWER})
            except sa.exc.DBAPIError as exc:
                engine_error.append(str(exc))

        def insert(conn: Any) -> None:
            conn.execute(sa.text("INSERT INTO notes (body) VALUES (:body)"), {"body": ANSWER})

        with pytest.raises(Exception) as raised:
            await database.transaction(insert, doing="insert")
    finally:
        await database.close()
    assert engine_error and ANSWER not in engine_error[0]
    assert ANSWER not in str(raised.value) and ANSWER not in repr(raised.value)
