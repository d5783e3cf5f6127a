"""How a round ends, decided from plain data: the round's policy, with no I/O.

A round is decided twice. `admit` runs before the handler: given whether the request carried a sealed state, the
state it held, what the store recorded for this round (a finished flow, or what another copy of the round
answered), the clock reading and the limits, it says run the handler, replay a recorded outcome, end the flow
(too late) or refuse the request. `decide` runs after the handler: given how the run ended (`RunOutcome`), it says
ask the questions, complete with the handler's value, end with a message (declined, cancelled, too many rounds),
or refuse. The server carries the decision out: it writes, audits and answers; it decides nothing itself.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from askback.core.flow import Asked, Ended, Refused, Returned, RunOutcome
from askback.core.state import FlowState
from askback.errors import AskbackError, InvalidStateError

__all__ = [
    "Admission",
    "Ask",
    "Complete",
    "Decision",
    "End",
    "Limits",
    "Recorded",
    "Refuse",
    "Replay",
    "Run",
    "admit",
    "decide",
    "expired",
    "too_many_pending",
]


@dataclass(frozen=True)
class Limits:
    """The settings a round is decided under."""

    flow_deadline: float
    max_rounds: int
    max_pending_pushes: int = 1000
    max_pending_pushes_per_session: int = 8


@dataclass(frozen=True)
class Recorded:
    """What the store holds for the round a request answers: the flow's result when the flow completed
    (`completed`), or what another copy of this round answered when it asked again."""

    outcome: Mapping[str, Any]
    completed: bool


# --- decisions ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Run:
    """Run the handler."""

    kind: Literal["run"] = "run"


@dataclass(frozen=True)
class Replay:
    """Answer what the store recorded, byte for byte, without running the handler."""

    recorded: Recorded
    round: int
    kind: Literal["replay"] = "replay"


@dataclass(frozen=True)
class Ask:
    """Send `requests` (the `inputRequests` of an `input_required` result: each an `elicitation/create` request),
    sealed with `state`."""

    requests: Mapping[str, dict[str, Any]]
    state: FlowState
    modes: tuple[str, ...]
    kind: Literal["ask"] = "ask"


@dataclass(frozen=True)
class Complete:
    """Complete the call with the handler's `value`. `audit` says whether a call outside any flow (`flow_id` None)
    leaves a `completed` event (it does when it answered or fell back on something)."""

    value: Any
    flow_id: str | None
    round: int
    audit: bool
    kind: Literal["complete"] = "complete"


@dataclass(frozen=True)
class End:
    """Complete the call with `text` (the flow ends without the handler's value); `reason` goes to the audit;
    `structured`, when there is some, is the call's structured content too."""

    text: str
    reason: str
    flow_id: str | None
    round: int
    structured: Mapping[str, Any] | None = None
    kind: Literal["end"] = "end"


@dataclass(frozen=True)
class Refuse:
    """Refuse the request with `error`; the audit records `outcome` and the error's message."""

    error: AskbackError
    outcome: str
    detail: str
    round: int | None = None
    kind: Literal["refuse"] = "refuse"


Admission = Run | Replay | End | Refuse
Decision = Ask | Complete | End | Refuse


def admit(*, sealed: bool, state: FlowState | None, recorded: Recorded | None, now: float, limits: Limits) -> Admission:
    """Before the handler runs. `sealed`: the request carried a `requestState` the SDK verified; `state`: askback's
    flow state in it (`None` when there was none, or it was not askback's); `recorded`: what the store holds for
    the round it answers."""
    if sealed and state is None:
        return Refuse(InvalidStateError(), "invalid_state", "requestState not minted by askback")
    if state is None:
        return Run()
    if recorded is not None:
        return Replay(recorded, state.round)
    if now > state.started + limits.flow_deadline:
        return expired(state, limits)
    return Run()


def decide(outcome: RunOutcome, *, limits: Limits) -> Decision:
    """After the handler ran once."""
    if isinstance(outcome, Asked):
        if outcome.round >= limits.max_rounds:
            text = (
                f"Stopped: this request asked {outcome.round} rounds of questions without getting what it needs, "
                "so nothing was done. Call the tool again to start over."
            )
            return End(text, "too_many_rounds", outcome.flow_id, outcome.round)
        return Ask(outcome.requests, outcome.next_state, outcome.modes)
    if isinstance(outcome, Ended):
        return End(outcome.text, outcome.reason, outcome.flow_id, outcome.round, outcome.structured)
    if isinstance(outcome, Refused):
        error = outcome.error
        reason = "missing_capability_fallback" if error.tool_error else "missing_capability"
        return Refuse(error, reason, str(error))
    assert isinstance(outcome, Returned)
    return Complete(outcome.value, outcome.flow_id, outcome.round, audit=bool(outcome.events))


def expired(state: FlowState, limits: Limits) -> End:
    """The flow's deadline passed before its answers came."""
    minutes = limits.flow_deadline / 60
    text = (
        f"Expired: this request waited more than {minutes:g} minutes for an answer, so nothing was done. "
        "Call the tool again to start over."
    )
    return End(text, "expired", state.flow_id, state.round)


def too_many_pending(state: FlowState, limits: Limits) -> End:
    """A 2025-11-25 question could not be pushed: too many are already waiting."""
    text = (
        "Not asked: too many questions are already waiting for an answer (at most "
        f"{limits.max_pending_pushes_per_session} per session and {limits.max_pending_pushes} per server "
        "process), so nothing was done. Answer the questions already shown, then call the tool again."
    )
    return End(text, "too_many_pending", state.flow_id, state.round)
