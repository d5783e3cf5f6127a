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
    Policy,
    Push,
    Pushed,
    Raise,
    Ran,
    ReadHeld,
    Record,
    Reply,
    Reuse,
    RoundEnd,
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


def drive(request: RoundRequest, script: Sequence[tuple[Any, Any]], policy: Policy = POLICY) -> RoundEnd:
    """Run the plan, checking each step against the script and answering it with the script's reply."""
    plan = round_plan(request, policy)
    step = next(plan)
    for n, (expected, reply) in enumerate(script):
        assert step == expected, f"step {n}"
        try:
            step = plan.send(reply)
        except StopIteration as stop:
            assert n == len(script) - 1, f"the plan ended after step {n} of {len(script)}"
            outcome: RoundEnd = stop.value
            return outcome
    raise AssertionError(f"the plan went on with {step!r}")


# --- builders: the audit notes and closing steps the table repeats -------------------------------------------------


def note(event: Any, *, flow: str | None = "f1", at: float = NOW, **fields: Any) -> Note:
    return Note(event, at, flow, **fields)


def asked_note(round: int = 1, keys: tuple[str, ...] = ("confirm",), *, at: float = NOW) -> Note:
    return note("asked", at=at, round=round, keys=keys, mode="form")


def answered_note(*, at: float = NOW) -> Note:
    """The person accepted the confirm question of round 1 with `{"ok": true}`."""
    return note("answered", at=at, round=1, keys=("confirm",), mode="form", action="accept", content={"ok": True})


def completed_note(outcome: str = "completed", *, round: int = 1, at: float = NOW) -> Note:
    return note("completed", at=at, round=round, outcome=outcome)


def rejected_note(outcome: str, *, flow: str | None = "f1", **fields: Any) -> Note:
    return note("rejected", flow=flow, outcome=outcome, **fields)


def unrecorded_note() -> Note:
    """A completion whose record failed (`DOWN`): the call did not complete, and the trail says so."""
    return note("rejected", round=1, outcome="unrecorded", detail="the database could not be reached")


def ends(
    step: ToolResult | EndResult, noted: tuple[Note, ...], *, round: int | None = 1, at: float = NOW, **record: Any
) -> list[tuple[Any, Any]]:
    """The last two steps of a round that completes: `step` (the handler's value or an end text) answered with
    `DONE`, then the record of `DONE_WIRE` with the audit notes `noted`, answered as the first result recorded."""
    return [(step, DONE), (Record("f1", round, at, noted, result=DONE_WIRE, **record), Stored(DONE_WIRE, first=True))]


def asked_record(noted: tuple[Note, ...], outcome: Mapping[str, Any], **record: Any) -> Record:
    """The record of a round that asked: its audit notes and `outcome` (its questions and state)."""
    return Record(record.pop("flow", "f1"), record.pop("round", 1), NOW, noted, round_outcome=outcome, **record)


def lenient(noted: tuple[Note, ...], *, flow: str | None = "f1", round: int | None = 1, **record: Any) -> Record:
    """The record of a round that fails: its effects and audit notes, the claim released; a failure to write it is
    logged, not the round's."""
    return Record(flow, round, NOW, noted, strict=False, **record)


# --- the table -----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Case:
    request: RoundRequest
    script: Sequence[tuple[Any, Any]]
    outcome: RoundEnd
    policy: Policy = POLICY


EXPIRED = expired(ROUND1, LIMITS)
TOO_MANY = "Stopped: this request asked 3 rounds of questions without getting what it needs, so nothing was done. Call the tool again to start over."
ROUND3 = FlowState(flow_id="f1", started=T0, round=3)
DECLINED = "Cancelled: you declined (Confirm)."
CAPABILITY = MissingCapabilityError({"elicitation": {"form": {}}})
CRASH = RuntimeError("boom")
DOWN = StoreUnavailableError("the database could not be reached")
WON = (Claim("f1", 1), Won({}))
HELD_HERE = ask_outcome(replace(ROUND2, answers={}, held=True), ENV)
AGAIN_WIRE = {"content": [{"type": "text", "text": "Again."}], "isError": False, "resultType": "complete"}
NOT_OURS = "requestState not minted by askback"
INVALID_NOTE = rejected_note("invalid_answer", round=1, keys=("confirm",), mode="form", detail="not a boolean")

CASES = {
    "a first call that asks returns its questions and records what it asked": Case(
        first(),
        [
            (RunHandler(None, None, NOW, None), Ran(asked(ROUND1))),
            (asked_record((asked_note(),), ask_outcome(ROUND1), flow=None, round=None), None),
        ],
        Reply(InputRequiredResult.model_validate(ask_outcome(ROUND1)), (asked_note(),)),
    ),
    "a replayed final round returns the recorded result and runs nothing": Case(
        answering(ROUND1),
        [
            (Claim("f1", 1), Recorded(DONE_WIRE, completed=True)),
            (Record("f1", None, NOW, (note("replayed", round=1, outcome="completed"),)), None),
        ],
        Reply(DONE, (note("replayed", round=1, outcome="completed"),)),
    ),
    "a replayed round that asked returns what it asked": Case(
        answering(ROUND1),
        [
            (Claim("f1", 1), Recorded(ask_outcome(ROUND2, ENV), completed=False)),
            (Record("f1", None, NOW, (note("replayed", round=1, outcome="asked"),)), None),
        ],
        Reply(
            InputRequiredResult.model_validate(ask_outcome(ROUND2, ENV)), (note("replayed", round=1, outcome="asked"),)
        ),
    ),
    "an answer after the deadline ends the flow without running the handler": Case(
        answering(ROUND1, now=LATE),
        [WON, *ends(EndResult(EXPIRED.text), (completed_note("expired", at=LATE),), at=LATE)],
        Reply(DONE, (completed_note("expired", at=LATE),)),
    ),
    "held answers are put back into the state before the handler runs": Case(
        answering(HELD1),
        [
            WON,
            (ReadHeld("f1", 1), {"confirm": YES}),
            (RunHandler(WITH_YES, RESPONSES, NOW, {}), Ran(Returned("Deleted.", "f1", 1, ()))),
            *ends(ToolResult("Deleted."), (completed_note(),)),
        ],
        Reply(DONE, (completed_note(),)),
    ),
    "held answers that are gone end the flow as expired": Case(
        answering(HELD1),
        [WON, (ReadHeld("f1", 1), None), *ends(EndResult(expired(HELD1, LIMITS).text), (completed_note("expired"),))],
        Reply(DONE, (completed_note("expired"),)),
    ),
    "held answers past the deadline are not even read": Case(
        answering(HELD1, now=LATE),
        [WON, *ends(EndResult(expired(HELD1, LIMITS).text), (completed_note("expired", at=LATE),), at=LATE)],
        Reply(DONE, (completed_note("expired", at=LATE),)),
    ),
    "answers are held on the server when the policy says so, and the state carries none": Case(
        answering(ROUND1),
        [
            WON,
            (RunHandler(ROUND1, RESPONSES, NOW, {}), Ran(asked(ROUND2, ENV, events=[ANSWERED]))),
            (
                asked_record(
                    (answered_note(), asked_note(2, ("env",))),
                    HELD_HERE,
                    hold=Hold("f1", 2, {"confirm": YES}, T0 + 600 + 60),
                ),
                None,
            ),
        ],
        Reply(InputRequiredResult.model_validate(HELD_HERE), (answered_note(), asked_note(2, ("env",)))),
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
            *ends(
                ToolResult("Deleted."), (completed_note(),), effects=(("audit", 1),), new_effects=(("delete", True),)
            ),
        ],
        Reply(DONE, (completed_note(),)),
    ),
    "an invalid answer is asked again, saying so": Case(
        answering(ROUND1),
        [
            WON,
            (RunHandler(ROUND1, RESPONSES, NOW, {}), Ran(asked(ROUND2, CONFIRM, events=[INVALID]))),
            (asked_record((INVALID_NOTE, asked_note(2)), ask_outcome(ROUND2)), None),
        ],
        Reply(
            InputRequiredResult.model_validate(ask_outcome(ROUND2)),
            (INVALID_NOTE, asked_note(2)),
        ),
    ),
    "a decline completes the flow with the question's message": Case(
        answering(ROUND1),
        [
            WON,
            (RunHandler(ROUND1, RESPONSES, NOW, {}), Ran(Ended(DECLINED, "declined", "f1", 1, ()))),
            *ends(EndResult(DECLINED), (completed_note("declined"),)),
        ],
        Reply(DONE, (completed_note("declined"),)),
    ),
    "a flow still asking at the round cap ends": Case(
        answering(ROUND3),
        [
            (Claim("f1", 3), Won({})),
            (RunHandler(ROUND3, RESPONSES, NOW, {}), Ran(asked(replace(ROUND3, round=4)))),
            *ends(EndResult(TOO_MANY), (completed_note("too_many_rounds", round=3),), round=3),
        ],
        Reply(DONE, (completed_note("too_many_rounds", round=3),)),
    ),
    "a replay that lost the race to record answers the first result and audits a replay": Case(
        answering(ROUND1),
        [
            WON,
            (RunHandler(ROUND1, RESPONSES, NOW, {}), Ran(Returned("Again.", "f1", 1, ()))),
            (ToolResult("Again."), CallToolResult(content=[TextContent(type="text", text="Again.")], is_error=False)),
            (Record("f1", 1, NOW, (completed_note(),), result=AGAIN_WIRE), Stored(DONE_WIRE, first=False)),
        ],
        Reply(DONE, (note("replayed", round=1, outcome="completed"),)),
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
                lenient(
                    (rejected_note("missing_capability", flow=None, detail=str(CAPABILITY)),), flow=None, round=None
                ),
                None,
            ),
        ],
        Raise(CAPABILITY, (rejected_note("missing_capability", flow=None, detail=str(CAPABILITY)),)),
    ),
    "a handler that raises before asking anything gives the round up and audits a tool error": Case(
        answering(ROUND1),
        [
            WON,
            (
                RunHandler(ROUND1, RESPONSES, NOW, {}),
                Ran(None, new_effects=(("delete", True),), error=CRASH, detail="the tool raised RuntimeError"),
            ),
            (
                lenient(
                    (rejected_note("tool_error", detail="the tool raised RuntimeError"),),
                    new_effects=(("delete", True),),
                ),
                None,
            ),
        ],
        Raise(CRASH, (rejected_note("tool_error", detail="the tool raised RuntimeError"),)),
    ),
    "a database the tool cannot reach is audited before the run's answers": Case(
        answering(ROUND1),
        [
            WON,
            (RunHandler(ROUND1, RESPONSES, NOW, {}), Ran(None, (ANSWERED,), error=DOWN, unavailable=True)),
            (lenient((rejected_note("store_unavailable", detail=str(DOWN)), answered_note())), None),
        ],
        Raise(DOWN, (rejected_note("store_unavailable", detail=str(DOWN)), answered_note())),
    ),
    "a round another copy still holds is refused as in progress": Case(
        answering(ROUND1),
        [(Claim("f1", 1), InProgress()), (lenient((rejected_note("round_in_progress", round=1),), round=None), None)],
        Raise(
            RoundInProgressError("still being answered by another copy"),
            (rejected_note("round_in_progress", round=1),),
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
            (asked_record((asked_note(),), ask_outcome(ROUND1), flow=None, round=None), Failed(DOWN)),
        ],
        Raise(DOWN, (asked_note(),)),
    ),
    "a result that cannot be recorded gives the round up, keeping its effects, and fails": Case(
        answering(ROUND1),
        [
            WON,
            (RunHandler(ROUND1, RESPONSES, NOW, {}), Ran(Returned("Deleted.", "f1", 1, ()), new_effects=(("d", 1),))),
            (ToolResult("Deleted."), DONE),
            (Record("f1", 1, NOW, (completed_note(),), new_effects=(("d", 1),), result=DONE_WIRE), Failed(DOWN)),
            (Record("f1", 1, NOW, (completed_note(),), new_effects=(("d", 1),), result=DONE_WIRE), Failed(DOWN)),
            (lenient((unrecorded_note(),), new_effects=(("d", 1),)), None),
        ],
        Raise(DOWN, (unrecorded_note(),)),
    ),
    "a result whose first record fails is recorded by the second, and answered": Case(
        answering(ROUND1),
        [
            WON,
            (RunHandler(ROUND1, RESPONSES, NOW, {}), Ran(Returned("Deleted.", "f1", 1, ()), new_effects=(("d", 1),))),
            (ToolResult("Deleted."), DONE),
            (Record("f1", 1, NOW, (completed_note(),), new_effects=(("d", 1),), result=DONE_WIRE), Failed(DOWN)),
            (
                Record("f1", 1, NOW, (completed_note(),), new_effects=(("d", 1),), result=DONE_WIRE),
                Stored(DONE_WIRE, first=True),
            ),
        ],
        Reply(DONE, (completed_note(),)),
    ),
    "a state that is not askback's is refused": Case(
        RoundRequest(sealed=True, state=None, responses=None, now=NOW),
        [(lenient((rejected_note("invalid_state", flow=None, detail=NOT_OURS),), flow=None, round=None), None)],
        Raise(InvalidStateError(), (rejected_note("invalid_state", flow=None, detail=NOT_OURS),)),
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
            *ends(
                ToolResult("Deleted."),
                (asked_note(), answered_note(at=NOW + 5), completed_note(at=NOW + 5)),
                round=None,
                at=NOW + 5,
                effects=(("delete", True),),
                round_outcome=ask_outcome(ROUND1),
            ),
        ],
        Reply(DONE, (asked_note(), answered_note(at=NOW + 5), completed_note(at=NOW + 5))),
    ),
    "a 2025-11-25 question that cannot be pushed for the caps ends the flow": Case(
        first(pushed=True),
        [
            (RunHandler(None, None, NOW, None), Ran(asked(ROUND1))),
            (Push(CONFIRM, ROUND1, T0 + 600), NotPushed("too_many_pending", NOW + 1)),
            *ends(
                EndResult(too_many_pending(ROUND1, LIMITS).text),
                (asked_note(), completed_note("too_many_pending", at=NOW + 1)),
                round=None,
                at=NOW + 1,
                round_outcome=ask_outcome(ROUND1),
            ),
        ],
        Reply(DONE, (asked_note(), completed_note("too_many_pending", at=NOW + 1))),
    ),
    "2025-11-25 answers that come after the deadline end the flow as expired": Case(
        first(pushed=True),
        [
            (RunHandler(None, None, NOW, None), Ran(asked(ROUND1))),
            (Push(CONFIRM, ROUND1, T0 + 600), Pushed(RESPONSES, LATE)),
            *ends(
                EndResult(EXPIRED.text),
                (asked_note(), completed_note("expired", at=LATE)),
                round=None,
                at=LATE,
                round_outcome=ask_outcome(ROUND1),
            ),
        ],
        Reply(DONE, (asked_note(), completed_note("expired", at=LATE))),
    ),
    "a task's run is one run of its handler with no claim, past the deadline, and hands back its next state": Case(
        RoundRequest(sealed=True, state=ROUND1, responses=RESPONSES, now=LATE, task=True),
        [
            (RunHandler(ROUND1, RESPONSES, LATE, None), Ran(asked(ROUND2, ENV, events=[ANSWERED]))),
            (
                Record(
                    "f1",
                    None,
                    LATE,
                    (answered_note(at=LATE), asked_note(2, ("env",), at=LATE)),
                    round_outcome=ask_outcome(ROUND2, ENV),
                ),
                None,
            ),
        ],
        Reply(
            InputRequiredResult.model_validate(ask_outcome(ROUND2, ENV)),
            (answered_note(at=LATE), asked_note(2, ("env",), at=LATE)),
            ROUND2,
        ),
        policy=HOLDING,
    ),
    "a task's answer that does not validate is noted rejected and asked again, as in an MRTR round": Case(
        RoundRequest(sealed=True, state=ROUND1, responses=RESPONSES, now=NOW, task=True),
        [
            (RunHandler(ROUND1, RESPONSES, NOW, None), Ran(asked(ROUND2, events=[INVALID]))),
            (Record("f1", None, NOW, (INVALID_NOTE, asked_note(2)), round_outcome=ask_outcome(ROUND2)), None),
        ],
        Reply(InputRequiredResult.model_validate(ask_outcome(ROUND2)), (INVALID_NOTE, asked_note(2)), ROUND2),
    ),
    "a task whose handler crashes fails as the MRTR round does, noted as a tool error": Case(
        RoundRequest(sealed=True, state=ROUND1, responses=None, now=NOW, task=True),
        [
            (RunHandler(ROUND1, None, NOW, None), Ran(None, error=CRASH, detail="the tool raised RuntimeError")),
            (lenient((rejected_note("tool_error", detail="the tool raised RuntimeError"),), round=None), None),
        ],
        Raise(CRASH, (rejected_note("tool_error", detail="the tool raised RuntimeError"),)),
    ),
}


def _same_outcome(got: RoundEnd, expected: RoundEnd) -> None:
    assert type(got) is type(expected)
    assert got.notes == expected.notes
    if isinstance(expected, Reply):
        assert isinstance(got, Reply)
        assert got.result == expected.result
        if expected.next_state is not None:
            assert got.next_state == expected.next_state
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
