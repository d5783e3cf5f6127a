"""The demo tools through the official SDK client, in memory: every path of delete_project and deploy."""

from __future__ import annotations

from typing import Any

import pytest
from mcp import Client
from mcp.shared.exceptions import MCPError
from mcp_types import CallToolResult, ElicitResult, InputRequiredResult

from askback import Askback
from askback.testing import accept, answered_by_hand, answering, cancel, decline, text

pytestmark = pytest.mark.anyio


async def listing(app: Askback) -> dict[str, Any]:
    async with Client(app.mcp) as client:
        result = await client.call_tool("list_deployments", {})
        projects = await client.call_tool("list_projects", {})
    assert isinstance(result.structured_content, dict) and isinstance(projects.structured_content, dict)
    return {**result.structured_content, **projects.structured_content}


async def test_delete_with_the_exact_name_deletes_once(demo: Askback) -> None:
    cb = answering(project_name=accept(project_name="billing-legacy"))
    async with Client(demo.mcp, elicitation_callback=cb) as client:
        result = await client.call_tool("delete_project", {"project_id": "prj_99"})
    assert text(result) == "Deleted billing-legacy."
    assert not result.is_error
    state = await listing(demo)
    assert [d["project_id"] for d in state["deletions"]] == ["prj_99"]
    assert [p["id"] for p in state["projects"]] == ["prj_42"]
    assert cb.asked[0]["requestedSchema"]["required"] == ["project_name"]


async def test_delete_with_another_name_cancels(demo: Askback) -> None:
    cb = answering(project_name=accept(project_name="billing"))
    async with Client(demo.mcp, elicitation_callback=cb) as client:
        result = await client.call_tool("delete_project", {"project_id": "prj_99"})
    assert text(result) == "Cancelled: name did not match."
    assert (await listing(demo))["deletions"] == []


@pytest.mark.parametrize("answer", [decline(), cancel()], ids=["decline", "cancel"])
async def test_delete_declined_or_cancelled_completes_with_cancelled(demo: Askback, answer: ElicitResult) -> None:
    cb = answering(project_name=answer)
    async with Client(demo.mcp, elicitation_callback=cb) as client:
        result = await client.call_tool("delete_project", {"project_id": "prj_99"})
    assert text(result).startswith("Cancelled")
    assert not result.is_error
    assert len(cb.asked) == 1  # never asked again after a decline or cancel
    assert (await listing(demo))["deletions"] == []


async def test_delete_of_an_unknown_id_is_a_tool_error_without_a_question(demo: Askback) -> None:
    cb = answering()
    async with Client(demo.mcp, elicitation_callback=cb) as client:
        result = await client.call_tool("delete_project", {"project_id": "prj_404"})
    assert result.is_error and "prj_404" in text(result)
    assert cb.asked == []


async def test_delete_without_elicitation_is_32021_naming_form(demo: Askback) -> None:
    async with Client(demo.mcp) as client:
        with pytest.raises(MCPError) as err:
            await client.call_tool("delete_project", {"project_id": "prj_99"})
    assert err.value.error.code == -32021
    assert err.value.error.data == {"requiredCapabilities": {"elicitation": {"form": {}}}}


async def test_deploy_to_production_asks_twice_then_deploys(demo: Askback) -> None:
    cb = answering(environment=accept(environment="production"), confirm=accept(confirm=True))
    async with Client(demo.mcp, elicitation_callback=cb) as client:
        result = await client.call_tool("deploy", {"service": "web"})
    assert text(result) == "Deployed web to production."
    assert [list(a["requestedSchema"]["properties"]) for a in cb.asked] == [["environment"], ["confirm"]]
    assert cb.asked[0]["requestedSchema"]["properties"]["environment"]["enum"] == ["dev", "staging", "production"]
    assert (await listing(demo))["deployments"] == [{"service": "web", "environment": "production", "by": None}]


async def test_deploy_to_staging_needs_no_confirmation(demo: Askback) -> None:
    cb = answering(environment=accept(environment="staging"))
    async with Client(demo.mcp, elicitation_callback=cb) as client:
        result = await client.call_tool("deploy", {"service": "web"})
    assert text(result) == "Deployed web to staging."
    assert len(cb.asked) == 1


async def test_deploy_production_not_confirmed_records_nothing(demo: Askback) -> None:
    cb = answering(environment=accept(environment="production"), confirm=accept(confirm=False))
    async with Client(demo.mcp, elicitation_callback=cb) as client:
        result = await client.call_tool("deploy", {"service": "web"})
    assert text(result) == "Cancelled: production deploy not confirmed."
    assert (await listing(demo))["deployments"] == []


async def test_deploy_without_elicitation_falls_back_to_the_environment_argument(demo: Askback) -> None:
    async with Client(demo.mcp) as client:
        result = await client.call_tool("deploy", {"service": "web"})
    assert result.is_error
    assert "environment is required: one of dev, staging, production" in text(result)


async def test_deploy_with_environment_given_skips_the_pick(demo: Askback) -> None:
    cb = answering(confirm=accept(confirm=True))
    async with Client(demo.mcp, elicitation_callback=cb) as client:
        result = await client.call_tool("deploy", {"service": "api", "environment": "production"})
    assert text(result) == "Deployed api to production."
    assert [list(a["requestedSchema"]["properties"]) for a in cb.asked] == [["confirm"]]


async def test_deploy_to_production_given_without_elicitation_is_32021(demo: Askback) -> None:
    async with Client(demo.mcp) as client:
        with pytest.raises(MCPError) as err:
            await client.call_tool("deploy", {"service": "api", "environment": "production"})
    assert err.value.error.code == -32021
    assert err.value.error.data == {"requiredCapabilities": {"elicitation": {"form": {}}}}


async def test_deploy_to_dev_given_without_elicitation_completes(demo: Askback) -> None:
    async with Client(demo.mcp) as client:
        result = await client.call_tool("deploy", {"service": "api", "environment": "dev"})
    assert text(result) == "Deployed api to dev."


async def test_rounds_carry_earlier_answers_in_the_sealed_state(demo: Askback) -> None:
    async with Client(demo.mcp, elicitation_callback=answered_by_hand) as client:
        first = await client.session.call_tool("deploy", {"service": "web"}, allow_input_required=True)
        assert isinstance(first, InputRequiredResult) and set(first.input_requests or {}) == {"pick_env"}
        assert first.request_state and "production" not in first.request_state
        second = await client.session.call_tool(
            "deploy",
            {"service": "web"},
            input_responses={"pick_env": accept(environment="production")},
            request_state=first.request_state,
            allow_input_required=True,
        )
        assert isinstance(second, InputRequiredResult) and set(second.input_requests or {}) == {"confirm_prod"}
        # The client answers only the last question; the environment chosen in round one travels in the state.
        assert second.request_state and "production" not in second.request_state
        third = await client.session.call_tool(
            "deploy",
            {"service": "web"},
            input_responses={"confirm_prod": accept(confirm=True)},
            request_state=second.request_state,
            allow_input_required=True,
        )
    assert isinstance(third, CallToolResult) and text(third) == "Deployed web to production."
