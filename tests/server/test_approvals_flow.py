"""`flow.approve` in a real app, driven by the SDK's in-memory client one round at a time: the approvals product is
stood in for by a small dict-backed test port, given through an extension object as a product would give it."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import pytest
from mcp import Client
from mcp_types import CallToolResult, ElicitResult, InputRequiredResult

from askback import Approval, Askback, Flow
from askback.audit import AuditFilter
from askback.clock import FrozenClock
from askback.core.approving import ApprovalAsk, ApprovalState, approval_key
from askback.core.caller import Caller
from askback.db.migrate import Component
from askback.extension import ExtensionContext, Mounted, Ports
from askback.testing import accept, answered_by_hand, decline, text

pytestmark = pytest.mark.anyio

DEPLOY = Approval(key="deploy", title="Deploy to production", principals=frozenset({"bob", "carol"}))
KEY = approval_key("deploy")


@dataclass
class ApprovalsTestBoard:
    """Approval requests kept in a dict, by digest: what the store does, without the store. Not the product."""

    clock: FrozenClock
    requests: dict[str, ApprovalState] = field(default_factory=dict)
    asks: list[ApprovalAsk] = field(default_factory=list)
    consumed_by: dict[str, str] = field(default_factory=dict)

    def only(self) -> ApprovalState:
        (state,) = self.requests.values()
        return state

    def decide(self, decision: str, by: str, reason: str = "") -> None:
        digest, state = next(iter(self.requests.items()))
        if decision == "approve":
            self.requests[digest] = replace(state, status="approved", approvers=(*state.approvers, by))
        else:
            self.requests[digest] = replace(state, status="denied", denied_by=by, reason=reason)


@dataclass
class ApprovalsTestPort:
    """The test board as one caller's `ApprovalsPort` (a test port, not the approvals product)."""

    board: ApprovalsTestBoard
    caller: Caller | None

    async def request(self, ask: ApprovalAsk) -> ApprovalState:
        board = self.board
        board.asks.append(ask)
        found = board.requests.get(ask.digest)
        followed = found is not None and found.id == ask.following
        if found is None or (found.status in ("denied", "expired", "withdrawn") and not followed):
            found = ApprovalState(
                id=f"ap-{len(board.requests) + 1}",
                status="pending",
                expires_at=board.clock.now() + ask.approval.ttl,
                required=ask.approval.required,
                status_url=f"https://approvals.example.com/mine/ap-{len(board.requests) + 1}",
            )
        elif found.status == "approved" or (found.status == "consumed" and board.consumed_by[found.id] != ask.flow_id):
            if found.status == "consumed":
                raise AssertionError("another flow read a request consumed by this one")
            found = replace(found, status="consumed")
            board.consumed_by[found.id] = ask.flow_id
        board.requests[ask.digest] = found
        return found

    async def withdraw(self, approval_id: str) -> ApprovalState:
        for digest, state in self.board.requests.items():
            if state.id == approval_id and state.status == "pending":
                self.board.requests[digest] = replace(state, status="withdrawn")
                return self.board.requests[digest]
        raise AssertionError(f"no pending request {approval_id}")

    async def read(self, approval_id: str) -> ApprovalState | None:
        return next((s for s in self.board.requests.values() if s.id == approval_id), None)


@dataclass
class ApprovalsTestExtension:
    """What the approvals product adds to an app, reduced to its port (for these tests)."""

    board: ApprovalsTestBoard
    name: str = "approvals-test"
    migrations: Sequence[Component] = ()
    mounts: Sequence[Mounted] = ()

    @property
    def ports(self) -> Ports:
        return Ports(approvals=lambda caller: ApprovalsTestPort(self.board, caller))

    async def start(self, context: ExtensionContext) -> None:
        return None

    async def close(self) -> None:
        return None


@dataclass
class Served:
    app: Askback
    board: ApprovalsTestBoard
    deployed: list[str]


@pytest.fixture
async def served(make_settings: Callable[..., Any], clock: FrozenClock) -> AsyncIterator[Served]:
    board = ApprovalsTestBoard(clock)
    deployed: list[str] = []
    app = Askback("approvals-test", settings=make_settings(), clock=clock, extensions=[ApprovalsTestExtension(board)])

    @app.tool()
    async def deploy(service: str, flow: Flow) -> str:
        approved = await flow.approve(DEPLOY, summary=f"Deploy {service}")

        async def run() -> str:
            deployed.append(service)
            return service

        await flow.once("deploy", run)
        return f"Deployed {service}, approved by {', '.join(approved.approvers)}."

    @app.tool(structured_output=False)
    async def restart(service: str, flow: Flow) -> str:
        await flow.approve(DEPLOY)
        return f"Restarted {service}."

    async with app.running():
        yield Served(app, board, deployed)


async def call(client: Client, *, state: str | None = None, answer: ElicitResult | None = None) -> Any:
    return await client.session.call_tool(
        "deploy",
        {"service": "billing"},
        input_responses={KEY: answer} if answer is not None else None,
        request_state=state,
        allow_input_required=True,
    )


async def test_a_pending_request_asks_a_url_question_linking_to_its_status_page(served: Served) -> None:
    async with Client(served.app.mcp, elicitation_callback=answered_by_hand) as client:
        first = await call(client)
    assert isinstance(first, InputRequiredResult) and set(first.input_requests or {}) == {KEY}
    params = first.model_dump(mode="json", by_alias=True)["inputRequests"][KEY]["params"]
    assert params["mode"] == "url" and params["url"] == "https://approvals.example.com/mine/ap-1"
    assert "Deploy to production" in params["message"] and "1 more approval" in params["message"]
    (ask,) = served.board.asks
    assert ask.tool == "deploy" and ask.arguments == {"service": "billing"} and ask.summary == "Deploy billing"
    assert served.deployed == []


async def test_a_request_still_pending_after_the_link_was_accepted_asks_the_link_again(served: Served) -> None:
    async with Client(served.app.mcp, elicitation_callback=answered_by_hand) as client:
        first = await call(client)
        second = await call(client, state=first.request_state, answer=accept())
    assert isinstance(second, InputRequiredResult) and set(second.input_requests or {}) == {KEY}
    assert second.input_requests[KEY].params.message.startswith("Not decided yet.")  # type: ignore[index, union-attr]
    answered = await (await served.app.store()).audit_log.query(AuditFilter(event="answered"))
    assert [(e.keys, e.mode, e.action) for e in answered] == [((KEY,), "url", "accept")]
    assert served.deployed == []


async def test_an_approved_request_runs_the_effect_once_even_when_the_round_is_replayed(served: Served) -> None:
    async with Client(served.app.mcp, elicitation_callback=answered_by_hand) as client:
        first = await call(client)
        served.board.decide("approve", by="bob")
        done = await call(client, state=first.request_state, answer=accept())
        replayed = await call(client, state=first.request_state, answer=accept())
    assert text(done) == "Deployed billing, approved by bob."
    assert text(replayed) == text(done)
    assert served.deployed == ["billing"] and served.board.only().status == "consumed"


async def test_a_denied_request_completes_with_the_denier_and_runs_nothing(served: Served) -> None:
    async with Client(served.app.mcp, elicitation_callback=answered_by_hand) as client:
        first = await call(client)
        served.board.decide("deny", by="carol", reason="freeze week\nsee #ops")
        denied = await call(client, state=first.request_state, answer=accept())
    assert isinstance(denied, CallToolResult) and not denied.is_error
    assert text(denied).startswith("Denied: carol denied Deploy to production (freeze week see #ops)")
    assert served.deployed == []


async def test_declining_the_link_withdraws_the_request(served: Served) -> None:
    async with Client(served.app.mcp, elicitation_callback=answered_by_hand) as client:
        first = await call(client)
        ended = await call(client, state=first.request_state, answer=decline())
    assert text(ended).startswith("Withdrawn:") and served.board.only().status == "withdrawn"
    assert served.deployed == []


async def test_without_url_mode_a_pending_request_is_an_approval_pending_result_not_an_error(served: Served) -> None:
    async with Client(served.app.mcp) as client:
        result = await call(client)
    assert isinstance(result, CallToolResult) and not result.is_error
    report = {"status": "approval_pending", "approval_id": "ap-1", "expires_at": 1_800_003_600.0, "approvals_needed": 1}
    # The tool answers text: the SDK's output schema for it (`result`) carries the report beside the text.
    assert result.structured_content == {**report, "result": text(result).split("} ", 1)[1]}
    assert json.loads(result.content[0].text) == report  # type: ignore[union-attr]
    assert "Waiting for approval" in text(result) and "ap-1" in text(result)
    assert served.board.only().status == "pending" and served.deployed == []


async def test_a_tool_without_an_output_schema_answers_the_pending_report_as_its_structured_content(
    served: Served,
) -> None:
    async with Client(served.app.mcp) as client:
        result = await client.call_tool("restart", {"service": "billing"})
    assert not result.is_error and result.structured_content is not None
    assert result.structured_content["status"] == "approval_pending"
    assert result.structured_content["approvals_needed"] == 1


async def test_the_meta_exposures_execute_tool_answers_a_pending_request_as_its_status_even_with_url_mode(
    make_settings: Callable[..., Any], clock: FrozenClock
) -> None:
    board = ApprovalsTestBoard(clock)
    settings = make_settings(expose="meta")
    app = Askback("approvals-meta", settings=settings, clock=clock, extensions=[ApprovalsTestExtension(board)])

    @app.tool()
    async def deploy(service: str, flow: Flow) -> str:
        await flow.approve(DEPLOY)
        return f"Deployed {service}."

    async with app.running(), Client(app.mcp, elicitation_callback=answered_by_hand) as client:
        result = await client.session.call_tool(
            "execute_tool", {"name": "deploy", "arguments": {"service": "billing"}}, allow_input_required=True
        )
    assert isinstance(result, CallToolResult) and not result.is_error
    assert result.structured_content is not None and result.structured_content["status"] == "approval_pending"
    assert board.only().status == "pending"


async def test_calling_again_with_the_same_arguments_goes_on_with_the_request_approved_meanwhile(
    served: Served,
) -> None:
    async with Client(served.app.mcp) as client:
        first = await client.call_tool("deploy", {"service": "billing"})
        served.board.decide("approve", by="carol")
        again = await client.call_tool("deploy", {"service": "billing"})
        other = await client.call_tool("deploy", {"service": "search"})
    assert first.structured_content is not None and first.structured_content["status"] == "approval_pending"
    assert text(again) == "Deployed billing, approved by carol."
    # Another call is another request: the approval of the first does not carry over.
    assert other.structured_content is not None and other.structured_content["status"] == "approval_pending"
    assert [a.digest for a in served.board.asks][:2] == [served.board.asks[0].digest] * 2
    assert served.board.asks[2].digest != served.board.asks[0].digest and served.deployed == ["billing"]
