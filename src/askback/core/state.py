"""The state a flow carries from round to round, sealed by the SDK into `requestState`.

Answers given in earlier rounds travel here, so a chain of questions can land on a different instance every round.
Each answer is kept beside a digest of the exact question the user was shown. With answers held on the server
(`ASKBACK_ANSWERS=server`) the state carries no answers, only `held`: the server keeps them under the flow's id and
round, and puts them back in the state when the next round arrives.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

__all__ = ["FlowState", "RecordedAnswer", "answers_from_json", "answers_to_json"]

_STATE_PREFIX = "askback/1:"


@dataclass(frozen=True)
class RecordedAnswer:
    action: Literal["accept", "decline", "cancel"]
    content: Mapping[str, Any] | None
    q: str


def answers_to_json(answers: Mapping[str, RecordedAnswer]) -> dict[str, dict[str, Any]]:
    """Recorded answers as plain JSON values: the one encoding of the sealed state and of answers held on the
    server (`askback.server.held`)."""
    return {k: {"a": v.action, "c": v.content, "q": v.q} for k, v in answers.items()}


def answers_from_json(body: Mapping[str, Any]) -> dict[str, RecordedAnswer]:
    """The answers `answers_to_json` wrote (a malformed body raises KeyError, TypeError or AttributeError)."""
    return {k: RecordedAnswer(v["a"], v["c"], v["q"]) for k, v in body.items()}


@dataclass(frozen=True)
class FlowState:
    """What one flow carries from round to round. Sealed by the SDK; never holds a secret (form answers cannot)."""

    flow_id: str
    started: float
    round: int = 0
    answers: Mapping[str, RecordedAnswer] = field(default_factory=dict)
    asked: Mapping[str, str] = field(default_factory=dict)
    held: bool = False

    def encode(self) -> str:
        body: dict[str, object] = {
            "f": self.flow_id,
            "t": self.started,
            "r": self.round,
            "a": answers_to_json(self.answers),
            "q": dict(self.asked),
        }
        if self.held:
            body["h"] = 1
        return _STATE_PREFIX + json.dumps(body, separators=(",", ":"), sort_keys=True)

    @classmethod
    def decode(cls, text: str) -> FlowState | None:
        """The state, or `None` when the text is not askback's."""
        if not text.startswith(_STATE_PREFIX):
            return None
        try:
            body = json.loads(text[len(_STATE_PREFIX) :])
            return cls(
                flow_id=str(body["f"]),
                started=float(body["t"]),
                round=int(body["r"]),
                answers=answers_from_json(body["a"]),
                asked={str(k): str(v) for k, v in body["q"].items()},
                held=bool(body.get("h", 0)),
            )
        except (ValueError, KeyError, TypeError, AttributeError):
            return None
