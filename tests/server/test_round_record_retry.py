"""A final round whose record fails at its commit (the connection dropped there) is recorded by a second attempt and
answered as it would have been: a retry of a round must not rerun a handler whose effect changed what it reads.

Real PostgreSQL: a deferred trigger ends the backend at the commit of the first completion only."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import sqlalchemy as sa
from tests._asgi import call, confirmed_final, post

from askback import Askback, Confirm, Flow, ToolError
from askback.clock import FrozenClock
from askback.db.database import Database
from askback.server.http import build_app
from askback.store import Store

pytestmark = pytest.mark.anyio

GO = Confirm(key="go", message="Delete it?")

FAIL_FIRST_COMPLETION = [
    "CREATE SEQUENCE completions",
    "CREATE FUNCTION end_first() RETURNS trigger LANGUAGE plpgsql AS "
    "$$ BEGIN IF nextval('completions') = 1 THEN PERFORM pg_terminate_backend(pg_backend_pid()); END IF; "
    "RETURN NULL; END $$",
    "CREATE CONSTRAINT TRIGGER end_first AFTER INSERT ON askback_flows DEFERRABLE INITIALLY DEFERRED "
    "FOR EACH ROW EXECUTE FUNCTION end_first()",
]


async def _sql(url: str, statements: list[str]) -> None:
    database = await Database.open(url, components=(), migrate=False, check=False)
    try:
        for statement in statements:
            await database.transaction(lambda conn, s=statement: conn.execute(sa.text(s)), doing="install")
    finally:
        await database.close()


async def test_a_completion_whose_commit_failed_is_recorded_again_and_answered(
    make_settings: Callable[..., Any], fresh_pg_url: str
) -> None:
    await (await Store.open(fresh_pg_url, migrate=True)).close()
    await _sql(fresh_pg_url, FAIL_FIRST_COMPLETION)
    projects = {"p1": "Apollo"}
    deleted: list[str] = []
    server = Askback("record-retry", settings=make_settings(database_url=fresh_pg_url))

    @server.tool(asks=[GO])
    async def delete_project(project_id: str, flow: Flow) -> str:
        name = projects.get(project_id)  # a read before the input point, rerun on every round
        if name is None:
            raise ToolError(f"unknown project id {project_id!r}")
        if not flow.ask(GO):
            return "Kept."

        async def delete() -> str:
            deleted.append(projects.pop(project_id))
            return project_id

        await flow.once("delete", delete)
        return f"Deleted {name}."

    app = build_app(server)
    async with server.running(), app.router.lifespan_context(app):
        final = await confirmed_final(app, {"name": "delete_project", "arguments": {"project_id": "p1"}})
        answered = await post(app, call(final))
        replayed = await post(app, call(final))
    assert answered is not None and "result" in answered, answered
    assert answered["result"]["content"][0]["text"] == "Deleted Apollo."
    assert replayed is not None and replayed["result"]["content"][0]["text"] == "Deleted Apollo."
    assert deleted == ["Apollo"]


async def test_an_effect_whose_round_end_is_never_written_is_not_run_again_by_the_attempt_that_takes_over(
    make_settings: Callable[..., Any], fresh_pg_url: str, clock: FrozenClock
) -> None:
    """Every write of the round's end fails (a trigger ends the backend whenever a round's row is finished or
    released), as when the process stops past its grace or the database fails at that moment: the effect's outcome,
    written as it ran, is what the attempt that takes the round over after its lease finds."""
    await (await Store.open(fresh_pg_url, migrate=True)).close()
    kill = [
        "CREATE FUNCTION end_now() RETURNS trigger LANGUAGE plpgsql AS "
        "$$ BEGIN PERFORM pg_terminate_backend(pg_backend_pid()); RETURN NULL; END $$",
        "CREATE TRIGGER end_now AFTER UPDATE OR DELETE ON askback_rounds FOR EACH ROW EXECUTE FUNCTION end_now()",
    ]
    written: list[str] = []
    server = Askback("round-end", settings=make_settings(database_url=fresh_pg_url, effect_lease=5), clock=clock)

    @server.tool(asks=[GO])
    async def write(item: str, flow: Flow) -> str:
        if not flow.ask(GO):
            return "Kept."

        async def append() -> str:
            written.append(item)
            return item

        return f"Wrote {await flow.once('write', append)}."

    app = build_app(server)
    async with server.running(), app.router.lifespan_context(app):
        final = await confirmed_final(app, {"name": "write", "arguments": {"item": "lamp"}})
        await _sql(fresh_pg_url, kill)
        failed = await post(app, call(final))
        assert failed is not None and failed["error"]["data"]["retryable"] is True, failed
        assert written == ["lamp"]
        await _sql(fresh_pg_url, ["DROP TRIGGER end_now ON askback_rounds"])
        clock.advance(6)  # past the lease of the round nobody finished
        retried = await post(app, call(final))
    assert retried is not None and "result" in retried, retried
    assert retried["result"]["content"][0]["text"] == "Wrote lamp."
    assert written == ["lamp"]
