"""The round as a plan, driven with plain data: every step the plan yields is compared with the one expected and
answered by the table, as the server's driver would answer it. No database, no HTTP, no handler, no clock."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

import pytest
from mcp_types import CallToolResult, ElicitResult, InputRequiredResult, TextContent

from askback.core.flow import Asked, Ended, FlowEvent, Refused, Returned
from askback.core.round import Limits, Recorded, expired, too_many_pending
from askback.core.round_plan import (
    Claim,
    EndResult,
    Failed,
    Hold,
    InProgress,
    Note,
    NotPushed,
    Outcome,
    Policy,
    Push,
    Pushed,
    Raise,
    Ran,
    ReadHeld,
    Record,
    Reply,
    Reuse,
    RoundRequest,
    RunHandler,
    ToolResult,
    Won,
    effect_route,
    round_plan,
)
from askback.core.state import FlowState
from askback.core.state import RecordedAnswer as Answer
from askback.errors import (
    InvalidStateError,
    MissingCapabilityError,
    RoundInProgressError,
    StoreUnavailableError,
)

LIMITS = Limits(flow_deadline=600, max_rounds=3)
POLICY = Policy(LIMITS)
HOLDING = Policy(LIMITS, hold_answers=True, state_grace=60)
T0 = 1_000.0
NOW = T0 + 10
LATE = T0 + 700

SCHEMA = {"type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"]}
CONFIRM = {
    "confirm": {
        "method": "elicitation/create",
        "params": {"mode": "form", "message": "Sure?", "requestedSchema": SCHEMA},
    }
}
YES = Answer("accept", {"ok": True}, "q-confirm")
ROUND1 = FlowState(flow_id="f1", started=T0, round=1, asked={"confirm": "q-confirm"})
HELD1 = replace(ROUND1, held=True)
WITH_YES = replace(ROUND1, answers={"confirm": YES})
ROUND2 = FlowState(flow_id="f1", started=T0, round=2, answers={"confirm": YES}, asked={"env": "q-env"})
ENV = {
    "env": {"method": "elicitation/create", "params": {"mode": "form", "message": "Which?", "requestedSchema": SCHEMA}}
}
RESPONSES = {"confirm": ElicitResult(action="accept", content={"ok": True})}
DONE_WIRE = {"content": [{"type": "text", "text": "Deleted."}], "isError": False, "resultType": "complete"}
DONE = CallToolResult(content=[TextContent(type="text", text="Deleted.")], is_error=False)
ANSWERED = FlowEvent("answered", "confirm", "form", action="accept", content={"ok": True})
INVALID = FlowEvent("invalid", "confirm", "form", action="accept", detail="not a boolean")


@dataclass(frozen=True)
class Stored:
    result: Any
    first: bool


@dataclass(frozen=True)
class Effect:
    status: str
    outcome: Any = None


def first(state: FlowState | None = None, *, now: float = NOW, pushed: bool = False) -> RoundRequest:
    return RoundRequest(sealed=state is not None, state=state, responses=None, now=now, pushed=pushed)


def answering(state: FlowState, *, now: float = NOW) -> RoundRequest:
    return RoundRequest(sealed=True, state=state, responses=RESPONSES, now=now)


def asked(state: FlowState, requests: Mapping[str, Any] = CONFIRM, *, events: Sequence[FlowEvent] = ()) -> Asked:
    prior = state.round - 1
    return Asked(requests, ("form",), state, None if prior == 0 else state.flow_id, prior, tuple(events))


def ask_outcome(state: FlowState, requests: Mapping[str, Any] = CONFIRM) -> dict[str, Any]:
    return {"inputRequests": dict(requests), "requestState": state.encode()}


def drive(request: RoundRequest, script: Sequence[tuple[Any, Any]], policy: Policy = POLICY) -> Outcome:
    """Run the plan, checking each step against the script and answering it with the script's reply."""
    plan = round_plan(request, policy)
    step = next(plan)
    for n, (expected, reply) in enumerate(script):
        assert step == expected, f"step {n}"
        try:
            step = plan.send(reply)
        except StopIteration as stop:
            assert n == len(script) - 1, f"the plan ended after step {n} of {len(script)}"
            outcome: Outcome = stop.value
            return outcome
    raise AssertionError(f"the plan went on with {step!r}")


def notes(*specs: tuple[Any, ...], at: float = NOW) -> tuple[Note, ...]:
    return tuple(Note(kind, at, flow, **fields) for kind, flow, fields in specs)


# --- the table -----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Case:
    request: RoundRequest
    script: Sequence[tuple[Any, Any]]
    outcome: Outcome
    policy: Policy = POLICY


EXPIRED = expired(ROUND1, LIMITS)
TOO_MANY = "Stopped: this request asked 3 rounds of questions without getting what it needs, so nothing was done. Call the tool again to start over."
ROUND3 = FlowState(flow_id="f1", started=T0, round=3)
DECLINED = "Cancelled: you declined (Confirm)."
CAPABILITY = MissingCapabilityError({"elicitation": {"form": {}}})
CRASH = RuntimeError("boom")
DOWN = StoreUnavailableError("the database could not be reached")

CASES = {
    "a first call that asks returns its questions and records what it asked": Case(
        first(),
        [
            (RunHandler(None, None, NOW, None), Ran(asked(ROUND1))),
            (
                Record(
                    None,
                    None,
                    NOW,
                    notes(("asked", "f1", {"round": 1, "keys": ("confirm",), "mode": "form"})),
                    round_outcome=ask_outcome(ROUND1),
                ),
                None,
            ),
        ],
        Reply(
            InputRequiredResult.model_validate(ask_outcome(ROUND1)),
            notes(("asked", "f1", {"round": 1, "keys": ("confirm",), "mode": "form"})),
        ),
    ),
    "a replayed final round returns the recorded result and runs nothing": Case(
        answering(ROUND1),
        [
            (Claim("f1", 1), Recorded(DONE_WIRE, completed=True)),
            (Record("f1", None, NOW, notes(("replayed", "f1", {"round": 1, "outcome": "completed"}))), None),
        ],
        Reply(DONE, notes(("replayed", "f1", {"round": 1, "outcome": "completed"}))),
    ),
    "a replayed round that asked returns what it asked": Case(
        answering(ROUND1),
        [
            (Claim("f1", 1), Recorded(ask_outcome(ROUND2, ENV), completed=False)),
            (Record("f1", None, NOW, notes(("replayed", "f1", {"round": 1, "outcome": "asked"}))), None),
        ],
        Reply(
            InputRequiredResult.model_validate(ask_outcome(ROUND2, ENV)),
            notes(("replayed", "f1", {"round": 1, "outcome": "asked"})),
        ),
    ),
    "an answer after the deadline ends the flow without running the handler": Case(
        answering(ROUND1, now=LATE),
        [
            (Claim("f1", 1), Won({})),
            (EndResult(EXPIRED.text), DONE),
            (
                Record(
                    "f1",
                    1,
                    LATE,
                    notes(("completed", "f1", {"round": 1, "outcome": "expired"}), at=LATE),
                    result=DONE_WIRE,
                ),
                Stored(DONE_WIRE, first=True),
            ),
        ],
        Reply(DONE, notes(("completed", "f1", {"round": 1, "outcome": "expired"}), at=LATE)),
    ),
    "held answers are put back into the state before the handler runs": Case(
        answering(HELD1),
        [
            (Claim("f1", 1), Won({})),
            (ReadHeld("f1", 1), {"confirm": YES}),
            (RunHandler(WITH_YES, RESPONSES, NOW, {}), Ran(Returned("Deleted.", "f1", 1, ()))),
            (ToolResult("Deleted."), DONE),
            (
                Record(
                    "f1", 1, NOW, notes(("completed", "f1", {"round": 1, "outcome": "completed"})), result=DONE_WIRE
                ),
                Stored(DONE_WIRE, first=True),
            ),
        ],
        Reply(DONE, notes(("completed", "f1", {"round": 1, "outcome": "completed"}))),
    ),
    "held answers that are gone end the flow as expired": Case(
        answering(HELD1),
        [
            (Claim("f1", 1), Won({})),
            (ReadHeld("f1", 1), None),
            (EndResult(expired(HELD1, LIMITS).text), DONE),
            (
                Record("f1", 1, NOW, notes(("completed", "f1", {"round": 1, "outcome": "expired"})), result=DONE_WIRE),
                Stored(DONE_WIRE, first=True),
            ),
        ],
        Reply(DONE, notes(("completed", "f1", {"round": 1, "outcome": "expired"}))),
    ),
    "held answers past the deadline are not even read": Case(
        answering(HELD1, now=LATE),
        [
            (Claim("f1", 1), Won({})),
            (EndResult(expired(HELD1, LIMITS).text), DONE),
            (
                Record(
                    "f1",
                    1,
                    LATE,
                    notes(("completed", "f1", {"round": 1, "outcome": "expired"}), at=LATE),
                    result=DONE_WIRE,
                ),
                Stored(DONE_WIRE, first=True),
            ),
        ],
        Reply(DONE, notes(("completed", "f1", {"round": 1, "outcome": "expired"}), at=LATE)),
    ),
    "answers are held on the server when the policy says so, and the state carries none": Case(
        answering(ROUND1),
        [
            (Claim("f1", 1), Won({})),
            (RunHandler(ROUND1, RESPONSES, NOW, {}), Ran(asked(ROUND2, ENV, events=[ANSWERED]))),
            (
                Record(
                    "f1",
                    1,
                    NOW,
                    notes(
                        (
                            "answered",
                            "f1",
                            {
                                "round": 1,
                                "keys": ("confirm",),
                                "mode": "form",
                                "action": "accept",
                                "content": {"ok": True},
                            },
                        ),
                        ("asked", "f1", {"round": 2, "keys": ("env",), "mode": "form"}),
                    ),
                    round_outcome=ask_outcome(replace(ROUND2, answers={}, held=True), ENV),
                    hold=Hold("f1", 2, {"confirm": YES}, T0 + 600 + 60),
                ),
                None,
            ),
        ],
        Reply(
            InputRequiredResult.model_validate(ask_outcome(replace(ROUND2, answers={}, held=True), ENV)),
            notes(
                (
                    "answered",
                    "f1",
                    {"round": 1, "keys": ("confirm",), "mode": "form", "action": "accept", "content": {"ok": True}},
                ),
                ("asked", "f1", {"round": 2, "keys": ("env",), "mode": "form"}),
            ),
        ),
        policy=HOLDING,
    ),
    "effects the ledger knows go to the handler, and those run under the round's claim are recorded with it": Case(
        answering(ROUND1),
        [
            (Claim("f1", 1), Won({"mail": Effect("done", "sent")})),
            (
                RunHandler(ROUND1, RESPONSES, NOW, {"mail": Effect("done", "sent")}),
                Ran(Returned("Deleted.", "f1", 1, ()), effects=(("audit", 1),), new_effects=(("delete", True),)),
            ),
            (ToolResult("Deleted."), DONE),
            (
                Record(
                    "f1",
                    1,
                    NOW,
                    notes(("completed", "f1", {"round": 1, "outcome": "completed"})),
                    effects=(("audit", 1),),
                    new_effects=(("delete", True),),
                    result=DONE_WIRE,
                ),
                Stored(DONE_WIRE, first=True),
            ),
        ],
        Reply(DONE, notes(("completed", "f1", {"round": 1, "outcome": "completed"}))),
    ),
    "an invalid answer is asked again, saying so": Case(
        answering(ROUND1),
        [
            (Claim("f1", 1), Won({})),
            (RunHandler(ROUND1, RESPONSES, NOW, {}), Ran(asked(ROUND2, CONFIRM, events=[INVALID]))),
            (
                Record(
                    "f1",
                    1,
                    NOW,
                    notes(
                        (
                            "rejected",
                            "f1",
                            {
                                "round": 1,
                                "keys": ("confirm",),
                                "mode": "form",
                                "outcome": "invalid_answer",
                                "detail": "not a boolean",
                            },
                        ),
                        ("asked", "f1", {"round": 2, "keys": ("confirm",), "mode": "form"}),
                    ),
                    round_outcome=ask_outcome(ROUND2),
                ),
                None,
            ),
        ],
        Reply(
            InputRequiredResult.model_validate(ask_outcome(ROUND2)),
            notes(
                (
                    "rejected",
                    "f1",
                    {
                        "round": 1,
                        "keys": ("confirm",),
                        "mode": "form",
                        "outcome": "invalid_answer",
                        "detail": "not a boolean",
                    },
                ),
                ("asked", "f1", {"round": 2, "keys": ("confirm",), "mode": "form"}),
            ),
        ),
    ),
    "a decline completes the flow with the question's message": Case(
        answering(ROUND1),
        [
            (Claim("f1", 1), Won({})),
            (RunHandler(ROUND1, RESPONSES, NOW, {}), Ran(Ended(DECLINED, "declined", "f1", 1, ()))),
            (EndResult(DECLINED), DONE),
            (
                Record("f1", 1, NOW, notes(("completed", "f1", {"round": 1, "outcome": "declined"})), result=DONE_WIRE),
                Stored(DONE_WIRE, first=True),
            ),
        ],
        Reply(DONE, notes(("completed", "f1", {"round": 1, "outcome": "declined"}))),
    ),
    "a flow still asking at the round cap ends": Case(
        answering(ROUND3),
        [
            (Claim("f1", 3), Won({})),
            (RunHandler(ROUND3, RESPONSES, NOW, {}), Ran(asked(replace(ROUND3, round=4)))),
            (EndResult(TOO_MANY), DONE),
            (
                Record(
                    "f1",
                    3,
                    NOW,
                    notes(("completed", "f1", {"round": 3, "outcome": "too_many_rounds"})),
                    result=DONE_WIRE,
                ),
                Stored(DONE_WIRE, first=True),
            ),
        ],
        Reply(DONE, notes(("completed", "f1", {"round": 3, "outcome": "too_many_rounds"}))),
    ),
    "a replay that lost the race to record answers the first result and audits a replay": Case(
        answering(ROUND1),
        [
            (Claim("f1", 1), Won({})),
            (RunHandler(ROUND1, RESPONSES, NOW, {}), Ran(Returned("Again.", "f1", 1, ()))),
            (ToolResult("Again."), CallToolResult(content=[TextContent(type="text", text="Again.")], is_error=False)),
            (
                Record(
                    "f1",
                    1,
                    NOW,
                    notes(("completed", "f1", {"round": 1, "outcome": "completed"})),
                    result={
                        "content": [{"type": "text", "text": "Again."}],
                        "isError": False,
                        "resultType": "complete",
                    },
                ),
                Stored(DONE_WIRE, first=False),
            ),
        ],
        Reply(DONE, notes(("replayed", "f1", {"round": 1, "outcome": "completed"}))),
    ),
    "a call outside any flow that asks nothing records nothing": Case(
        first(),
        [
            (RunHandler(None, None, NOW, None), Ran(Returned("Deleted.", None, 0, ()))),
            (ToolResult("Deleted."), DONE),
        ],
        Reply(DONE, ()),
    ),
    "a question with no usable fallback refuses the request and audits it": Case(
        first(),
        [
            (RunHandler(None, None, NOW, None), Ran(Refused(CAPABILITY, None, 0, ()))),
            (
                Record(
                    None,
                    None,
                    NOW,
                    notes(("rejected", None, {"outcome": "missing_capability", "detail": str(CAPABILITY)})),
                    strict=False,
                ),
                None,
            ),
        ],
        Raise(CAPABILITY, notes(("rejected", None, {"outcome": "missing_capability", "detail": str(CAPABILITY)}))),
    ),
    "a handler that raises before asking anything gives the round up and audits a tool error": Case(
        answering(ROUND1),
        [
            (Claim("f1", 1), Won({})),
            (
                RunHandler(ROUND1, RESPONSES, NOW, {}),
                Ran(None, new_effects=(("delete", True),), error=CRASH, detail="the tool raised RuntimeError"),
            ),
            (
                Record(
                    "f1",
                    1,
                    NOW,
                    notes(("rejected", "f1", {"outcome": "tool_error", "detail": "the tool raised RuntimeError"})),
                    new_effects=(("delete", True),),
                    strict=False,
                ),
                None,
            ),
        ],
        Raise(CRASH, notes(("rejected", "f1", {"outcome": "tool_error", "detail": "the tool raised RuntimeError"}))),
    ),
    "a database the tool cannot reach is audited before the run's answers": Case(
        answering(ROUND1),
        [
            (Claim("f1", 1), Won({})),
            (RunHandler(ROUND1, RESPONSES, NOW, {}), Ran(None, (ANSWERED,), error=DOWN, unavailable=True)),
            (
                Record(
                    "f1",
                    1,
                    NOW,
                    notes(
                        ("rejected", "f1", {"outcome": "store_unavailable", "detail": str(DOWN)}),
                        (
                            "answered",
                            "f1",
                            {
                                "round": 1,
                                "keys": ("confirm",),
                                "mode": "form",
                                "action": "accept",
                                "content": {"ok": True},
                            },
                        ),
                    ),
                    strict=False,
                ),
                None,
            ),
        ],
        Raise(
            DOWN,
            notes(
                ("rejected", "f1", {"outcome": "store_unavailable", "detail": str(DOWN)}),
                (
                    "answered",
                    "f1",
                    {"round": 1, "keys": ("confirm",), "mode": "form", "action": "accept", "content": {"ok": True}},
                ),
            ),
        ),
    ),
    "a round another copy still holds is refused as in progress": Case(
        answering(ROUND1),
        [
            (Claim("f1", 1), InProgress()),
            (
                Record(
                    "f1",
                    None,
                    NOW,
                    notes(("rejected", "f1", {"round": 1, "outcome": "round_in_progress"})),
                    strict=False,
                ),
                None,
            ),
        ],
        Raise(
            RoundInProgressError("still being answered by another copy"),
            notes(("rejected", "f1", {"round": 1, "outcome": "round_in_progress"})),
        ),
    ),
    "a claim the store cannot take fails with nothing to record": Case(
        answering(ROUND1),
        [(Claim("f1", 1), Failed(DOWN))],
        Raise(DOWN, ()),
    ),
    "a round that cannot record what it asked fails": Case(
        first(),
        [
            (RunHandler(None, None, NOW, None), Ran(asked(ROUND1))),
            (
                Record(
                    None,
                    None,
                    NOW,
                    notes(("asked", "f1", {"round": 1, "keys": ("confirm",), "mode": "form"})),
                    round_outcome=ask_outcome(ROUND1),
                ),
                Failed(DOWN),
            ),
        ],
        Raise(DOWN, notes(("asked", "f1", {"round": 1, "keys": ("confirm",), "mode": "form"}))),
    ),
    "a result that cannot be recorded gives the round up, keeping its effects, and fails": Case(
        answering(ROUND1),
        [
            (Claim("f1", 1), Won({})),
            (RunHandler(ROUND1, RESPONSES, NOW, {}), Ran(Returned("Deleted.", "f1", 1, ()), new_effects=(("d", 1),))),
            (ToolResult("Deleted."), DONE),
            (
                Record(
                    "f1",
                    1,
                    NOW,
                    notes(("completed", "f1", {"round": 1, "outcome": "completed"})),
                    new_effects=(("d", 1),),
                    result=DONE_WIRE,
                ),
                Failed(DOWN),
            ),
            (
                Record(
                    "f1",
                    1,
                    NOW,
                    notes(("completed", "f1", {"round": 1, "outcome": "completed"})),
                    new_effects=(("d", 1),),
                    strict=False,
                ),
                None,
            ),
        ],
        Raise(DOWN, notes(("completed", "f1", {"round": 1, "outcome": "completed"}))),
    ),
    "a state that is not askback's is refused": Case(
        RoundRequest(sealed=True, state=None, responses=None, now=NOW),
        [
            (
                Record(
                    None,
                    None,
                    NOW,
                    notes(
                        ("rejected", None, {"outcome": "invalid_state", "detail": "requestState not minted by askback"})
                    ),
                    strict=False,
                ),
                None,
            ),
        ],
        Raise(
            InvalidStateError(),
            notes(("rejected", None, {"outcome": "invalid_state", "detail": "requestState not minted by askback"})),
        ),
    ),
    "a 2025-11-25 session gets the questions pushed and the handler rerun with the answers, in one call": Case(
        first(pushed=True),
        [
            (RunHandler(None, None, NOW, None), Ran(asked(ROUND1))),
            (Push(CONFIRM, ROUND1, T0 + 600), Pushed(RESPONSES, NOW + 5)),
            (
                RunHandler(ROUND1, RESPONSES, NOW + 5, None),
                Ran(Returned("Deleted.", "f1", 1, (ANSWERED,)), effects=(("delete", True),)),
            ),
            (ToolResult("Deleted."), DONE),
            (
                Record(
                    "f1",
                    None,
                    NOW + 5,
                    notes(("asked", "f1", {"round": 1, "keys": ("confirm",), "mode": "form"}))
                    + notes(
                        (
                            "answered",
                            "f1",
                            {
                                "round": 1,
                                "keys": ("confirm",),
                                "mode": "form",
                                "action": "accept",
                                "content": {"ok": True},
                            },
                        ),
                        ("completed", "f1", {"round": 1, "outcome": "completed"}),
                        at=NOW + 5,
                    ),
                    effects=(("delete", True),),
                    round_outcome=ask_outcome(ROUND1),
                    result=DONE_WIRE,
                ),
                Stored(DONE_WIRE, first=True),
            ),
        ],
        Reply(
            DONE,
            notes(("asked", "f1", {"round": 1, "keys": ("confirm",), "mode": "form"}))
            + notes(
                (
                    "answered",
                    "f1",
                    {"round": 1, "keys": ("confirm",), "mode": "form", "action": "accept", "content": {"ok": True}},
                ),
                ("completed", "f1", {"round": 1, "outcome": "completed"}),
                at=NOW + 5,
            ),
        ),
    ),
    "a 2025-11-25 question that cannot be pushed for the caps ends the flow": Case(
        first(pushed=True),
        [
            (RunHandler(None, None, NOW, None), Ran(asked(ROUND1))),
            (Push(CONFIRM, ROUND1, T0 + 600), NotPushed("too_many_pending", NOW + 1)),
            (EndResult(too_many_pending(ROUND1, LIMITS).text), DONE),
            (
                Record(
                    "f1",
                    None,
                    NOW + 1,
                    notes(("asked", "f1", {"round": 1, "keys": ("confirm",), "mode": "form"}))
                    + notes(("completed", "f1", {"round": 1, "outcome": "too_many_pending"}), at=NOW + 1),
                    round_outcome=ask_outcome(ROUND1),
                    result=DONE_WIRE,
                ),
                Stored(DONE_WIRE, first=True),
            ),
        ],
        Reply(
            DONE,
            notes(("asked", "f1", {"round": 1, "keys": ("confirm",), "mode": "form"}))
            + notes(("completed", "f1", {"round": 1, "outcome": "too_many_pending"}), at=NOW + 1),
        ),
    ),
    "2025-11-25 answers that come after the deadline end the flow as expired": Case(
        first(pushed=True),
        [
            (RunHandler(None, None, NOW, None), Ran(asked(ROUND1))),
            (Push(CONFIRM, ROUND1, T0 + 600), Pushed(RESPONSES, LATE)),
            (EndResult(EXPIRED.text), DONE),
            (
                Record(
                    "f1",
                    None,
                    LATE,
                    notes(("asked", "f1", {"round": 1, "keys": ("confirm",), "mode": "form"}))
                    + notes(("completed", "f1", {"round": 1, "outcome": "expired"}), at=LATE),
                    round_outcome=ask_outcome(ROUND1),
                    result=DONE_WIRE,
                ),
                Stored(DONE_WIRE, first=True),
            ),
        ],
        Reply(
            DONE,
            notes(("asked", "f1", {"round": 1, "keys": ("confirm",), "mode": "form"}))
            + notes(("completed", "f1", {"round": 1, "outcome": "expired"}), at=LATE),
        ),
    ),
}


def _same_outcome(got: Outcome, expected: Outcome) -> None:
    assert type(got) is type(expected)
    assert got.notes == expected.notes
    if isinstance(expected, Reply):
        assert isinstance(got, Reply)
        assert got.result == expected.result
    else:
        assert isinstance(got, Raise)
        # Errors compare by kind and message (the plan makes a fresh one where it decides to refuse).
        assert type(got.error) is type(expected.error)
        assert str(expected.error) in str(got.error)


@pytest.mark.parametrize("case", list(CASES.values()), ids=list(CASES))
def test_the_round_plan(case: Case) -> None:
    _same_outcome(drive(case.request, case.script, case.policy), case.outcome)


@pytest.mark.parametrize(
    ("known", "ran", "expected"),
    [
        pytest.param(None, (), "run_claimed", id="outside a claimed round an effect takes its own claim"),
        pytest.param({}, (), "run_here", id="under the round's claim an effect nobody ran runs here"),
        pytest.param({"mail": Effect("done", "sent")}, (), Reuse("sent"), id="an effect done already is reused"),
        pytest.param({"mail": Effect("running")}, (), "run_claimed", id="an effect still claimed waits on its claim"),
        pytest.param({}, (("mail", "again"),), Reuse("again"), id="an effect run earlier in this call is reused"),
        pytest.param(
            {"mail": Effect("done", "sent")}, (("mail", "here"),), Reuse("here"), id="this call's run comes first"
        ),
    ],
)
def test_effect_route(known: Mapping[str, Effect] | None, ran: tuple[tuple[str, Any], ...], expected: Any) -> None:
    assert effect_route("mail", known=known, ran=ran) == expected
