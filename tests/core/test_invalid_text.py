"""Text no database can store (a lone UTF-16 surrogate, a NUL): an invalid answer is asked again saying why, an
argument is invalid params, and either way the audit trail records it and nothing crashes."""

from __future__ import annotations

import pytest
from mcp import Client
from mcp.shared.exceptions import MCPError
from mcp_types import InputRequiredResult

from askback import Askback
from askback.audit import AuditEvent, AuditFilter
from askback.testing import accept, answered_by_hand
from infra import BOTH_ANSWER_MODES

pytestmark = [pytest.mark.anyio, BOTH_ANSWER_MODES]


@pytest.mark.parametrize("bad", ["a\udfffb", "nul\x00"], ids=["lone-surrogate", "nul"])
async def test_an_answer_with_unstorable_text_is_asked_again_saying_why(demo: Askback, bad: str) -> None:
    async with Client(demo.mcp, elicitation_callback=answered_by_hand) as client:
        first = await client.session.call_tool("delete_project", {"project_id": "prj_99"}, allow_input_required=True)
        assert isinstance(first, InputRequiredResult)
        again = await client.session.call_tool(
            "delete_project",
            {"project_id": "prj_99"},
            input_responses={"confirm_project": accept(project_name=bad)},
            request_state=first.request_state,
            allow_input_required=True,
        )
    assert isinstance(again, InputRequiredResult)
    message = again.input_requests["confirm_project"].params.message  # type: ignore[index, union-attr]
    assert message.startswith("That answer was not accepted (project_name contains a ")
    trail = await (await demo.store()).audit_log.query(AuditFilter(tool="delete_project"))
    assert [(e.event, e.outcome) for e in trail] == [("asked", None), ("rejected", "invalid_answer"), ("asked", None)]


@pytest.mark.parametrize("bad", ["\ud800", "svc\x00"], ids=["lone-surrogate", "nul"])
async def test_an_argument_with_unstorable_text_is_invalid_params_and_audited(demo: Askback, bad: str) -> None:
    async with Client(demo.mcp, elicitation_callback=answered_by_hand) as client:
        with pytest.raises(MCPError) as refused:
            await client.session.call_tool("deploy", {"service": bad}, allow_input_required=True)
        deployments = await client.call_tool("list_deployments", {})
    assert refused.value.error.code == -32602
    assert "arguments.service contains a" in refused.value.error.message
    assert deployments.structured_content == {"deployments": [], "deletions": []}
    trail = await (await demo.store()).audit_log.query(AuditFilter(tool="deploy"))
    assert [(e.event, e.outcome) for e in trail] == [("rejected", "invalid_params")]


async def test_the_audit_trail_stores_unstorable_text_escaped_rather_than_lose_the_event(demo: Askback) -> None:
    store = await demo.store()
    await store.audit_log.add_many(
        [AuditEvent(event="rejected", at=1.0, tool="t\ud800", detail="d\x00", content={"k\udfff": "v\x00"})]
    )
    (event,) = await store.audit_log.query(AuditFilter(event="rejected"))
    assert (event.tool, event.detail) == ("t\\ud800", "d\\x00")
    assert event.content == {"k\udfff": "v\x00"}  # JSON keeps the value exactly, as escapes
