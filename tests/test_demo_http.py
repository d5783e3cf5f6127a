"""The demo tools over real HTTP (`askback serve askback.demo:server`), through the official SDK client's own
round driver: every path of delete_project and deploy, and the -32021 status."""

from __future__ import annotations

import secrets
from collections.abc import Iterator
from typing import Any

import httpx
import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError
from mcp_types import CallToolResult, ElicitResult

from askback.testing import free_port, serving

pytestmark = pytest.mark.anyio


@pytest.fixture(scope="module")
def url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    db = tmp_path_factory.mktemp("demo-http") / "db.sqlite"
    env = {"ASKBACK_STATE_KEYS": secrets.token_urlsafe(48), "ASKBACK_DATABASE_URL": f"sqlite:///{db}"}
    with serving("askback.demo:server", port=free_port(), workers=1, env=env) as mcp_url:
        yield mcp_url


def answering(**by_field: ElicitResult) -> Any:
    async def callback(context: Any, params: Any) -> ElicitResult:
        fields = set(params.requested_schema["properties"])
        return next(answer for name, answer in by_field.items() if name in fields)

    return callback


async def call(url: str, tool: str, args: dict[str, Any], user: str, callback: Any = None) -> CallToolResult:
    async with (
        httpx2.AsyncClient(headers={"Authorization": f"Bearer demo-{user}"}) as http,
        Client(streamable_http_client(url, http_client=http), elicitation_callback=callback) as client,
    ):
        return await client.call_tool(tool, args)


def leaves(group: BaseExceptionGroup[MCPError]) -> list[MCPError]:
    out: list[MCPError] = []
    for exc in group.exceptions:
        out.extend(leaves(exc) if isinstance(exc, BaseExceptionGroup) else [exc])
    return out


def text(result: CallToolResult) -> str:
    return " ".join(getattr(c, "text", "") for c in result.content)


async def test_health_and_readiness_answer(url: str) -> None:
    base = url.removesuffix("/mcp")
    async with httpx.AsyncClient() as http:
        assert (await http.get(f"{base}/healthz")).json()["status"] == "ok"
        assert (await http.get(f"{base}/readyz")).json()["status"] == "ready"


async def test_delete_paths_over_http(url: str) -> None:
    mismatch = await call(
        url,
        "delete_project",
        {"project_id": "prj_42"},
        "carol",
        answering(project_name=ElicitResult(action="accept", content={"project_name": "nope"})),
    )
    assert text(mismatch) == "Cancelled: name did not match."
    declined = await call(
        url, "delete_project", {"project_id": "prj_42"}, "carol", answering(project_name=ElicitResult(action="decline"))
    )
    assert text(declined).startswith("Cancelled") and not declined.is_error
    cancelled = await call(
        url, "delete_project", {"project_id": "prj_42"}, "carol", answering(project_name=ElicitResult(action="cancel"))
    )
    assert text(cancelled).startswith("Cancelled") and not cancelled.is_error
    unknown = await call(url, "delete_project", {"project_id": "prj_0"}, "carol", answering())
    assert unknown.is_error and "prj_0" in text(unknown)
    deleted = await call(
        url,
        "delete_project",
        {"project_id": "prj_42"},
        "carol",
        answering(project_name=ElicitResult(action="accept", content={"project_name": "web-frontend"})),
    )
    assert text(deleted) == "Deleted web-frontend."
    listing = await call(url, "list_deployments", {}, "carol")
    assert listing.structured_content["deletions"] == [{"project_id": "prj_42", "name": "web-frontend", "by": "carol"}]  # type: ignore[index]


async def test_deploy_paths_over_http(url: str) -> None:
    both = answering(
        environment=ElicitResult(action="accept", content={"environment": "production"}),
        confirm=ElicitResult(action="accept", content={"confirm": True}),
    )
    assert text(await call(url, "deploy", {"service": "api"}, "dave", both)) == "Deployed api to production."
    declined = answering(
        environment=ElicitResult(action="accept", content={"environment": "production"}),
        confirm=ElicitResult(action="decline"),
    )
    assert text(await call(url, "deploy", {"service": "api"}, "dave", declined)).startswith("Cancelled")
    fallback = await call(url, "deploy", {"service": "api"}, "dave")
    assert fallback.is_error and "environment is required: one of dev, staging, production" in text(fallback)
    given = await call(url, "deploy", {"service": "api", "environment": "staging"}, "dave")
    assert text(given) == "Deployed api to staging."


async def test_missing_capability_is_32021_with_http_400(url: str) -> None:
    caught: list[MCPError] = []
    try:
        await call(url, "delete_project", {"project_id": "prj_99"}, "erin")
    except* MCPError as group:  # the HTTP transport's task group wraps what the call raised
        caught.extend(leaves(group))
    assert [e.error.code for e in caught] == [-32021]
    assert caught[0].error.data == {"requiredCapabilities": {"elicitation": {"form": {}}}}
    body = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "tools/call",
        "params": {
            "name": "delete_project",
            "arguments": {"project_id": "prj_99"},
            "_meta": {
                "io.modelcontextprotocol/protocolVersion": "2026-07-28",
                "io.modelcontextprotocol/clientCapabilities": {},
            },
        },
    }
    headers = {
        "MCP-Protocol-Version": "2026-07-28",
        "Mcp-Method": "tools/call",
        "Mcp-Name": "delete_project",
        "Accept": "application/json, text/event-stream",
    }
    async with httpx.AsyncClient() as http:
        response = await http.post(url, json=body, headers=headers)
    assert response.status_code == 400
    assert response.json()["error"]["code"] == -32021
    assert response.json()["error"]["data"] == {"requiredCapabilities": {"elicitation": {"form": {}}}}


async def test_a_bad_bearer_token_is_401(url: str) -> None:
    async with httpx.AsyncClient() as http:
        response = await http.post(url, json={}, headers={"Authorization": "Bearer not-a-demo-token"})
    assert response.status_code == 401


async def test_a_legacy_header_on_a_modern_request_is_32020_with_http_400(url: str) -> None:
    body = {
        "jsonrpc": "2.0",
        "id": 7,
        "method": "tools/list",
        "params": {
            "_meta": {
                "io.modelcontextprotocol/protocolVersion": "2026-07-28",
                "io.modelcontextprotocol/clientCapabilities": {},
            }
        },
    }
    headers = {"MCP-Protocol-Version": "2025-11-25", "Mcp-Method": "tools/list", "Accept": "application/json"}
    async with httpx.AsyncClient() as http:
        response = await http.post(url, json=body, headers=headers)
    assert response.status_code == 400
    assert response.json()["error"]["code"] == -32020 and response.json()["id"] == 7
