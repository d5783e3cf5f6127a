"""The ASGI app around a server: authentication, health and readiness, the serving instance header."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

import httpx
import pytest

from askback import Askback, load_settings
from askback.server.http import DemoTokenVerifier, build_app

pytestmark = pytest.mark.anyio


@asynccontextmanager
async def client_for(app: Any) -> AsyncIterator[httpx.AsyncClient]:
    async with (
        app.router.lifespan_context(app),
        httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://127.0.0.1:8000") as http,
    ):
        yield http


async def test_with_a_real_verifier_a_request_without_a_token_is_401(make_settings: Callable[..., Any]) -> None:
    server = Askback("auth-test", settings=make_settings(demo_auth=False))
    async with server.running(), client_for(build_app(server, token_verifier=DemoTokenVerifier())) as http:
        missing = await http.post("/mcp", json={})
        health = await http.get("/healthz")
        wrong = await http.post("/mcp", json={}, headers={"Authorization": "Bearer nope"})
        right = await http.post("/mcp", json={}, headers={"Authorization": "Bearer demo-alice"})
    assert missing.status_code == 401 and "Bearer" in missing.headers["www-authenticate"]
    assert health.status_code == 200  # probes carry no token
    assert wrong.status_code == 401
    assert right.status_code != 401


async def test_readiness_needs_a_shared_key_ring(db_url: str) -> None:
    server = Askback("ready-test", settings=load_settings(database_url=db_url, state_keys=None))
    async with server.running(), client_for(build_app(server)) as http:
        health = await http.get("/healthz")
        ready = await http.get("/readyz")
    assert health.status_code == 200 and health.headers["x-askback-instance"].count(":") == 1
    assert ready.status_code == 503
    assert any("ASKBACK_STATE_KEYS" in p for p in ready.json()["problems"])


async def test_readiness_is_ok_with_keys_and_a_current_database(make_settings: Callable[..., Any]) -> None:
    server = Askback("ready-test", settings=make_settings())
    async with server.running(), client_for(build_app(server)) as http:
        ready = await http.get("/readyz")
    assert ready.status_code == 200 and ready.json()["status"] == "ready"


ACCEPT = {"Accept": "application/json, text/event-stream"}
MODERN_META = {
    "io.modelcontextprotocol/protocolVersion": "2026-07-28",
    "io.modelcontextprotocol/clientCapabilities": {},
}
INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}},
}


def reply_of(response: httpx.Response) -> Any:
    """The JSON-RPC message of a response, sent as JSON or as one server-sent event."""
    if response.headers["content-type"].startswith("text/event-stream"):
        data = [line.removeprefix("data:") for line in response.text.splitlines() if line.startswith("data:")]
        return json.loads(data[-1])
    return response.json()


@pytest.mark.parametrize(
    "body",
    [
        {"jsonrpc": "2.0", "id": 7, "method": "tools/list", "params": {"_meta": MODERN_META}},
        {"jsonrpc": "2.0", "method": "notifications/initialized"},
    ],
    ids=["request", "notification"],
)
async def test_a_post_without_version_header_or_session_is_told_which_header_to_send_for_which_revision(
    make_settings: Callable[..., Any], body: dict[str, Any]
) -> None:
    server = Askback("header-test", settings=make_settings())
    async with server.running(), client_for(build_app(server)) as http:
        response = await http.post("/mcp", json=body, headers=ACCEPT)
    assert response.status_code == 400
    reply = response.json()
    assert reply["id"] == body.get("id") and reply["error"]["code"] == -32600
    message = reply["error"]["message"]
    assert message.startswith("The MCP-Protocol-Version header is missing.")
    assert '2026-07-28: send the header on every request, equal to params._meta["io.modelcontextprotocol/' in message
    assert "2025-11-25: send initialize first, then the header with the Mcp-Session-Id" in message
    assert {"2026-07-28", "2025-11-25"} <= set(reply["error"]["data"]["supported"])


async def test_the_same_request_with_the_version_header_is_served_without_a_session(
    make_settings: Callable[..., Any],
) -> None:
    server = Askback("header-test", settings=make_settings())
    body = {"jsonrpc": "2.0", "id": 7, "method": "tools/list", "params": {"_meta": MODERN_META}}
    headers = {**ACCEPT, "MCP-Protocol-Version": "2026-07-28", "Mcp-Method": "tools/list"}
    async with server.running(), client_for(build_app(server)) as http:
        response = await http.post("/mcp", json=body, headers=headers)
    assert response.status_code == 200 and "mcp-session-id" not in response.headers
    assert reply_of(response)["result"]["resultType"] == "complete"


async def test_initialize_without_a_version_header_still_opens_a_legacy_session_that_serves_later_requests(
    make_settings: Callable[..., Any],
) -> None:
    server = Askback("header-test", settings=make_settings())
    async with server.running(), client_for(build_app(server)) as http:
        opened = await http.post("/mcp", json=INITIALIZE, headers=ACCEPT)
        session = {"Mcp-Session-Id": opened.headers["mcp-session-id"]}
        # A 2025-03-26 client sends the session id alone; later ones add the version header.
        bare = await http.post("/mcp", json={"jsonrpc": "2.0", "id": 2, "method": "tools/list"}, headers=session)
        both = await http.post(
            "/mcp",
            json={"jsonrpc": "2.0", "id": 3, "method": "tools/list"},
            headers={**ACCEPT, **session, "MCP-Protocol-Version": "2025-11-25"},
        )
        closed = await http.delete("/mcp", headers={**session, "MCP-Protocol-Version": "2025-11-25"})
    assert opened.status_code == 200 and reply_of(opened)["result"]["protocolVersion"] == "2025-11-25"
    assert bare.status_code == 200 and reply_of(bare)["result"]["tools"] == []
    assert both.status_code == 200 and reply_of(both)["result"]["tools"] == []
    assert closed.status_code == 200


@pytest.mark.parametrize(
    ("method", "request_args"),
    [
        ("POST", {"json": [{"jsonrpc": "2.0", "id": 1, "method": "tools/list"}], "headers": ACCEPT}),
        ("POST", {"content": b"not json", "headers": {**ACCEPT, "Content-Type": "application/json"}}),
        ("POST", {"json": {}, "headers": ACCEPT}),
        ("GET", {"headers": {"Accept": "text/event-stream"}}),
        ("DELETE", {}),
    ],
    ids=["batch", "not-json", "not-json-rpc", "get", "delete"],
)
async def test_batches_bodies_that_are_not_json_rpc_gets_and_deletes_without_headers_are_left_to_the_sdk(
    make_settings: Callable[..., Any], method: str, request_args: dict[str, Any]
) -> None:
    server = Askback("header-test", settings=make_settings())
    async with server.running(), client_for(build_app(server)) as http:
        response = await http.request(method, "/mcp", **request_args)
    assert response.status_code == 400
    assert "MCP-Protocol-Version" not in response.json()["error"]["message"]
