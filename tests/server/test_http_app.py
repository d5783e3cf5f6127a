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


# --- routes mounted beside /mcp, each under its own auth policy ------------------------------------------------


def echo_app(seen: list[dict[str, Any]]) -> Any:
    """A mounted ASGI app that records what reached it and answers who it saw."""
    from starlette.requests import Request
    from starlette.responses import JSONResponse

    async def app(scope: Any, receive: Any, send: Any) -> None:
        request = Request(scope, receive)
        body = await request.body()
        user = scope.get("user")
        who = getattr(getattr(user, "access_token", None), "subject", None)
        seen.append({"path": scope["path"], "body": body, "who": who})
        await JSONResponse({"who": who})(scope, receive, send)

    return app


def hmac_check(secret: bytes) -> Callable[[Any, bytes], bool]:
    import hashlib
    import hmac

    def verify(headers: Any, body: bytes) -> bool:
        expected = hmac.new(secret, body, hashlib.sha256).hexdigest()
        return hmac.compare_digest(headers.get("x-signature", ""), expected)

    return verify


async def test_each_mount_is_reached_under_its_own_policy(make_settings: Callable[..., Any]) -> None:
    import hashlib
    import hmac

    from askback.server import Bearer, Mounted, Open, Signed

    pages: list[dict[str, Any]] = []
    hooks: list[dict[str, Any]] = []
    private: list[dict[str, Any]] = []
    server = Askback("mounts", settings=make_settings(demo_auth=False))
    app = build_app(
        server,
        token_verifier=DemoTokenVerifier(),
        mounts=[
            Mounted("/pages", echo_app(pages), auth=Open()),
            Mounted("/hooks", echo_app(hooks), auth=Signed(hmac_check(b"s3cret"))),
            Mounted("/private", echo_app(private), auth=Bearer()),
        ],
    )
    body = b'{"event":"account.active"}'
    good = hmac.new(b"s3cret", body, hashlib.sha256).hexdigest()
    async with server.running(), client_for(app) as http:
        page = await http.get("/pages/connect")
        forged = await http.post("/hooks/github", content=body, headers={"X-Signature": "0" * 64})
        unsigned = await http.post("/hooks/github", content=body)
        signed = await http.post("/hooks/github", content=body, headers={"X-Signature": good})
        anonymous = await http.get("/private/x")
        alice = await http.get("/private/x", headers={"Authorization": "Bearer demo-alice"})
        mcp_without_token = await http.post("/mcp", json={})
    assert page.status_code == 200 and page.json() == {"who": None}  # open: no token asked for
    assert (forged.status_code, unsigned.status_code, signed.status_code) == (401, 401, 200)
    assert [h["body"] for h in hooks] == [body]  # only the signed request reached the app, with its exact body
    assert anonymous.status_code == 401 and alice.json() == {"who": "alice"}
    assert [p["who"] for p in private] == ["alice"]
    assert mcp_without_token.status_code == 401  # the MCP endpoint keeps its bearer policy


def test_a_mount_cannot_take_the_mcp_endpoint_a_probe_or_another_mounts_path() -> None:
    from askback.errors import DefinitionError
    from askback.server import Mounted, Open

    for path in ("/mcp", "/mcp/", "/healthz", "/", "pages"):
        with pytest.raises(DefinitionError):
            Mounted(path, echo_app([]), auth=Open())
    server = Askback("dupes", settings=load_settings(state_keys=None))
    with pytest.raises(DefinitionError, match="share a path"):
        build_app(server, mounts=[Mounted("/a", echo_app([])), Mounted("/a/", echo_app([]))])


def test_a_policy_covers_its_path_and_what_is_under_it_not_a_longer_name() -> None:
    from askback.server.auth import Bearer, Open, policy_for

    policies = [("/pages", Open()), ("/pages/admin", Bearer())]
    assert policy_for("/pages", policies) == Open()
    assert policy_for("/pages/connect", policies) == Open()
    assert policy_for("/pages/admin/users", policies) == Bearer()  # the longest prefix wins
    assert policy_for("/pagesx", policies) == Bearer()
    assert policy_for("/mcp", policies) == Bearer()


def test_a_signed_mount_never_lets_a_websocket_through(make_settings: Callable[..., Any]) -> None:
    from starlette.testclient import TestClient
    from starlette.websockets import WebSocketDisconnect

    from askback.server import Mounted, Signed

    reached: list[dict[str, Any]] = []
    server = Askback("ws", settings=make_settings(demo_auth=False))
    app = build_app(server, mounts=[Mounted("/hooks", echo_app(reached), auth=Signed(lambda headers, body: True))])
    with (
        TestClient(app, base_url="http://127.0.0.1") as client,
        pytest.raises(WebSocketDisconnect) as closed,
        client.websocket_connect("/hooks/stream"),
    ):
        pass
    assert closed.value.code == 1008 and reached == []


async def test_an_apps_own_mounts_are_served_with_their_policies_by_askback_serve_too(
    make_settings: Callable[..., Any],
) -> None:
    from askback.server import Mounted, Open

    pages: list[dict[str, Any]] = []
    server = Askback(
        "own-mounts", settings=make_settings(demo_auth=False), mounts=[Mounted("/pages", echo_app(pages), auth=Open())]
    )
    async with server.running(), client_for(build_app(server, token_verifier=DemoTokenVerifier())) as http:
        page = await http.get("/pages/x")
        mcp_without_token = await http.post("/mcp", json={})
    assert page.status_code == 200 and [p["path"] for p in pages] == ["/pages/x"]
    assert mcp_without_token.status_code == 401


GRANTS = {
    "ordinary": ["read", "deploy"],
    "line-break": ["read", "line\nbreak"],
    "bidi": ["read", "\u202eevil"],
    "bell": ["read", "bell\x07"],
    "many": [f"s{i}" for i in range(101)],
}


class _ScopesVerifier:
    """A deployment's own verifier (the SDK's protocol), granting each token the scopes `GRANTS` names for it."""

    async def verify_token(self, token: str) -> Any:
        from mcp.server.auth.provider import AccessToken

        return AccessToken(token=token, client_id="c", subject="ann", scopes=GRANTS[token])


@pytest.mark.parametrize(
    ("token", "refused"),
    [("ordinary", False), ("line-break", True), ("bidi", True), ("bell", True), ("many", True)],
    ids=["ordinary", "a line break", "a bidi override", "a control character", "101 scopes"],
)
async def test_a_deployments_own_verifier_is_held_to_askbacks_scopes(
    make_settings: Callable[..., Any], token: str, refused: bool
) -> None:
    server = Askback("scope-test", settings=make_settings(demo_auth=False))
    body = {"jsonrpc": "2.0", "id": 7, "method": "tools/list", "params": {"_meta": MODERN_META}}
    headers = {**ACCEPT, "MCP-Protocol-Version": "2026-07-28", "Mcp-Method": "tools/list"}
    async with server.running(), client_for(build_app(server, token_verifier=_ScopesVerifier())) as http:
        response = await http.post("/mcp", json=body, headers={**headers, "Authorization": f"Bearer {token}"})
    assert (response.status_code == 401) == refused, response.text
    if refused:
        assert 'error="invalid_token"' in response.headers["www-authenticate"]
