"""The values a resume's plan (`askback.runtime.resume_plan`) is given, yields and is sent: frozen data, no I/O.

The plan is given a `Snapshot` (the call as the store keeps it, its round's answers, the clock) and `Limits`. It
yields steps and is sent each one's result:

    Claim                                   -> the claim's token, or None (another process holds it)
    SendRound / UpdateTask / CancelTask /   -> Answered, or Refused (the server's JSON-RPC error), or Failed
      Poll                                     (the request did not get an answer: timeout, HTTP error, ...)
    ParkAgain / Complete / Fail             -> whether the claim still held (False: another process took it over)
    Release                                 -> None
    Reload                                  -> a new Snapshot
    AskedKeys                               -> every input key the call's rounds have asked
    Wait                                    -> None, once the clock has reached `until`
    Log                                     -> None

and ends with the call's `Outcome` (`Completed`, `Parked`, `Claimed`) or `Raise` (the error to raise).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from askback.runtime.call_record import CallRecord
from askback.runtime.questions import Answer

__all__ = [
    "Answered",
    "AskedKeys",
    "CancelTask",
    "Claim",
    "Complete",
    "Fail",
    "Failed",
    "Limits",
    "Log",
    "ParkAgain",
    "Poll",
    "Raise",
    "Refused",
    "Release",
    "Reload",
    "Request",
    "SendRound",
    "Settle",
    "Snapshot",
    "Step",
    "UpdateTask",
    "Wait",
]

# --- what the plan is given ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Snapshot:
    """The call as the store keeps it, the answers recorded for its current round, and the clock when they were
    read."""

    call: CallRecord
    answers: Mapping[str, Answer]
    now: float


@dataclass(frozen=True)
class Limits:
    """`max_rounds`: the most rounds a call may take (`ASKBACK_CALL_MAX_ROUNDS`); `answer_wait`: how long people
    get to answer a round (`ASKBACK_ANSWER_WAIT`); `cancel_wait`: how long a task asked to cancel gets to end
    (`ASKBACK_CALL_CANCEL_WAIT`); `lease`: how long a claim holds before another process may take it over
    (`ASKBACK_RESUME_LEASE`)."""

    max_rounds: int
    answer_wait: float
    cancel_wait: float
    lease: float


# --- the steps -------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Claim:
    """Become the one process that moves the call on from `round`."""

    call_id: str
    round: int
    now: float
    lease: float


@dataclass(frozen=True)
class SendRound:
    """Send the call's `round` (2026-07-28 MRTR: the parked round's retry) with these `inputResponses` and the
    server's `requestState`, echoed as it was sent."""

    call_id: str
    round: int
    responses: Mapping[str, Any]
    state: str | None


@dataclass(frozen=True)
class UpdateTask:
    """`tasks/update`: send a task's round of answers. `round` is the call's round they move it to."""

    call_id: str
    round: int
    task_id: str
    responses: Mapping[str, Any]


@dataclass(frozen=True)
class CancelTask:
    """`tasks/cancel`: ask the server to cancel the call's task (its deadline passed)."""

    call_id: str
    round: int
    task_id: str


@dataclass(frozen=True)
class Poll:
    """`tasks/get`: read the call's task."""

    call_id: str
    round: int
    task_id: str


Request = SendRound | UpdateTask | CancelTask | Poll
"""A step that goes to the server."""


@dataclass(frozen=True)
class ParkAgain:
    """Settle a claimed resume of `round`, sent with `sent`: the call parks on the next round, `pending` (the
    server's `InputRequiredResult`), until `deadline`; `task`: the (id, poll interval) of a task the server made of
    the call on this round."""

    call_id: str
    claim: str
    round: int
    sent: Mapping[str, Any]
    now: float
    pending: Mapping[str, Any]
    deadline: float | None
    task: tuple[str, float] | None = None


@dataclass(frozen=True)
class Complete:
    """Settle a claimed resume of `round`, sent with `sent`: the call completes with `result`."""

    call_id: str
    claim: str
    round: int
    sent: Mapping[str, Any]
    now: float
    result: Mapping[str, Any]


@dataclass(frozen=True)
class Fail:
    """Settle a claimed resume of `round`, sent with `sent`: the call fails with `error`."""

    call_id: str
    claim: str
    round: int
    sent: Mapping[str, Any]
    now: float
    error: str


Settle = ParkAgain | Complete | Fail
"""A step that ends a claimed resume, in one transaction, with what the round came to."""


@dataclass(frozen=True)
class Release:
    """Give the claim back: the round was not sent (or not taken), and the call is parked as it was."""

    call_id: str
    claim: str


@dataclass(frozen=True)
class Reload:
    """Read the call again (another process may have moved it on), with its round's answers and the clock."""

    call_id: str


@dataclass(frozen=True)
class AskedKeys:
    """Every input key any round of the call asked (a task never reuses one)."""

    call_id: str


@dataclass(frozen=True)
class Wait:
    """Wait until the clock reads `until` (the next poll of a task)."""

    until: float


@dataclass(frozen=True)
class Log:
    """Log `message` (INFO, `askback.runtime`): what the plan did that the call's records do not show."""

    message: str


Step = Claim | Request | Settle | Release | Reload | AskedKeys | Wait | Log

# --- what a request comes back as ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Answered:
    """The server's result as JSON, and the clock when it came."""

    result: Mapping[str, Any]
    at: float


@dataclass(frozen=True)
class Refused:
    """The server answered with a JSON-RPC error (not a timeout)."""

    code: int
    message: str
    data: Any = None


@dataclass(frozen=True)
class Failed:
    """The request got no answer the plan can read: `error` says why and what became of the call, as the wire
    words it (a timeout, an HTTP error, a result that cannot be read, a server out of reach, the process stopped)."""

    error: BaseException


# --- how the plan ends -------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Raise:
    """The resume ends with `error` (what became of the call is in the store already)."""

    error: BaseException
