"""`flow.approve` against the real approvals product: an app given `ApprovalsSetup`, driven by the SDK's in-memory
client one round at a time, decided through the service as the pages decide, on a real SQLite file."""

from __future__ import annotations

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
