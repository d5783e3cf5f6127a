"""A round cancelled after its effect ran (its client hung up on a streamed answer; a shutdown's grace ran out)
records the effect and lets its claim go: the retry answers at once, and the effect never runs twice.

Driven through the ASGI app with a client that hangs up: a request that asks for progress is answered on the SDK's
stream, where a disconnect cancels the handler."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import anyio
import pytest
from starlette.types import Message
from tests.server.test_http_app import MODERN_META

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


def _request(body: dict[str, Any]) -> tuple[dict[str, Any], bytes]:
    headers = [
        (b"host", b"127.0.0.1:8000"),
        (b"content-type", b"application/json"),
        (b"accept", b"application/json, text/event-stream"),
        (b"mcp-protocol-version", b"2026-07-28"),
        (b"mcp-method", b"tools/call"),
        (b"mcp-name", str(body["params"]["name"]).encode()),
    ]
    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "POST",
        "scheme": "http",
        "path": "/mcp",
        "raw_path": b"/mcp",
        "query_string": b"",
        "root_path": "",
        "headers": headers,
        "client": ("127.0.0.1", 50000),
        "server": ("127.0.0.1", 8000),
    }
    return scope, json.dumps(body).encode()


async def _post(app: Any, body: dict[str, Any], *, hang_up: anyio.Event | None = None) -> dict[str, Any] | None:
    """POST `body`; with `hang_up`, disconnect when it is set and return None. Otherwise the JSON-RPC reply."""
    scope, raw = _request(body)
    sent: list[Message] = []
    delivered = False

    async def receive() -> Message:
        nonlocal delivered
        if not delivered:
            delivered = True
            return {"type": "http.request", "body": raw, "more_body": False}
        if hang_up is not None:
            await hang_up.wait()
        else:
            await anyio.sleep_forever()
        return {"type": "http.disconnect"}

    async def send(message: Message) -> None:
        sent.append(message)

    await app(scope, receive, send)
    if hang_up is not None:
        return None
    text = b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body").decode()
    data = [line.removeprefix("data:") for line in text.splitlines() if line.startswith("data:")]
    reply: dict[str, Any] = json.loads(data[-1] if data else text)
    return reply


def _call(params: dict[str, Any], *, progress: bool = False) -> dict[str, Any]:
    meta = {
        **MODERN_META,
        "io.modelcontextprotocol/clientCapabilities": {"elicitation": {"form": {}}},
        **({"progressToken": "p"} if progress else {}),
    }
    return {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {**params, "_meta": meta}}


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
        first = await _post(app, _call({"name": "write", "arguments": {"name": "lamp"}}))
        assert first is not None and "result" in first, first
        state = first["result"]["requestState"]
        final = {
            "name": "write",
            "arguments": {"name": "lamp"},
            "requestState": state,
            "inputResponses": {"go": {"action": "accept", "content": {"confirm": True}}},
        }
        with anyio.fail_after(10):
            await _post(app, _call(final, progress=True), hang_up=ran)
        assert effects == ["lamp"]
        hold[0] = False
        with anyio.fail_after(10):
            retried = await _post(app, _call(final))
    assert retried is not None and "result" in retried, retried
    assert retried["result"]["content"][0]["text"] == "Wrote lamp."
    assert effects == ["lamp"]
