"""Driving an askback ASGI app in process with hand-made 2026-07-28 `tools/call` POSTs, down to the ASGI messages: a
client that hangs up at a chosen moment, or before its body is whole."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import anyio
from starlette.types import Message

CONFIRMED = {"go": {"action": "accept", "content": {"confirm": True}}}
_META = {
    "io.modelcontextprotocol/protocolVersion": "2026-07-28",
    "io.modelcontextprotocol/clientCapabilities": {"elicitation": {"form": {}}},
}


def post_scope(tool: str, *, headers: Sequence[tuple[bytes, bytes]] = ()) -> dict[str, Any]:
    """The ASGI scope of a `tools/call` POST of `tool` to /mcp, with `headers` added to the usual ones."""
    return {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "POST",
        "scheme": "http",
        "path": "/mcp",
        "raw_path": b"/mcp",
        "query_string": b"",
        "root_path": "",
        "headers": [
            (b"host", b"127.0.0.1:8000"),
            (b"content-type", b"application/json"),
            (b"accept", b"application/json, text/event-stream"),
            (b"mcp-protocol-version", b"2026-07-28"),
            (b"mcp-method", b"tools/call"),
            (b"mcp-name", tool.encode()),
            *headers,
        ],
        "client": ("127.0.0.1", 50000),
        "server": ("127.0.0.1", 8000),
    }


def call(params: dict[str, Any], *, progress: bool = False) -> dict[str, Any]:
    """A `tools/call` request of `params` from a client that renders forms; with `progress`, one that asks for it."""
    meta = {**_META, **({"progressToken": "p"} if progress else {})}
    return {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {**params, "_meta": meta}}


async def post(app: Any, body: dict[str, Any], *, hang_up: anyio.Event | None = None) -> dict[str, Any] | None:
    """POST `body`; with `hang_up`, disconnect when it is set and return None. Otherwise the JSON-RPC reply."""
    scope = post_scope(str(body["params"]["name"]))
    raw = json.dumps(body).encode()
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


async def confirmed_final(app: Any, params: dict[str, Any]) -> dict[str, Any]:
    """Call `params`, which asks the `go` Confirm, and give the params of the round that answers yes."""
    first = await post(app, call(params))
    assert first is not None and "result" in first, first
    return {**params, "requestState": first["result"]["requestState"], "inputResponses": CONFIRMED}
