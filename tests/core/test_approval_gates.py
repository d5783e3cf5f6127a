"""App-wide approval gates (`askback.core.approving.ApprovalGate`, `gate_for`): which tools a gate holds, which gate
wins, and what a gate refuses to be. Plain data; the gate at work on a served app is in
tests/approvals/test_approvals_e2e.py."""

from __future__ import annotations

from typing import Any

import pytest
from mcp_types import ToolAnnotations

from askback.core.approving import Approval, ApprovalGate, gate_for, may_destroy
from askback.errors import DefinitionError

OPS = Approval(key="ops", title="An operation", principals=frozenset({"bob"}))
BIG = Approval(key="big", title="A big change", principals=frozenset({"bob", "carol"}), required=2)


@pytest.mark.parametrize(
    ("gates", "tool", "destructive", "expected"),
    [
        ((ApprovalGate(OPS, tools=frozenset({"drop"})),), "drop", False, OPS),
        ((ApprovalGate(OPS, tools=frozenset({"drop"})),), "list", True, None),
        ((ApprovalGate(OPS, destructive=True),), "purge", True, OPS),
        ((ApprovalGate(OPS, destructive=True),), "warm", False, None),
        ((ApprovalGate(BIG, tools=frozenset({"drop"})), ApprovalGate(OPS, destructive=True)), "drop", True, BIG),
        ((ApprovalGate(OPS, destructive=True), ApprovalGate(BIG, tools=frozenset({"drop"}))), "drop", True, OPS),
        ((), "drop", True, None),
        ((ApprovalGate(OPS, destructive=True, exempt=frozenset({"drop"})),), "drop", True, None),
        ((ApprovalGate(OPS, tools=frozenset({"drop"}), exempt=frozenset({"drop"})),), "drop", True, OPS),
    ],
)
def test_the_first_gate_that_names_the_tool_or_holds_destructive_tools_gives_the_approval(
    gates: tuple[ApprovalGate, ...], tool: str, destructive: bool, expected: Approval | None
) -> None:
    assert gate_for(gates, tool, destructive=destructive) == expected


@pytest.mark.parametrize(
    ("annotations", "destroys"),
    [
        (None, True),
        (ToolAnnotations(), True),
        (ToolAnnotations(read_only_hint=False), True),
        (ToolAnnotations(destructive_hint=True), True),
        (ToolAnnotations(read_only_hint=True), False),
        (ToolAnnotations(destructive_hint=False), False),
        (ToolAnnotations(read_only_hint=True, destructive_hint=True), False),
    ],
)
def test_a_tool_may_destroy_unless_its_annotations_say_read_only_or_not_destructive(
    annotations: ToolAnnotations | None, destroys: bool
) -> None:
    # MCP's defaults: readOnlyHint false, destructiveHint true (meaningful only when not read-only).
    assert may_destroy(annotations) is destroys


@pytest.mark.parametrize(
    ("kwargs", "refusal"),
    [
        ({"approval": OPS}, "gates nothing"),
        ({"approval": OPS, "tools": "drop"}, "not one string"),
        ({"approval": OPS, "destructive": True, "exempt": "drop"}, "not one string"),
        ({"approval": "ops", "destructive": True}, "takes an askback.Approval"),
    ],
)
def test_a_gate_that_could_never_hold_a_tool_is_refused_when_it_is_made(kwargs: dict[str, Any], refusal: str) -> None:
    with pytest.raises(DefinitionError, match=refusal):
        ApprovalGate(**kwargs)
