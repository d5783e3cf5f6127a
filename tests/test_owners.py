"""Each job done in one place: the connect key, the answer encoding, the tables' naming, a handler's tool error, and
a `Flow` that shows a handler only what it uses."""

from __future__ import annotations

import ast
import json
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pytest
from mcp import Client
from mcp.server.mcpserver.exceptions import ToolError as SdkToolError
from mcp_types import ClientCapabilities

import askback
from askback import Askback, Flow
from askback.audit import AuditFilter
from askback.clock import FrozenClock
from askback.core import flow as core_flow
from askback.core.questions import connect_key
from askback.core.state import FlowState, RecordedAnswer, answers_to_json
from askback.db.orm import NAMING_CONVENTION
from askback.server.held import AnswerSeal
from askback.testing import answered_by_hand

pytestmark = pytest.mark.anyio

SRC = Path(askback.__file__).parent

# What a handler uses of its `Flow`, and nothing of the round's bookkeeping.
HANDLER_SURFACE = {
    "approve",
    "arguments",
    "ask",
    "ask_all",
    "caller",
    "capabilities",
    "connect",
    "flow_id",
    "link",
    "once",
    "outcome",
    "round",
    "tool",
}


class _NoAccounts:
    """A caller with no account on any connection: `flow.connect` must send a link."""

    async def accounts(self, connection: str) -> Sequence[Any]:
        return []

    async def link(self, connection: str, label: str, flow_id: str) -> str:
        return f"https://accounts.example.com/connect/{flow_id}"

    async def recover(self, account: Any) -> Any:
        return account

    def handle(self, account: Any) -> Any:
        return account

    async def aclose(self) -> None:
        return None


def _flow(accounts: Any = None) -> Flow:
    url_client = ClientCapabilities.model_validate({"elicitation": {"url": {}}})
    return Flow(
        tool="t",
        arguments={},
        capabilities=url_client,
        state=None,
        responses=None,
        now=0.0,
        accounts=accounts,
        new_id=lambda: "flow-1",
    )


def test_a_flow_shows_a_handler_only_what_it_uses() -> None:
    flow = _flow()
    assert {name for name in dir(flow) if not name.startswith("_")} == HANDLER_SURFACE


@pytest.mark.parametrize("connection", ["github", "Google Drive", "x" * 60, "Google Drive/" + "v2:" * 17])
async def test_the_link_flow_connect_asks_is_under_the_key_the_runtime_resumes_on(connection: str) -> None:
    flow = _flow(_NoAccounts())

    async def handler() -> Any:
        return await flow.connect(connection)

    outcome = await core_flow.run(flow, handler, new_id=lambda: "flow-1")
    assert isinstance(outcome, core_flow.Asked)
    assert list(outcome.requests) == [connect_key(connection)]
    assert len(connect_key(connection)) == len("connect.") + min(len(connection), 50)


def test_the_connect_key_is_built_in_one_place() -> None:
    builders = sorted(
        str(path.relative_to(SRC))
        for path in SRC.rglob("*.py")
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value.startswith("connect.")
    )
    assert builders == ["core/questions.py"]


def test_answers_are_encoded_one_way_in_the_state_and_on_the_server() -> None:
    answers = {
        "pick": RecordedAnswer("accept", {"environment": "staging"}, "d1"),
        "go": RecordedAnswer("decline", None, "d2"),
    }
    sealed_state = FlowState("f", 1.0, 1, answers=answers).encode()
    assert json.loads(sealed_state.partition(":")[2])["a"] == answers_to_json(answers)
    seal = AnswerSeal(["k" * 43])
    assert seal.open("f", 1, seal.seal("f", 1, answers)) == answers
    assert FlowState.decode(sealed_state) == FlowState("f", 1.0, 1, answers=answers)


def test_every_product_names_its_tables_by_the_one_convention() -> None:
    from askback.accounts._models import Base as AccountsBase
    from askback.approvals._models import Base as ApprovalsBase
    from askback.runtime._models import Base as RuntimeBase
    from askback.store.models import Base as StoreBase

    bases = (StoreBase, AccountsBase, RuntimeBase, ApprovalsBase)
    assert all(
        dict(b.metadata.naming_convention) == {**dict(b.metadata.naming_convention), **NAMING_CONVENTION} for b in bases
    )
    # Each product keeps its own metadata: its Alembic history compares against its tables alone.
    assert len({id(b.metadata) for b in bases}) == len(bases)


def test_the_protocol_revision_and_the_missing_capability_code_are_not_written_out_again() -> None:
    found = []
    for path in SRC.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            values: list[ast.expr] = []
            if isinstance(node, ast.Compare):
                values = [node.left, *node.comparators]
            elif isinstance(node, ast.Assign | ast.keyword):
                values = [node.value]
            elif isinstance(node, ast.Call):
                values = list(node.args)
            elif isinstance(node, ast.Set):
                values = list(node.elts)
            for value in values:
                if isinstance(value, ast.UnaryOp) and isinstance(value.operand, ast.Constant):
                    value = ast.Constant(-value.operand.value)
                if isinstance(value, ast.Constant) and value.value in ("2026-07-28", -32021):
                    found.append(str(path.relative_to(SRC)))
    assert sorted(set(found)) == ["core/capabilities.py", "errors.py"]


async def test_askback_tool_error_is_the_same_tool_result_as_the_sdk_one(
    make_settings: Callable[..., Any], clock: FrozenClock
) -> None:
    def build(error: type[Exception]) -> Askback:
        app = Askback("errors", settings=make_settings(), clock=clock)

        @app.tool()
        async def delete_project(project_id: str) -> str:
            raise error(f"unknown project id {project_id!r}")

        return app

    results, trails = [], []
    for app in (build(askback.ToolError), build(SdkToolError)):
        async with app.running(), Client(app.mcp, elicitation_callback=answered_by_hand) as client:
            results.append(await client.session.call_tool("delete_project", {"project_id": "prj_9"}))
            rejected = await (await app.store()).audit_log.query(AuditFilter(event="rejected"))
            trails.append([(e.tool, e.outcome, e.detail) for e in rejected][-1:])
    assert results[0].model_dump(by_alias=True) == results[1].model_dump(by_alias=True)
    assert results[0].is_error is True
    assert [c.model_dump()["text"] for c in results[0].content] == [
        "Error executing tool delete_project: unknown project id 'prj_9'"
    ]
    assert trails[0] == trails[1] == [("delete_project", "tool_error", "unknown project id 'prj_9'")]
