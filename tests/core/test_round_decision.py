"""The round's policy, decided from plain data: no SDK server, no database, no clock but a number."""

from __future__ import annotations

from typing import Any

import pytest

from askback.core.flow import Asked, Ended, FlowEvent, Refused, Returned, RunOutcome
from askback.core.round import (
    Ask,
    Complete,
    End,
    Limits,
    Recorded,
    Refuse,
    Replay,
    Run,
    admit,
    decide,
    expired,
    too_many_pending,
)
from askback.core.state import FlowState
from askback.errors import ArgumentRequiredError, InvalidStateError, MissingCapabilityError

LIMITS = Limits(flow_deadline=600, max_rounds=3, max_pending_pushes=100, max_pending_pushes_per_session=4)
STARTED = 1_000.0
STATE = FlowState(flow_id="f1", started=STARTED, round=1)
DONE = Recorded({"content": [{"type": "text", "text": "Deleted."}]}, completed=True)
ASKED_AGAIN = Recorded({"inputRequests": {}, "requestState": "s"}, completed=False)
EVENT = FlowEvent("answered", "confirm", "form", action="accept")
REQUESTS = {"confirm": {"method": "elicitation/create", "params": {"message": "Sure?"}}}
NEXT = FlowState(flow_id="f1", started=STARTED, round=2)


@pytest.mark.parametrize(
    ("sealed", "state", "recorded", "now", "expected"),
    [
        pytest.param(False, None, None, STARTED, Run(), id="a first call runs the handler"),
        pytest.param(True, STATE, None, STARTED + 10, Run(), id="an answer in time runs the handler"),
        pytest.param(True, STATE, None, STARTED + 600, Run(), id="an answer at the deadline itself is in time"),
        pytest.param(True, STATE, DONE, STARTED + 10, Replay(DONE, 1), id="a finished flow replays its result"),
        pytest.param(
            True, STATE, ASKED_AGAIN, STARTED + 10, Replay(ASKED_AGAIN, 1), id="an answered round replays what it asked"
        ),
        pytest.param(
            True, STATE, DONE, STARTED + 10_000, Replay(DONE, 1), id="a finished flow replays even after the deadline"
        ),
        pytest.param(
            True, STATE, None, STARTED + 600.5, expired(STATE, LIMITS), id="an answer after the deadline ends"
        ),
    ],
)
def test_admit(sealed: bool, state: FlowState | None, recorded: Recorded | None, now: float, expected: Any) -> None:
    assert admit(sealed=sealed, state=state, recorded=recorded, now=now, limits=LIMITS) == expected


def test_a_sealed_state_that_is_not_askbacks_is_refused_as_an_invalid_state() -> None:
    decision = admit(sealed=True, state=None, recorded=None, now=STARTED, limits=LIMITS)
    assert isinstance(decision, Refuse)
    assert (decision.outcome, decision.detail) == ("invalid_state", "requestState not minted by askback")
    assert isinstance(decision.error, InvalidStateError) and decision.error.code == -32602


def test_too_late_ends_the_flow_saying_how_long_it_waited() -> None:
    end = expired(STATE, LIMITS)
    assert (end.reason, end.flow_id, end.round) == ("expired", "f1", 1)
    assert end.text.startswith("Expired: this request waited more than 10 minutes for an answer")


def test_a_full_push_queue_ends_the_flow_naming_both_caps() -> None:
    end = too_many_pending(STATE, LIMITS)
    assert (end.reason, end.flow_id, end.round) == ("too_many_pending", "f1", 1)
    assert "at most 4 per session and 100 per server process" in end.text


def asked(round_: int, flow_id: str | None = "f1") -> Asked:
    return Asked(REQUESTS, ("form",), NEXT, flow_id, round_, (EVENT,))


CAPABILITY = MissingCapabilityError({"elicitation": {"url": {}}})
ARGUMENT = ArgumentRequiredError("pass the argument 'environment'")


@pytest.mark.parametrize(
    ("outcome", "expected"),
    [
        pytest.param(asked(0, None), Ask(REQUESTS, NEXT, ("form",)), id="a first question is asked"),
        pytest.param(asked(2), Ask(REQUESTS, NEXT, ("form",)), id="a question under the round cap is asked"),
        pytest.param(
            Returned({"ok": 1}, "f1", 2, (EVENT,)), Complete({"ok": 1}, "f1", 2, audit=True), id="a flow completes"
        ),
        pytest.param(
            Returned("x", None, 0, ()),
            Complete("x", None, 0, audit=False),
            id="a call that asked nothing is not audited",
        ),
        pytest.param(
            Returned("x", None, 0, (EVENT,)), Complete("x", None, 0, audit=True), id="a call that fell back is audited"
        ),
        pytest.param(
            Ended("Cancelled: you declined.", "declined", "f1", 1, ()),
            End("Cancelled: you declined.", "declined", "f1", 1),
            id="a decline ends the flow",
        ),
        pytest.param(
            Ended("Cancelled.", "cancelled", None, 0, ()),
            End("Cancelled.", "cancelled", None, 0),
            id="a cancel outside a flow ends the call",
        ),
        pytest.param(
            Refused(CAPABILITY, None, 0, ()),
            Refuse(CAPABILITY, "missing_capability", str(CAPABILITY)),
            id="a question the client cannot show is refused",
        ),
        pytest.param(
            Refused(ARGUMENT, None, 0, ()),
            Refuse(ARGUMENT, "missing_capability_fallback", str(ARGUMENT)),
            id="a fallback to a tool argument is refused as a tool error",
        ),
    ],
)
def test_decide(outcome: RunOutcome, expected: Any) -> None:
    assert decide(outcome, limits=LIMITS) == expected


@pytest.mark.parametrize("round_", [3, 4])
def test_a_flow_still_asking_at_the_round_cap_ends_saying_so(round_: int) -> None:
    decision = decide(asked(round_), limits=LIMITS)
    assert isinstance(decision, End)
    assert (decision.reason, decision.flow_id, decision.round) == ("too_many_rounds", "f1", round_)
    assert decision.text.startswith(f"Stopped: this request asked {round_} rounds of questions")


def test_a_tool_argument_fallback_is_a_tool_error_and_a_missing_capability_a_protocol_error() -> None:
    assert ARGUMENT.tool_error and not CAPABILITY.tool_error
    assert CAPABILITY.code == -32021 and CAPABILITY.http_status == 400
