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

__all__ = ["FlowState", "Recorded"]

_STATE_PREFIX = "askback/1:"


@dataclass(frozen=True)
class Recorded:
    action: Literal["accept", "decline", "cancel"]
    content: Mapping[str, Any] | None
    q: str


@dataclass(frozen=True)
class FlowState:
    """What one flow carries from round to round. Sealed by the SDK; never holds a secret (form answers cannot)."""

    flow_id: str
    started: float
    round: int = 0
    answers: Mapping[str, Recorded] = field(default_factory=dict)
    asked: Mapping[str, str] = field(default_factory=dict)
    held: bool = False

    def encode(self) -> str:
        body: dict[str, object] = {
            "f": self.flow_id,
            "t": self.started,
            "r": self.round,
            "a": {k: {"a": v.action, "c": v.content, "q": v.q} for k, v in self.answers.items()},
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
                answers={k: Recorded(v["a"], v["c"], v["q"]) for k, v in body["a"].items()},
                asked={str(k): str(v) for k, v in body["q"].items()},
                held=bool(body.get("h", 0)),
            )
        except (ValueError, KeyError, TypeError, AttributeError):
            return None
