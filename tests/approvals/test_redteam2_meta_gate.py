"""The app's approval gates hold a tool however it is called: through the META exposure's `execute_tool` as well as
directly (held: this test passes on the current code, and guards it)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from mcp import Client
from mcp_types import CallToolResult, ToolAnnotations

from askback import Approval, ApprovalGate, Askback
from askback.approvals.setup import ApprovalsSetup
from askback.clock import FrozenClock
from askback.testing import answered_by_hand

pytestmark = pytest.mark.anyio

BASE = "http://127.0.0.1:8000"
GATE = ApprovalGate(
    Approval(key="destructive", title="A destructive tool", principals=frozenset({"bob"})), destructive=True
)


async def nobody(request: Any) -> None:
    return None


@pytest.mark.parametrize("expose", ["meta", "both"])
async def test_a_destructive_tool_run_through_execute_tool_waits_for_the_gate(
    make_settings: Callable[..., Any], clock: FrozenClock, expose: str
) -> None:
    setup = ApprovalsSetup(sign_in=nobody, base_url=BASE, gates=[GATE])
    app = Askback("gate-meta", settings=make_settings(expose=expose), clock=clock, extensions=[setup])
    purged: list[str] = []

    @app.tool(annotations=ToolAnnotations(destructive_hint=True))
    async def purge(region: str) -> str:
        purged.append(region)
        return f"Purged {region}."

    async with app.running(), Client(app.mcp, elicitation_callback=answered_by_hand) as client:
        result = await client.session.call_tool(
            "execute_tool", {"name": "purge", "arguments": {"region": "eu"}}, allow_input_required=True
        )
        records = await (await setup.service()).listing()
    assert purged == []
    assert isinstance(result, CallToolResult) and result.structured_content is not None
    assert result.structured_content["status"] == "approval_pending"
    assert [(r.tool, r.status) for r in records] == [("purge", "pending")]
