"""MCP's tool annotations say `destructiveHint` defaults to true for a tool that is not read-only: a client treats a
tool annotated `readOnlyHint: false` with no `destructiveHint` as destructive. An app's `ApprovalGate(destructive=True)`
holds only the tools whose annotations say `destructiveHint: true` explicitly, so such a tool runs ungated."""

from __future__ import annotations

import secrets

from mcp_types import ToolAnnotations

from askback import Approval, ApprovalGate, Askback
from askback.accounts.pages import DevelopmentSignIn
from askback.approvals.setup import ApprovalsSetup

GATE = ApprovalGate(
    Approval(key="destructive", title="A destructive tool", principals=frozenset({"bob"})), destructive=True
)


def test_a_tool_that_is_not_read_only_and_leaves_destructive_hint_unset_is_held_by_the_destructive_gate() -> None:
    sign_in = DevelopmentSignIn(secrets.token_bytes(32))
    app = Askback("gates", extensions=[ApprovalsSetup(sign_in=sign_in, base_url="http://127.0.0.1:8000", gates=[GATE])])

    @app.tool(annotations=ToolAnnotations(read_only_hint=False))
    async def wipe(region: str) -> str:
        return region

    @app.tool(annotations=ToolAnnotations(read_only_hint=True))
    async def look(region: str) -> str:
        return region

    gate = app._gate()
    assert gate is not None
    assert gate("look") is None
    assert gate("wipe") == GATE.approval
