"""A round whose end cannot be written in time (a database that does not answer: here a table held locked by another
session) answers a retryable store error after `effect_wait`, having written its effect's outcome as it ran; once
the database answers again and the round's claim has expired, the retry completes without running the effect
again.

Real PostgreSQL: an open transaction of another session holds `askback_flows` locked against writes."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import anyio
import asyncpg
import pytest
from tests._asgi import call, confirmed_final, post

from askback import Askback, Confirm, Flow
from askback.clock import FrozenClock
from askback.server.http import build_app
from askback.store import Store

pytestmark = pytest.mark.anyio

GO = Confirm(key="go", message="Write it?")
WAIT = 0.5  # effect_wait: how long the round's end may take before the round answers an error
LEASE = 60.0  # effect_lease, by the injected clock


async def test_a_round_end_the_database_does_not_take_in_time_answers_an_error_and_the_retry_completes_once(
    make_settings: Callable[..., Any], fresh_pg_url: str
) -> None:
    await (await Store.open(fresh_pg_url, migrate=True)).close()
    effects: list[str] = []
    clock = FrozenClock()
    settings = make_settings(database_url=fresh_pg_url, effect_wait=WAIT, effect_lease=LEASE)
    server = Askback("deadline", settings=settings, clock=clock)

    @server.tool(asks=[GO])
    async def write(name: str, flow: Flow) -> str:
        if not flow.ask(GO):
            return "Kept."

        async def effect() -> str:
            effects.append(name)
            return name

        return f"Wrote {await flow.once('write', effect)}."

    app = build_app(server)
    holder = await asyncpg.connect(fresh_pg_url)
    try:
        async with server.running(), app.router.lifespan_context(app):
            final = await confirmed_final(app, {"name": "write", "arguments": {"name": "lamp"}})
            locked = holder.transaction()
            await locked.start()
            await holder.execute("LOCK TABLE askback_flows IN EXCLUSIVE MODE")
            with anyio.fail_after(10 * WAIT):  # two attempts at the round's end, each bounded by WAIT
                refused = await post(app, call(final))
            assert refused is not None and refused["error"]["data"] == {"retryable": True}, refused
            assert effects == ["lamp"]
            await locked.rollback()
            # The round whose end was not written stays claimed for its lease (docs/deploy.md); then it is taken over.
            clock.advance(LEASE + 1)
            with anyio.fail_after(10):
                retried = await post(app, call(final))
    finally:
        await holder.close()
    assert retried is not None and "result" in retried, retried
    assert retried["result"]["content"][0]["text"] == "Wrote lamp."
    assert effects == ["lamp"]
