"""The seam into the SDK's HTTP transport (`askback.server._sdk_http`): which path a 2026-07-28 request takes.

The SDK answers a modern request through its streaming path unless told to answer JSON; askback answers JSON unless
the request asks for progress. The streaming path opens a task group in the SDK's module (its handler and a watch for
the client's disconnect beside the response); the tests count those. They run on every CI run and, with
`.ci/upgrade-check`, against the newest patch release of the SDK.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import anyio
import httpx
import mcp.server._streamable_http_modern as sdk_modern
import pytest
from mcp.server.mcpserver import Context
from tests._asgi import post_scope
from tests.server.test_http_app import ACCEPT, INITIALIZE, MODERN_META, client_for

from askback import Askback, Flow
from askback.server.http import build_app

pytestmark = [pytest.mark.anyio, pytest.mark.sdk_seam]

HEADERS = {**ACCEPT, "MCP-Protocol-Version": "2026-07-28"}


class _Streams:
    """The SDK module's `anyio`, counting the task groups its modern entry opens: one per streamed answer."""

    def __init__(self) -> None:
        self.opened = 0

    def __getattr__(self, name: str) -> Any:
        if name == "create_task_group":
            self.opened += 1
        return getattr(anyio, name)


@pytest.fixture
def streams(monkeypatch: pytest.MonkeyPatch) -> _Streams:
    assert sdk_modern.anyio is anyio, "the SDK's modern entry no longer uses anyio as it did"
    watch = _Streams()
    monkeypatch.setattr(sdk_modern, "anyio", watch)
    return watch


def _server(make_settings: Callable[..., Any]) -> Askback:
    server = Askback("seam-test", settings=make_settings())

    @server.tool()
    async def greet(name: str, flow: Flow) -> str:
        return f"hello {name}"

    @server.mcp.tool()
    async def count(ctx: Context) -> str:
        await ctx.report_progress(1, 2)
        await ctx.report_progress(2, 2)
        return "counted"

    return server


def _call(tool: str, arguments: dict[str, Any], *, progress: str | None = None) -> dict[str, Any]:
    meta: dict[str, Any] = dict(MODERN_META)
    if progress is not None:
        meta["progressToken"] = progress
    return {
        "jsonrpc": "2.0",
        "id": 3,
        "method": "tools/call",
        "params": {"name": tool, "arguments": arguments, "_meta": meta},
    }


def _events(response: httpx.Response) -> list[dict[str, Any]]:
    return [json.loads(line.removeprefix("data:")) for line in response.text.splitlines() if line.startswith("data:")]


async def test_a_modern_call_without_a_progress_token_is_answered_as_json_not_streamed(
    make_settings: Callable[..., Any], streams: _Streams
) -> None:
    server = _server(make_settings)
    headers = {**HEADERS, "Mcp-Method": "tools/call", "Mcp-Name": "greet"}
    async with server.running(), client_for(build_app(server)) as http:
        response = await http.post("/mcp", json=_call("greet", {"name": "ada"}), headers=headers)
        listed = await http.post(
            "/mcp",
            json={"jsonrpc": "2.0", "id": 4, "method": "tools/list", "params": {"_meta": MODERN_META}},
            headers={**HEADERS, "Mcp-Method": "tools/list"},
        )
    assert response.status_code == 200, response.text
    assert response.headers["content-type"] == "application/json"
    assert response.json()["result"]["content"][0]["text"] == "hello ada"
    assert listed.headers["content-type"] == "application/json"
    assert streams.opened == 0


async def test_a_modern_call_that_asks_for_progress_is_streamed_with_its_progress(
    make_settings: Callable[..., Any], streams: _Streams
) -> None:
    server = _server(make_settings)
    headers = {**HEADERS, "Mcp-Method": "tools/call", "Mcp-Name": "count"}
    async with server.running(), client_for(build_app(server)) as http:
        response = await http.post("/mcp", json=_call("count", {}, progress="p-1"), headers=headers)
    assert response.headers["content-type"].startswith("text/event-stream")
    events = _events(response)
    progress = [e["params"] for e in events if e.get("method") == "notifications/progress"]
    assert [(p["progressToken"], p["progress"]) for p in progress] == [("p-1", 1), ("p-1", 2)]
    assert events[-1]["result"]["content"][0]["text"] == "counted"
    assert streams.opened == 1


async def test_on_the_json_path_progress_is_not_sent_to_a_call_that_did_not_ask(
    make_settings: Callable[..., Any], streams: _Streams
) -> None:
    server = _server(make_settings)
    headers = {**HEADERS, "Mcp-Method": "tools/call", "Mcp-Name": "count"}
    async with server.running(), client_for(build_app(server)) as http:
        response = await http.post("/mcp", json=_call("count", {}), headers=headers)
    assert response.headers["content-type"] == "application/json"
    assert response.json()["result"]["content"][0]["text"] == "counted"
    assert streams.opened == 0


async def test_a_legacy_session_keeps_its_stream(make_settings: Callable[..., Any]) -> None:
    server = _server(make_settings)
    async with server.running(), client_for(build_app(server)) as http:
        opened = await http.post("/mcp", json=INITIALIZE, headers=ACCEPT)
    assert opened.status_code == 200
    assert opened.headers["content-type"].startswith("text/event-stream")
    assert "mcp-session-id" in opened.headers


async def test_a_body_over_the_limit_is_still_refused_before_the_request_is_read(
    make_settings: Callable[..., Any],
) -> None:
    server = _server(make_settings)
    body = json.dumps(_call("greet", {"name": "x" * 64})).encode()
    async with server.running(), client_for(build_app(server)) as http:
        manager = server.mcp.session_manager
        limit = manager.max_request_body_size
        padded = body[:-1] + b"," + b'"pad":"' + b"x" * limit + b'"}'
        response = await http.post(
            "/mcp", content=padded, headers={**HEADERS, "Mcp-Method": "tools/call", "Mcp-Name": "greet"}
        )
    assert response.status_code == 413


@pytest.mark.parametrize(
    "arguments",
    [{"name": "progressToken"}, {"name": '{"_meta": {"progressToken": 1}}'}],
    ids=["the key as a value", "a token inside a value"],
)
async def test_the_key_anywhere_but_params_meta_does_not_stream_the_answer(
    make_settings: Callable[..., Any], streams: _Streams, arguments: dict[str, Any]
) -> None:
    server = _server(make_settings)
    # JSON only: a streamed answer would be refused with 406 to this Accept.
    headers = {**HEADERS, "Accept": "application/json", "Mcp-Method": "tools/call", "Mcp-Name": "greet"}
    async with server.running(), client_for(build_app(server)) as http:
        response = await http.post("/mcp", json=_call("greet", arguments), headers=headers)
    assert response.status_code == 200, response.text
    assert response.headers["content-type"] == "application/json"
    assert response.json()["result"]["content"][0]["text"] == f"hello {arguments['name']}"
    assert streams.opened == 0


async def test_a_client_that_leaves_before_its_body_is_whole_gets_no_answer_and_raises_nothing(
    make_settings: Callable[..., Any],
) -> None:
    server = _server(make_settings)
    app = build_app(server)
    body = json.dumps(_call("greet", {"name": "ada"})).encode()
    scope = post_scope("greet", headers=[(b"content-length", str(len(body) + 100).encode())])
    messages = [{"type": "http.request", "body": body[:20], "more_body": True}, {"type": "http.disconnect"}]
    sent: list[Any] = []

    async def receive() -> Any:
        return messages.pop(0) if messages else {"type": "http.disconnect"}

    async def send(message: Any) -> None:
        sent.append(message)

    async with server.running(), app.router.lifespan_context(app):
        await app(scope, receive, send)
    assert not any(m["type"] == "http.response.start" and m["status"] >= 500 for m in sent), sent
