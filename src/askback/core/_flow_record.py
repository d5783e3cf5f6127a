"""What one run of a handler leaves behind for the round, kept apart from the `Flow` the handler sees.

A `Flow` is the handler's surface (ask, link, connect, once); the bookkeeping behind it (the answers recorded so far,
the questions scheduled for this round and the digests they will be matched against next round, the audit events)
lives in one `RunRecord`, which only the core and the round driver read.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from askback.core.questions import Question, digest
from askback.core.state import FlowState, RecordedAnswer
from askback.errors import DefinitionError

__all__ = ["FlowEnded", "FlowEvent", "NeedInput", "RunRecord"]


# `NeedInput` and `FlowEnded` derive from `BaseException` so that a handler's own `except Exception` cannot swallow
# them by accident.


class NeedInput(BaseException):
    """The run stops here: these questions go to the user."""


class FlowEnded(BaseException):
    """The user declined or cancelled (or the flow ran out of time or rounds): complete with this text."""

    def __init__(self, text: str, reason: str, *, structured: Mapping[str, Any] | None = None) -> None:
        super().__init__(text)
        self.text = text
        self.reason = reason
        # What the call answers as structured content beside the text (a status an agent reads), if anything.
        self.structured = structured


@dataclass(frozen=True)
class FlowEvent:
    """Something the audit trail should know about this run."""

    kind: Literal["answered", "invalid", "fallback", "ignored"]
    key: str
    mode: str
    action: str | None = None
    content: Mapping[str, Any] | None = None
    detail: str | None = None


@dataclass(eq=False)
class RunRecord:
    """The bookkeeping of one run: filled in while the handler runs, read once when it stops."""

    state: FlowState | None
    responses: Mapping[str, Any]
    now: float
    new_id: Callable[[], str] | None
    recorded: dict[str, RecordedAnswer] = field(default_factory=dict)
    pending: dict[str, dict[str, Any]] = field(default_factory=dict)
    pending_modes: dict[str, str] = field(default_factory=dict)
    pending_digest: dict[str, str] = field(default_factory=dict)
    events: list[FlowEvent] = field(default_factory=list)
    # Every question the handler reached this run, as shown: re-asked when unsealed answers cannot be trusted.
    seen: dict[str, tuple[dict[str, Any], str]] = field(default_factory=dict)
    unsealed_answers: bool = False
    minted: str | None = None

    def schedule(self, question: Question[Any], params: dict[str, Any], *, base: str | None = None) -> None:
        """Ask `params` this round. `base` is the digest of the question without any note added to its message
        (a re-ask says what was wrong), which is what the answer is matched against next round."""
        if question.key in self.pending and self.pending[question.key] != params:
            raise DefinitionError(f"two different questions use the key {question.key!r} in one round")
        self.pending[question.key] = params
        self.pending_modes[question.key] = question.mode
        self.pending_digest[question.key] = base or digest(params)

    def link_flow_id(self) -> str:
        """The id of this flow, minted now when the flow has not asked before (the next state carries it)."""
        if self.state is not None:
            return self.state.flow_id
        if self.minted is None:
            if self.new_id is None:
                raise DefinitionError(
                    "flow.connect or flow.approve outside a server round: the flow has no id to bind a link to"
                )
            self.minted = self.new_id()
        return self.minted

    def next_state(self, *, new_id: Callable[[], str]) -> FlowState:
        """The state to seal into the `input_required` result that carries `self.pending` (a new flow's id comes
        from `new_id`)."""
        base = self.state
        return FlowState(
            flow_id=base.flow_id if base else (self.minted or new_id()),
            started=base.started if base else self.now,
            round=(base.round if base else 0) + 1,
            answers=dict(self.recorded),
            asked=dict(self.pending_digest),
        )

    def input_requests(self) -> dict[str, dict[str, Any]]:
        return {key: {"method": "elicitation/create", "params": params} for key, params in self.pending.items()}
