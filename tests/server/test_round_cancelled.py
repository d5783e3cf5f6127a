"""A round cancelled after its effect ran (its client hung up on a streamed answer) records the effect and lets its
claim go: the retry answers at once, and the effect never runs twice.

Driven through the ASGI app with a client that hangs up: a request that asks for progress is answered on the SDK's
stream, where a disconnect cancels the handler."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import anyio
import pytest
from tests._asgi import call, confirmed_final, post

from askback import Askback, Confirm, Flow
from askback.server.http import build_app
from askback.store import Store

pytestmark = pytest.mark.anyio

GO = Confirm(key="go", message="Write it?")


def _build(
    make_settings: Callable[..., Any], database: str, effects: list[str], ran: anyio.Event, hold: list[bool]
) -> Askback:
    # A short wait for a copy of the round still running: without the fix the retry fails fast instead of hanging.
    server = Askback("cancelled", settings=make_settings(database_url=database, effect_wait=0.5))

    @server.tool(asks=[GO])
    async def write(name: str, flow: Flow) -> str:
        if not flow.ask(GO):
            return "Kept."

        async def effect() -> str:
            effects.append(name)
            return name

        done = await flow.once("write", effect)
        ran.set()
        if hold[0]:
            await anyio.sleep_forever()  # the client hangs up here
        return f"Wrote {done}."

    return server


async def test_a_round_cancelled_after_its_effect_records_it_and_the_retry_answers_at_once(
    make_settings: Callable[..., Any], any_database: str
) -> None:
    # On PostgreSQL every write awaits the driver, so a cancelled round's record is cancelled with it unless shielded.
    await (await Store.open(any_database, migrate=True)).close()
    effects: list[str] = []
    ran = anyio.Event()
    hold = [True]
    server = _build(make_settings, any_database, effects, ran, hold)
    app = build_app(server)
    async with server.running(), app.router.lifespan_context(app):
        final = await confirmed_final(app, {"name": "write", "arguments": {"name": "lamp"}})
        with anyio.fail_after(10):
            await post(app, call(final, progress=True), hang_up=ran)
        assert effects == ["lamp"]
        hold[0] = False
        with anyio.fail_after(10):
            retried = await post(app, call(final))
    assert retried is not None and "result" in retried, retried
    assert retried["result"]["content"][0]["text"] == "Wrote lamp."
    assert effects == ["lamp"]
