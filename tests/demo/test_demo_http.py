"""The demo tools over real HTTP (`askback serve askback.demo:server`), through the official SDK client's own
round driver: every path of delete_project and deploy, and the -32021 status.

The module shares one server (conftest's `demo_server`). Only one test deletes a project, `prj_42`; the other deletion
paths ask about `prj_99`, and each deploy test deploys as a user of its own, so no test depends on which ran first."""

from __future__ import annotations

from typing import Any

import httpx
import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError
from mcp_types import CallToolResult

from _http import listing
from askback.testing import Answering, accept, answering, cancel, decline, text
from infra import BOTH_ANSWER_MODES_OVER_HTTP

pytestmark = [pytest.mark.anyio, BOTH_ANSWER_MODES_OVER_HTTP]


async def call(
    url: str, tool: str, args: dict[str, Any], user: str, callback: Answering | None = None
) -> CallToolResult:
    """One call through the SDK client's own round driver, as `user`; without a callback it declares no elicitation."""
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


async def assert_not_deleted(url: str, project_id: str) -> None:
    recorded = await listing(url)
    assert project_id in [p["id"] for p in recorded["projects"]]
    assert [d for d in recorded["deletions"] if d["project_id"] == project_id] == []


async def deployed_by(url: str, user: str) -> list[dict[str, Any]]:
    return [d for d in (await listing(url))["deployments"] if d["by"] == user]


async def test_health_and_readiness_answer(demo_url: str) -> None:
    base = demo_url.removesuffix("/mcp")
    async with httpx.AsyncClient() as http:
        assert (await http.get(f"{base}/healthz")).json()["status"] == "ok"
        assert (await http.get(f"{base}/readyz")).json()["status"] == "ready"


async def test_a_deletion_answered_with_another_name_is_cancelled_and_deletes_nothing(demo_url: str) -> None:
    cb = answering(project_name=accept(project_name="nope"))
    mismatch = await call(demo_url, "delete_project", {"project_id": "prj_99"}, "carol", cb)
    assert text(mismatch) == "Cancelled: name did not match."
    assert not mismatch.is_error and len(cb.asked) == 1
    await assert_not_deleted(demo_url, "prj_99")


async def test_a_declined_deletion_is_cancelled_and_deletes_nothing(demo_url: str) -> None:
    cb = answering(project_name=decline())
    declined = await call(demo_url, "delete_project", {"project_id": "prj_99"}, "carol", cb)
    assert text(declined) == "Cancelled: you declined to delete the project."
    assert not declined.is_error and len(cb.asked) == 1
    await assert_not_deleted(demo_url, "prj_99")


async def test_a_cancelled_deletion_is_cancelled_and_deletes_nothing(demo_url: str) -> None:
    cb = answering(project_name=cancel())
    cancelled = await call(demo_url, "delete_project", {"project_id": "prj_99"}, "carol", cb)
    assert text(cancelled) == "Cancelled: the confirmation was dismissed; nothing was deleted."
    assert not cancelled.is_error and len(cb.asked) == 1
    await assert_not_deleted(demo_url, "prj_99")


async def test_deleting_an_unknown_project_is_a_tool_error_naming_it_without_a_question(demo_url: str) -> None:
    cb = answering()
    unknown = await call(demo_url, "delete_project", {"project_id": "prj_0"}, "carol", cb)
    assert unknown.is_error and "prj_0" in text(unknown)
    assert cb.asked == []


async def test_a_deletion_confirmed_with_the_project_name_deletes_it_once(demo_url: str) -> None:
    cb = answering(project_name=accept(project_name="web-frontend"))
    deleted = await call(demo_url, "delete_project", {"project_id": "prj_42"}, "carol", cb)
    assert text(deleted) == "Deleted web-frontend."
    recorded = await listing(demo_url)
    assert recorded["deletions"] == [{"project_id": "prj_42", "name": "web-frontend", "by": "carol"}]
    assert "prj_42" not in [p["id"] for p in recorded["projects"]]


async def test_a_production_deploy_asks_the_environment_then_a_confirmation_and_deploys(demo_url: str) -> None:
    cb = answering(environment=accept(environment="production"), confirm=accept(confirm=True))
    assert text(await call(demo_url, "deploy", {"service": "api"}, "dave", cb)) == "Deployed api to production."
    assert [list(a["requestedSchema"]["properties"]) for a in cb.asked] == [["environment"], ["confirm"]]
    assert await deployed_by(demo_url, "dave") == [{"service": "api", "environment": "production", "by": "dave"}]


async def test_a_production_deploy_declined_at_the_confirmation_is_cancelled_and_deploys_nothing(demo_url: str) -> None:
    cb = answering(environment=accept(environment="production"), confirm=decline())
    declined = await call(demo_url, "deploy", {"service": "api"}, "dora", cb)
    assert text(declined) == "Cancelled: production deploy not confirmed."
    assert not declined.is_error and len(cb.asked) == 2
    assert await deployed_by(demo_url, "dora") == []


async def test_a_deploy_without_elicitation_or_an_environment_is_a_tool_error_naming_the_choices(demo_url: str) -> None:
    fallback = await call(demo_url, "deploy", {"service": "api"}, "dan")
    assert fallback.is_error and "environment is required: one of dev, staging, production" in text(fallback)
    assert await deployed_by(demo_url, "dan") == []


async def test_a_deploy_with_the_environment_given_deploys_there_without_asking(demo_url: str) -> None:
    given = await call(demo_url, "deploy", {"service": "api", "environment": "staging"}, "dee")
    assert text(given) == "Deployed api to staging."
    assert await deployed_by(demo_url, "dee") == [{"service": "api", "environment": "staging", "by": "dee"}]


async def test_missing_capability_is_32021_with_http_400(demo_url: str) -> None:
    caught: list[MCPError] = []
    try:
        await call(demo_url, "delete_project", {"project_id": "prj_99"}, "erin")
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
        response = await http.post(demo_url, json=body, headers=headers)
    assert response.status_code == 400
    assert response.json()["error"]["code"] == -32021
    assert response.json()["error"]["data"] == {"requiredCapabilities": {"elicitation": {"form": {}}}}


async def test_a_bad_bearer_token_is_401(demo_url: str) -> None:
    async with httpx.AsyncClient() as http:
        response = await http.post(demo_url, json={}, headers={"Authorization": "Bearer not-a-demo-token"})
    assert response.status_code == 401


async def test_a_legacy_header_on_a_modern_request_is_32020_with_http_400(demo_url: str) -> None:
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
        response = await http.post(demo_url, json=body, headers=headers)
    assert response.status_code == 400
    assert response.json()["error"]["code"] == -32020 and response.json()["id"] == 7
