"""What a parked round asks and what a person answers, as plain values (no I/O).

A server's `InputRequiredResult` is read once into `Question`s, each named by (call, round, input key): never by
position, so two parallel calls that ask under the same key can never swap answers. An `Answer` is the person's
accept (with content), decline or cancel. `resume_decision` says, from the answers recorded so far and the clock,
whether a round can be sent back: every question answered, or the deadline passed (each unanswered question is
then answered `cancel`).

URL-mode questions are only ever shown: `safe_link` accepts https (plain http only on loopback, in development
mode) and gives the host to show next to the link; the runtime never opens or fetches one.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal
from urllib.parse import urlsplit

from askback.core.questions import is_loopback
from askback.errors import UnsafeLinkError

__all__ = [
    "Action",
    "Answer",
    "Mode",
    "Question",
    "Ready",
    "Waiting",
    "pending_questions",
    "resume_decision",
    "safe_link",
]

Mode = Literal["form", "url"]
Action = Literal["accept", "decline", "cancel"]

_ELICIT = "elicitation/create"


@dataclass(frozen=True)
class Question:
    """One pending input request of a parked round.

    `mode` is 'form' or 'url' for an elicitation; other methods (sampling, roots) have `mode` None and cannot be
    answered by a person. `schema` is the form's requested schema; `url` the link of a URL-mode question.
    """

    call_id: str
    round: int
    key: str
    method: str
    mode: Mode | None
    message: str
    schema: Mapping[str, Any] | None = None
    url: str | None = None
    params: Mapping[str, Any] = field(default_factory=dict, repr=False)

    @property
    def host(self) -> str | None:
        """The host a URL-mode question sends the person to, shown in full next to the link."""
        return None if self.url is None else (urlsplit(self.url).hostname or None)

    @property
    def ref(self) -> str:
        """`call_id/round/key`: how the inbox and the command line name one question."""
        return f"{self.call_id}/{self.round}/{self.key}"


@dataclass(frozen=True)
class Answer:
    """A person's answer: accept (with the form's content; none for a URL question), decline or cancel."""

    action: Action
    content: Mapping[str, Any] | None = None

    def wire(self) -> dict[str, Any]:
        """The `ElicitResult` as sent in `inputResponses`."""
        if self.action == "accept" and self.content is not None:
            return {"action": "accept", "content": dict(self.content)}
        return {"action": self.action}


def pending_questions(call_id: str, round_: int, pending: Mapping[str, Any]) -> tuple[Question, ...]:
    """The questions of an `InputRequiredResult` (as its JSON, by alias), in the server's key order."""
    found: list[Question] = []
    for key, request in (pending.get("inputRequests") or {}).items():
        method = str(request.get("method", ""))
        params: Mapping[str, Any] = request.get("params") or {}
        mode: Mode | None = None
        if method == _ELICIT:
            mode = "url" if params.get("mode") == "url" else "form"
        found.append(
            Question(
                call_id=call_id,
                round=round_,
                key=str(key),
                method=method,
                mode=mode,
                message=str(params.get("message", "")),
                schema=params.get("requestedSchema") if mode == "form" else None,
                url=params.get("url") if mode == "url" else None,
                params=params,
            )
        )
    return tuple(found)


@dataclass(frozen=True)
class Waiting:
    """The round cannot be sent yet: these keys have no answer and the deadline has not passed."""

    missing: tuple[str, ...]


@dataclass(frozen=True)
class Ready:
    """Send the round: `responses` by input key; `cancelled` are the keys answered `cancel` at the deadline."""

    responses: Mapping[str, Answer]
    cancelled: tuple[str, ...] = ()


def resume_decision(
    questions: tuple[Question, ...], answers: Mapping[str, Answer], *, now: float, deadline: float | None
) -> Waiting | Ready:
    """Whether a parked round can be sent back now, and with what."""
    missing = tuple(q.key for q in questions if q.key not in answers)
    if not missing:
        return Ready({q.key: answers[q.key] for q in questions})
    if deadline is not None and now >= deadline:
        responses = {q.key: answers.get(q.key, Answer("cancel")) for q in questions}
        return Ready(responses, cancelled=missing)
    return Waiting(missing)


def safe_link(url: str, *, development: bool = False) -> str:
    """The host to show for a URL-mode question's link, or `UnsafeLinkError` when the link must not be shown as
    one: not https (plain http only on a loopback host, and only in development mode), no host, or credentials in
    its user-info. Nothing is fetched."""
    try:
        parts = urlsplit(url)
        host = parts.hostname or ""
    except ValueError as exc:
        raise UnsafeLinkError(f"the question's link is not a URL ({exc}); it is not shown as a link") from None
    if not host:
        raise UnsafeLinkError("the question's link has no host; it is not shown as a link")
    if parts.username or parts.password:
        raise UnsafeLinkError(f"the link to {host} carries credentials in its user-info; it is not shown as a link")
    if parts.scheme == "https":
        return host
    if parts.scheme == "http" and is_loopback(host):
        if development:
            return host
        raise UnsafeLinkError(
            f"the link to {host} is plain http: accepted only in development mode (ASKBACK_DEVELOPMENT=1 or "
            "Runtime(development=True))"
        )
    raise UnsafeLinkError(
        f"the link to {host} uses {parts.scheme or 'no scheme'}: only https links are shown (plain http only on "
        "loopback, in development mode)"
    )
