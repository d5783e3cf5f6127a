"""`flow.approve` without I/O: a handler driven through `askback.core.flow.run`, the approvals product stood in for by a
scripted port that answers each request with the `ApprovalState` the test names."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

import pytest
from mcp_types import ClientCapabilities, ElicitResult

from askback.core.approving import (
    Approval,
    ApprovalAsk,
    ApprovalState,
    Approved,
    approval_digest,
    approval_key,
)
from askback.core.caller import Caller
from askback.core.flow import Asked, Ended, Flow, Returned, RunOutcome, run
from askback.core.questions import Confirm
from askback.core.state import FlowState, RecordedAnswer
from askback.errors import DefinitionError, LimitReachedError

pytestmark = pytest.mark.anyio

T0 = 1_800_000_000.0
URL_MODE = ClientCapabilities.model_validate({"elicitation": {"form": {}, "url": {}}})
FORM_ONLY = ClientCapabilities.model_validate({"elicitation": {"form": {}}})
STATUS_URL = "https://approvals.example.com/requests/ap-1"
DEPLOY = Approval(key="deploy", title="Deploy to production", principals=frozenset({"bob", "carol"}))
KEY = approval_key("deploy")


def pending(**changes: Any) -> ApprovalState:
    return replace(
        ApprovalState(id="ap-1", status="pending", expires_at=T0 + 3600, required=1, status_url=STATUS_URL), **changes
    )


@dataclass
class ScriptedApprovals:
    """The approvals of one caller, as the test scripts them: each `request` answers the next state of `script`
    (the last one again once the script runs out); `withdraw` answers `withdrawn` (or `on_withdraw`)."""

    script: list[ApprovalState | BaseException]
    on_withdraw: ApprovalState | None = None
    asks: list[ApprovalAsk] = field(default_factory=list)
    withdrawn: list[str] = field(default_factory=list)

    async def request(self, ask: ApprovalAsk) -> ApprovalState:
        self.asks.append(ask)
        step = self.script.pop(0) if len(self.script) > 1 else self.script[0]
        if isinstance(step, BaseException):
            raise step
        return step

    async def withdraw(self, approval_id: str) -> ApprovalState:
        self.withdrawn.append(approval_id)
        return self.on_withdraw or pending(id=approval_id, status="withdrawn")


def flow_of(
    port: ScriptedApprovals | None,
    *,
    capabilities: ClientCapabilities | None = URL_MODE,
    state: FlowState | None = None,
    responses: Mapping[str, Any] | None = None,
    arguments: Mapping[str, Any] | None = None,
    caller: Caller | None = None,
    connect_mode: Any = "ask",
    in_task: bool = False,
) -> Flow:
    return Flow(
        tool="deploy",
        arguments={"service": "billing", "version": "2.4.1"} if arguments is None else arguments,
        capabilities=capabilities,
        state=state,
        responses=responses,
        now=T0,
        new_id=lambda: "flow-1",
        caller=Caller("alice", actors=("agent-7",)) if caller is None else caller,
        connect_mode=connect_mode,
        approvals=port,
        in_task=in_task,
    )


def deploying(flow: Flow, ran: list[str], approval: Approval = DEPLOY) -> Callable[[], Awaitable[Any]]:
    async def handler() -> Any:
        approved = await flow.approve(approval, summary="Deploy billing 2.4.1")
        await flow.once("deploy", _effect(ran))
        return approved

    return handler


def _effect(ran: list[str]) -> Callable[[], Awaitable[str]]:
    async def effect() -> str:
        ran.append("deployed")
        return "deployed"

    return effect


async def go(flow: Flow, ran: list[str] | None = None, approval: Approval = DEPLOY) -> RunOutcome:
    return await run(flow, deploying(flow, [] if ran is None else ran, approval), new_id=lambda: "flow-1")


async def round_two(first: RunOutcome, port: ScriptedApprovals, action: str, ran: list[str]) -> RunOutcome:
    assert isinstance(first, Asked)
    responses = {KEY: ElicitResult.model_validate({"action": action})}
    return await go(flow_of(port, state=first.next_state, responses=responses), ran)


# --- what the port reports -------------------------------------------------------------------------------------


async def test_a_consumed_request_lets_the_handler_go_on_to_its_effect_with_who_approved_it() -> None:
    port = ScriptedApprovals([pending(status="consumed", approvers=("bob",))])
    ran: list[str] = []
    outcome = await go(flow_of(port), ran)
    assert isinstance(outcome, Returned)
    assert outcome.value == Approved("ap-1", ("bob",), "consumed")
    assert ran == ["deployed"]


async def test_a_pending_request_asks_a_url_question_linking_to_its_status_page() -> None:
    port = ScriptedApprovals([pending(required=2, approvers=("bob",))])
    ran: list[str] = []
    outcome = await go(flow_of(port), ran)
    assert isinstance(outcome, Asked) and outcome.modes == ("url",)
    params = outcome.requests[KEY]["params"]
    assert params["mode"] == "url" and params["url"] == STATUS_URL
    assert "Deploy to production" in params["message"] and "1 more approval " in params["message"]
    assert "2027-01-15 09:00 UTC" in params["message"]
    assert outcome.next_state.flow_id == "flow-1" and KEY in outcome.next_state.asked
    assert ran == []


async def test_an_accepted_link_while_still_pending_reads_the_request_again_and_asks_the_link_again() -> None:
    port = ScriptedApprovals([pending()])
    ran: list[str] = []
    second = await round_two(await go(flow_of(port)), port, "accept", ran)
    assert isinstance(second, Asked)
    assert second.requests[KEY]["params"]["message"].startswith("Not decided yet. ")
    assert [(e.kind, e.key, e.action) for e in second.events] == [("answered", KEY, "accept")]
    assert len(port.asks) == 2 and ran == []
    # The second round follows the request the link showed, named in the sealed state.
    assert [a.following for a in port.asks] == [None, "ap-1"]


async def test_an_accepted_link_once_the_request_is_consumed_goes_on() -> None:
    port = ScriptedApprovals([pending(), pending(status="consumed", approvers=("carol",))])
    ran: list[str] = []
    second = await round_two(await go(flow_of(port)), port, "accept", ran)
    assert isinstance(second, Returned) and second.value.approvers == ("carol",)
    assert ran == ["deployed"]


async def test_an_answer_to_the_link_without_askbacks_sealed_state_follows_no_request() -> None:
    port = ScriptedApprovals([pending()])
    await go(flow_of(port, responses={KEY: ElicitResult(action="accept")}))
    # Only the sealed state names the request a link showed: a client cannot point the flow at another one.
    assert port.asks[0].following is None


@pytest.mark.parametrize("action", ["decline", "accept"])
async def test_an_answer_to_a_link_never_asked_withdraws_nothing_and_is_not_recorded(action: str) -> None:
    port = ScriptedApprovals([pending()])
    outcome = await go(flow_of(port, responses={KEY: ElicitResult.model_validate({"action": action})}))
    # No sealed state: the link was not asked, so the answer is not taken, and the pending request asks its link.
    assert isinstance(outcome, Asked) and list(outcome.requests) == [KEY]
    assert port.withdrawn == [] and [e.kind for e in outcome.events] == []


@pytest.mark.parametrize("action", ["decline", "cancel"])
async def test_declining_or_dismissing_the_link_withdraws_the_pending_request(action: str) -> None:
    port = ScriptedApprovals([pending()])
    ran: list[str] = []
    second = await round_two(await go(flow_of(port)), port, action, ran)
    assert isinstance(second, Ended) and second.reason == "withdrawn"
    assert second.text.startswith("Withdrawn: the approval request for Deploy to production was withdrawn")
    assert port.withdrawn == ["ap-1"] and ran == []
    assert [(e.kind, e.action) for e in second.events] == [("answered", action)]


async def test_a_request_approved_before_the_decline_reached_it_is_left_for_a_later_call() -> None:
    port = ScriptedApprovals([pending()], on_withdraw=pending(status="approved", approvers=("bob",)))
    ran: list[str] = []
    second = await round_two(await go(flow_of(port)), port, "decline", ran)
    assert isinstance(second, Ended) and second.reason == "declined"
    assert "approved meanwhile" in second.text and ran == []


async def test_a_denied_request_completes_naming_who_denied_it_and_why_on_one_line() -> None:
    reason = "not on a Friday\n\x1b[2Jreally\u202e" + "x" * 400
    port = ScriptedApprovals([pending(status="denied", denied_by="bob", reason=reason)])
    ran: list[str] = []
    outcome = await go(flow_of(port), ran)
    assert isinstance(outcome, Ended) and outcome.reason == "denied"
    assert outcome.text.startswith("Denied: bob denied Deploy to production (not on a Friday \\x1b[2Jreally\\u202e")
    assert "\n" not in outcome.text and "\x1b" not in outcome.text and "\u202e" not in outcome.text
    assert len(outcome.text) < 400 and ran == []


async def test_an_expired_request_completes_saying_nothing_was_done() -> None:
    ran: list[str] = []
    outcome = await go(flow_of(ScriptedApprovals([pending(status="expired")])), ran)
    assert isinstance(outcome, Ended) and outcome.reason == "approval_expired"
    assert "expired before it was approved and used, so nothing was done" in outcome.text and ran == []


async def test_a_withdrawn_request_completes_saying_so() -> None:
    outcome = await go(flow_of(ScriptedApprovals([pending(status="withdrawn")])))
    assert isinstance(outcome, Ended) and outcome.reason == "withdrawn"


async def test_an_approved_request_the_port_did_not_consume_is_refused_as_a_broken_port() -> None:
    with pytest.raises(DefinitionError, match="'approved'"):
        await go(flow_of(ScriptedApprovals([pending(status="approved")])))


# --- clients that cannot show the status page ------------------------------------------------------------------


@pytest.mark.parametrize("capabilities", [FORM_ONLY, None])
async def test_without_url_mode_a_pending_request_completes_with_its_status_not_an_error(
    capabilities: ClientCapabilities | None,
) -> None:
    port = ScriptedApprovals([pending(required=3, approvers=("bob",))])
    outcome = await go(flow_of(port, capabilities=capabilities))
    assert isinstance(outcome, Ended) and outcome.reason == "approval_pending"
    assert outcome.structured == {
        "status": "approval_pending",
        "approval_id": "ap-1",
        "expires_at": T0 + 3600,
        "approvals_needed": 2,
    }
    assert "2 more approvals" in outcome.text and "ap-1" in outcome.text


async def test_in_the_report_mode_a_pending_request_completes_with_its_status_even_with_url_mode() -> None:
    outcome = await go(flow_of(ScriptedApprovals([pending()]), connect_mode="report"))
    assert isinstance(outcome, Ended) and outcome.structured is not None
    assert outcome.structured["status"] == "approval_pending"


@pytest.mark.parametrize("capabilities", [FORM_ONLY, None])
async def test_in_a_task_a_pending_request_asks_only_its_link_even_without_url_mode(
    capabilities: ClientCapabilities | None,
) -> None:
    # The task runner keeps a round whose only question is the link as a `working` wait: the client sees no link.
    outcome = await go(flow_of(ScriptedApprovals([pending()]), capabilities=capabilities, in_task=True))
    assert isinstance(outcome, Asked) and list(outcome.requests) == [KEY] and outcome.modes == ("url",)


async def test_in_a_task_a_link_beside_another_question_needs_url_mode_else_the_pending_report() -> None:
    flow = flow_of(ScriptedApprovals([pending()]), capabilities=FORM_ONLY, in_task=True)

    async def both() -> Any:
        # Another question scheduled this round first: the round would show the link to a client without URL mode.
        flow._round.schedule(Confirm(key="first", message="Sure?"), {"mode": "form", "message": "Sure?"})
        return await flow.approve(DEPLOY)

    outcome = await run(flow, both, new_id=lambda: "flow-1")
    assert isinstance(outcome, Ended) and outcome.reason == "approval_pending"


# --- refusals ----------------------------------------------------------------------------------------------------


async def test_without_an_approvals_port_flow_approve_names_how_to_enable_approvals() -> None:
    with pytest.raises(DefinitionError, match="ApprovalsSetup"):
        await go(flow_of(None))


async def test_a_caller_at_the_cap_of_pending_requests_gets_a_tool_error_naming_the_cap() -> None:
    port = ScriptedApprovals([LimitReachedError("too many pending approval requests", limit=20)])
    with pytest.raises(LimitReachedError, match="20 approval requests waiting") as refused:
        await go(flow_of(port))
    assert refused.value.tool_error and refused.value.limit == 20


async def test_an_approval_key_too_long_for_its_link_is_refused_when_declared() -> None:
    Approval(key="k" * 47, title="t", principals=frozenset({"bob"}))
    with pytest.raises(DefinitionError, match="up to 46"):
        Approval(key="k" * 48, title="t", principals=frozenset({"bob"}))


@pytest.mark.parametrize(
    ("changes", "refusal"),
    [
        ({"key": "1st"}, "a letter then"),
        ({"key": "a b"}, "a letter then"),
        ({"title": " "}, "white space"),
        ({"title": 7}, "one line of text"),
        ({"title": "two\nlines"}, "U\\+000A"),
        ({"principals": "bob"}, "not one string"),
        ({"principals": frozenset(), "groups": frozenset()}, "name who may approve"),
        ({"principals": frozenset({"bob\u202e"})}, "U\\+202E"),
        ({"required": 0}, "at least 1"),
        ({"required": True}, "at least 1"),
        ({"required": 3}, "only 2 principals"),
        ({"ttl": 10}, "between 60 seconds and 30 days"),
        ({"ttl": "1h"}, "number of seconds"),
        ({"hidden": frozenset({""})}, "empty"),
    ],
)
def test_the_approval_constructor_refuses_what_can_never_work(changes: dict[str, Any], refusal: str) -> None:
    given: dict[str, Any] = {"key": "deploy", "title": "Deploy", "principals": frozenset({"bob", "carol"})}
    with pytest.raises(DefinitionError, match=refusal):
        Approval(**{**given, **changes})


# --- what is approved --------------------------------------------------------------------------------------------


async def test_the_request_carries_this_flow_the_callers_actors_and_a_neutralised_summary() -> None:
    port = ScriptedApprovals([pending()])
    flow = flow_of(port)

    async def handler() -> Any:
        return await flow.approve(DEPLOY, summary="Deploy\x1b]52;c;x\x07 billing\n" + "y" * 600)

    await run(flow, handler, new_id=lambda: "unused")
    (ask,) = port.asks
    assert ask.flow_id == "flow-1" and ask.actors == ("agent-7",) and ask.tool == "deploy"
    assert ask.summary is not None and len(ask.summary) < 560
    assert "\x1b" not in ask.summary and "\n" not in ask.summary
    assert ask.digest == approval_digest(
        tool="deploy", arguments=ask.arguments, answers={}, requester="alice", policy=DEPLOY.policy()
    )


BASE: dict[str, Any] = {
    "tool": "deploy",
    "arguments": {"service": "billing", "version": "2.4.1"},
    "answers": {"confirm": {"a": "accept", "c": {"ok": True}, "q": "d1"}},
    "requester": "alice",
    "policy": DEPLOY.policy(),
}


@pytest.mark.parametrize(
    "changed",
    [
        {"tool": "rollback"},
        {"arguments": {"service": "billing", "version": "2.4.2"}},
        {"arguments": {"service": "billing", "version": "2.4.1", "force": True}},
        {"answers": {"confirm": {"a": "accept", "c": {"ok": False}, "q": "d1"}}},
        {"answers": {}},
        {"requester": "https://other.example.com#alice"},
        {"requester": None},
        {"policy": replace(DEPLOY, required=2).policy()},
        {"policy": replace(DEPLOY, self_approval=True).policy()},
        {"policy": replace(DEPLOY, hidden=frozenset({"version"})).policy()},
    ],
)
def test_the_digest_changes_when_any_part_of_the_call_changes(changed: dict[str, Any]) -> None:
    assert approval_digest(**{**BASE, **changed}) != approval_digest(**BASE)


def test_the_digest_does_not_change_with_the_order_of_keys() -> None:
    reordered = {
        **BASE,
        "arguments": {"version": "2.4.1", "service": "billing"},
        "policy": dict(reversed(list(DEPLOY.policy().items()))),
    }
    assert approval_digest(**reordered) == approval_digest(**BASE)


async def test_the_answers_read_before_the_approval_are_approved_and_those_after_it_are_not() -> None:
    sure = Confirm(key="sure", message="Sure?")
    first, later = ScriptedApprovals([pending()]), ScriptedApprovals([pending()])

    async def handler(flow: Flow) -> Any:
        await flow.approve(DEPLOY)
        return flow.ask(sure)

    await run(flow_one := flow_of(first), lambda: handler(flow_one), new_id=lambda: "flow-1")
    # A later round of the same flow: the answer to the question after the approval is already in the state.
    _, q = sure.shown()
    state = FlowState("flow-1", T0, 2, answers={"sure": _accepted(q)})
    await run(flow_two := flow_of(later, state=state), lambda: handler(flow_two), new_id=lambda: "flow-1")
    assert first.asks[0].digest == later.asks[0].digest and later.asks[0].answers == {}


async def test_an_answer_read_before_the_approval_is_part_of_what_is_approved() -> None:
    sure = Confirm(key="sure", message="Sure?")
    port = ScriptedApprovals([pending()])
    _, q = sure.shown()
    state = FlowState("flow-1", T0, 1, answers={"sure": _accepted(q)})
    flow = flow_of(port, state=state)

    async def handler() -> Any:
        flow.ask(sure)
        return await flow.approve(DEPLOY)

    await run(flow, handler, new_id=lambda: "flow-1")
    assert port.asks[0].answers == {"sure": {"a": "accept", "c": {"confirm": True}, "q": q}}


def _accepted(q: str) -> RecordedAnswer:
    return RecordedAnswer("accept", {"confirm": True}, q)
