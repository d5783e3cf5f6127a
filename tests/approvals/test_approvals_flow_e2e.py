"""`flow.approve` against the real approvals product: an app given `ApprovalsSetup`, driven by the SDK's in-memory
client one round at a time, decided through the service as the pages decide, on a real SQLite file: the status link
and its rounds, the pending report a client without URL mode reads (with and without an output schema, and through the
META exposure), and a call made again after its request was approved."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any

import pytest
from mcp import Client
from mcp_types import CallToolResult, ElicitResult, InputRequiredResult

from _approvals import BOB, CAROL
from askback import Approval, Askback, Flow
from askback.approvals.service import ApprovalService
from askback.approvals.setup import ApprovalsSetup
from askback.audit import AuditFilter
from askback.clock import FrozenClock
from askback.core.approving import approval_key
from askback.testing import accept, answered_by_hand, decline, text

pytestmark = pytest.mark.anyio

# Open for a minute: a request can expire well within the flow's own deadline.
DEPLOY = Approval(key="deploy", title="Deploy to production", principals=frozenset({"bob", "carol"}), ttl=60)
KEY = approval_key("deploy")
BASE = "http://127.0.0.1:8000"


async def nobody(request: Any) -> None:
    return None


@dataclass
class Served:
    app: Askback
    service: ApprovalService
    deployed: list[str]


@pytest.fixture
async def served(make_settings: Callable[..., Any], clock: FrozenClock) -> AsyncIterator[Served]:
    setup = ApprovalsSetup(sign_in=nobody, base_url=BASE)
    app = Askback("approvals-e2e", settings=make_settings(), clock=clock, extensions=[setup])
    deployed: list[str] = []

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
        yield Served(app, await setup.service(), deployed)


async def call(
    client: Client, *, service: str = "billing", state: str | None = None, answer: ElicitResult | None = None
) -> Any:
    return await client.session.call_tool(
        "deploy",
        {"service": service},
        input_responses={KEY: answer} if answer is not None else None,
        request_state=state,
        allow_input_required=True,
    )


def link_of(result: Any) -> str:
    assert isinstance(result, InputRequiredResult) and set(result.input_requests or {}) == {KEY}
    url: str = result.model_dump(mode="json", by_alias=True)["inputRequests"][KEY]["params"]["url"]
    return url


async def test_a_call_waits_for_the_approval_then_runs_its_effect_once_and_the_next_call_asks_anew(
    served: Served,
) -> None:
    async with Client(served.app.mcp, elicitation_callback=answered_by_hand) as client:
        first = await call(client)
        (record,) = await served.service.listing()
        assert link_of(first) == f"{BASE}/approvals/requests/{record.id}/status"
        assert record.summary == "Deploy billing" and record.arguments == {"service": "billing"}

        decided = await served.service.decide(BOB, record.id, "approve", "", digest=record.digest)
        assert decided.counted and decided.record.status == "approved"
        done = await call(client, state=first.request_state, answer=accept())
        replayed = await call(client, state=first.request_state, answer=accept())
        again = await call(client)

    assert text(done) == "Deployed billing, approved by bob." and text(replayed) == text(done)
    assert served.deployed == ["billing"]
    consumed = await served.service.get(record.id)
    assert consumed is not None and consumed.status == "consumed"
    # A new call (a new flow) with the same arguments: the consumed request is not reused.
    newer = [r for r in await served.service.listing() if r.id != record.id]
    assert link_of(again) and [r.status for r in newer] == ["pending"]


async def test_a_denial_completes_the_call_naming_who_denied_it_and_nothing_runs(served: Served) -> None:
    async with Client(served.app.mcp, elicitation_callback=answered_by_hand) as client:
        first = await call(client)
        (record,) = await served.service.listing()
        await served.service.decide(CAROL, record.id, "deny", "freeze week", digest=record.digest)
        denied = await call(client, state=first.request_state, answer=accept())

    assert isinstance(denied, CallToolResult) and not denied.is_error
    assert text(denied).startswith("Denied: carol denied Deploy to production (freeze week)")
    assert served.deployed == []


async def test_declining_the_link_withdraws_the_stored_request(served: Served) -> None:
    async with Client(served.app.mcp, elicitation_callback=answered_by_hand) as client:
        first = await call(client)
        ended = await call(client, state=first.request_state, answer=decline())

    (record,) = await served.service.listing()
    assert text(ended).startswith("Withdrawn:") and record.status == "withdrawn"
    assert served.deployed == []


async def test_a_request_expired_while_the_link_was_open_is_reported_not_replaced(
    served: Served, clock: FrozenClock
) -> None:
    async with Client(served.app.mcp, elicitation_callback=answered_by_hand) as client:
        first = await call(client)
        clock.advance(DEPLOY.ttl)
        expired = await call(client, state=first.request_state, answer=accept())

    assert isinstance(expired, CallToolResult)
    assert text(expired).startswith("Expired: the approval request for Deploy to production expired")
    assert [r.status for r in await served.service.listing()] == ["expired"]
    assert served.deployed == []


async def test_a_request_still_pending_after_the_link_was_accepted_asks_the_link_again(served: Served) -> None:
    async with Client(served.app.mcp, elicitation_callback=answered_by_hand) as client:
        first = await call(client)
        second = await call(client, state=first.request_state, answer=accept())
    assert link_of(second) == link_of(first)
    assert second.input_requests[KEY].params.message.startswith("Not decided yet.")
    answered = await (await served.app.store()).audit_log.query(AuditFilter(event="answered"))
    assert [(e.keys, e.mode, e.action) for e in answered] == [((KEY,), "url", "accept")]
    assert [r.status for r in await served.service.listing()] == ["pending"] and served.deployed == []


async def test_without_url_mode_a_pending_request_is_an_approval_pending_result_not_an_error(served: Served) -> None:
    async with Client(served.app.mcp) as client:
        result = await call(client)
    (record,) = await served.service.listing()
    assert isinstance(result, CallToolResult) and not result.is_error
    report = {"status": "approval_pending", "approval_id": record.id, "expires_at": record.expires_at}
    # The tool answers text: the SDK's output schema for it (`result`) carries the report beside the text.
    assert result.structured_content == {**report, "approvals_needed": 1, "result": text(result).split("} ", 1)[1]}
    assert json.loads(result.content[0].text) == {**report, "approvals_needed": 1}  # type: ignore[union-attr]
    assert "Waiting for approval" in text(result) and record.id in text(result)
    assert record.status == "pending" and served.deployed == []


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
    setup = ApprovalsSetup(sign_in=nobody, base_url=BASE)
    app = Askback("approvals-meta", settings=make_settings(expose="meta"), clock=clock, extensions=[setup])

    @app.tool()
    async def deploy(service: str, flow: Flow) -> str:
        await flow.approve(DEPLOY)
        return f"Deployed {service}."

    async with app.running(), Client(app.mcp, elicitation_callback=answered_by_hand) as client:
        result = await client.session.call_tool(
            "execute_tool", {"name": "deploy", "arguments": {"service": "billing"}}, allow_input_required=True
        )
        records = await (await setup.service()).listing()
    assert isinstance(result, CallToolResult) and not result.is_error
    assert result.structured_content is not None and result.structured_content["status"] == "approval_pending"
    assert [r.status for r in records] == ["pending"]


async def test_calling_again_with_the_same_arguments_goes_on_with_the_request_approved_meanwhile(
    served: Served,
) -> None:
    async with Client(served.app.mcp) as client:
        first = await client.call_tool("deploy", {"service": "billing"})
        (record,) = await served.service.listing()
        await served.service.decide(CAROL, record.id, "approve", "", digest=record.digest)
        again = await client.call_tool("deploy", {"service": "billing"})
        other = await client.call_tool("deploy", {"service": "search"})
    assert first.structured_content is not None and first.structured_content["status"] == "approval_pending"
    assert text(again) == "Deployed billing, approved by carol."
    # Another call is another request: the approval of the first does not carry over.
    assert other.structured_content is not None and other.structured_content["status"] == "approval_pending"
    by_service = {r.arguments["service"]: r.status for r in await served.service.listing()}
    assert by_service == {"billing": "consumed", "search": "pending"} and served.deployed == ["billing"]
