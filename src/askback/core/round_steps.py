"""The values a round's plan (`askback.core.round_plan`) is given, yields and returns: its request and policy,
each step and the results it is sent, and the round's outcome. Frozen data, no I/O."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, Protocol

from mcp_types import CallToolResult, InputRequiredResult

from askback.core import round as decision
from askback.core.flow import FlowEvent, RunOutcome
from askback.core.state import FlowState, RecordedAnswer

__all__ = [
    "Claim",
    "EndResult",
    "Failed",
    "Hold",
    "InProgress",
    "KnownEffect",
    "NotPushed",
    "Note",
    "Policy",
    "Push",
    "Pushed",
    "Raise",
    "Ran",
    "ReadHeld",
    "Record",
    "Reply",
    "RoundEnd",
    "RoundRequest",
    "RunHandler",
    "Step",
    "Stored",
    "ToolResult",
    "Won",
]

# --- what the plan is given ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class RoundRequest:
    """What one request brings: whether it carried a `requestState` the SDK verified (`sealed`), askback's state in
    it (`None` when there was none or it was not askback's), its `inputResponses`, the clock reading when it came,
    and whether its session takes questions pushed (2025-11-25) rather than in an `input_required` result.

    `task`: one run of a task's handler. Its state and answers come from the task's row, not a sealed state: the
    task's lease stands for the round's claim, its flow deadline was checked when its answers came, its answers are
    never held, and the driver keeps what the run ends with in the row (`Reply.next_state`, the result)."""

    sealed: bool
    state: FlowState | None
    responses: Mapping[str, Any] | None
    now: float
    pushed: bool = False
    task: bool = False


@dataclass(frozen=True)
class Policy:
    """The settings every round of an app is decided under."""

    limits: decision.Limits
    hold_answers: bool = False
    # Held answers outlive the flow deadline by this much, as the sealed state does.
    state_grace: float = 0.0


class KnownEffect(Protocol):
    """An effect as the ledger held it when the round was claimed ('done' with its outcome, or 'running')."""

    @property
    def status(self) -> str: ...
    @property
    def outcome(self) -> Any: ...


class Stored(Protocol):
    """What recording a flow's result found: the result recorded first, and whether it was this round's."""

    @property
    def result(self) -> Any: ...
    @property
    def first(self) -> bool: ...


# --- steps and their results -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Claim:
    """Become the one copy of round `round` of flow `flow_id` that runs the handler (a round can arrive several times
    at once, on several instances), waiting a bounded time for a copy that holds it. Answered with `Won`, the
    `Recorded` outcome of the flow or of that copy, or `InProgress` when the wait ran out."""

    flow_id: str
    round: int
    kind: Literal["claim"] = "claim"


@dataclass(frozen=True)
class Won:
    """This copy holds the round; `effects` are the flow's effects as the ledger held them then."""

    effects: Mapping[str, KnownEffect]


@dataclass(frozen=True)
class InProgress:
    """Another copy still holds the round after the wait."""


@dataclass(frozen=True)
class ReadHeld:
    """Read and open the answers held on the server for this round: answered with them, or `None` (expired, gone,
    or no longer opening)."""

    flow_id: str
    round: int
    kind: Literal["read_held"] = "read_held"


@dataclass(frozen=True)
class RunHandler:
    """Run the handler once, from the top, with `state` and `responses` at `now`. Under this round's claim
    (`known_effects` not None) an effect the ledger has not seen runs with no claim of its own (`effect_route`);
    `ran` are the effects earlier runs of this call ran that way."""

    state: FlowState | None
    responses: Mapping[str, Any] | None
    now: float
    known_effects: Mapping[str, KnownEffect] | None
    ran: tuple[tuple[str, Any], ...] = ()
    kind: Literal["run_handler"] = "run_handler"


@dataclass(frozen=True)
class Ran:
    """How a run went: its outcome (with the flow's events), or the exception the handler raised (`error`, with the
    audit `detail` the driver gave it, `unavailable` when it is the database being unreachable from the tool's own
    queries, and `events`, the flow's events until then). `effects` are the outcomes of effects it won through their
    own claim, `new_effects` those it ran under the round's claim; all are recorded with the round's end."""

    outcome: RunOutcome | None
    events: tuple[FlowEvent, ...] = ()
    effects: tuple[tuple[str, Any], ...] = ()
    new_effects: tuple[tuple[str, Any], ...] = ()
    error: BaseException | None = None
    detail: str = ""
    unavailable: bool = False


@dataclass(frozen=True)
class Push:
    """A 2025-11-25 session: push `requests` one by one on the session and wait for the answers, until `deadline`."""

    requests: Mapping[str, dict[str, Any]]
    state: FlowState
    deadline: float
    kind: Literal["push"] = "push"


@dataclass(frozen=True)
class Pushed:
    """Every pushed question was answered; `now` is when the answers were in."""

    responses: Mapping[str, Any]
    now: float


@dataclass(frozen=True)
class NotPushed:
    """The questions could not all be answered: the deadline came first, or a cap on waiting questions was reached."""

    why: Literal["expired", "too_many_pending"]
    now: float


@dataclass(frozen=True)
class ToolResult:
    """The handler's `value` as the SDK puts it on the wire (structured output included)."""

    value: Any
    kind: Literal["tool_result"] = "tool_result"


@dataclass(frozen=True)
class EndResult:
    """`text` as the call's result, for a flow that ends without the handler's value (`structured`: its structured
    content too, when the flow says more)."""

    text: str
    structured: Mapping[str, Any] | None = None
    kind: Literal["end_result"] = "end_result"


@dataclass(frozen=True)
class Note:
    """One audit event of this round; the driver adds the tool, the principal and the instance."""

    event: Literal["asked", "answered", "completed", "replayed", "rejected"]
    at: float
    flow_id: str | None
    round: int | None = None
    keys: tuple[str, ...] = ()
    mode: str | None = None
    action: str | None = None
    content: dict[str, Any] | None = None
    outcome: str | None = None
    detail: str | None = None


@dataclass(frozen=True)
class Hold:
    """Answers to keep on the server for round `round` of flow `flow_id` until `until` (sealed by the driver)."""

    flow_id: str
    round: int
    answers: Mapping[str, RecordedAnswer]
    until: float


@dataclass(frozen=True)
class Record:
    """The end of the round in one transaction: the effects' outcomes, the flow's `result` (wire JSON; answered with
    what was recorded first), the end of the claimed round (`round`: done with the result or `round_outcome`,
    released when it has neither), the answers to hold, and the audit events. `strict`: a failure is the round's
    failure (answered with `Failed`); otherwise the driver logs it and answers `None`, the round failing anyway."""

    flow_id: str | None
    round: int | None
    at: float
    notes: tuple[Note, ...]
    effects: tuple[tuple[str, Any], ...] = ()
    new_effects: tuple[tuple[str, Any], ...] = ()
    result: Mapping[str, Any] | None = None
    round_outcome: Mapping[str, Any] | None = None
    hold: Hold | None = None
    strict: bool = True
    kind: Literal["record"] = "record"


@dataclass(frozen=True)
class Failed:
    """The step's I/O raised `error`; `detail` is what the audit says when it is not askback's own error."""

    error: BaseException
    detail: str = ""


Step = Claim | ReadHeld | RunHandler | Push | ToolResult | EndResult | Record


# --- what the round comes to -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Reply:
    """Answer `result`; `notes` go to the log and the trace. `next_state`: when `result` asks, the flow state its
    questions were asked under (sealed into its `requestState`), for a driver that keeps it itself (a task)."""

    result: CallToolResult | InputRequiredResult
    notes: tuple[Note, ...]
    next_state: FlowState | None = None
    kind: Literal["reply"] = "reply"


@dataclass(frozen=True)
class Raise:
    """Fail the call with `error`; `notes` go to the log and the trace."""

    error: BaseException
    notes: tuple[Note, ...]
    kind: Literal["raise"] = "raise"


RoundEnd = Reply | Raise
"""How a round ends: reply to the client (a result, or the next questions), or fail the call. (Not `askback.Outcome`,
which is how a person answered.)"""


_RENAMED = {"Outcome": "RoundEnd"}

if not TYPE_CHECKING:  # old names are for code not yet moved to the new ones, never for askback's own

    def __getattr__(name: str) -> Any:
        from askback._face import renamed

        return renamed(__name__, _RENAMED, name, globals())
