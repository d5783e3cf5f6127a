"""What each approvals page shows, as plain values its templates lay out (no I/O, no markup), and what a person may
do with a request (`refusal`), decided from the record, the person and the time.

Everything outside askback wrote (the tool's name, its arguments, the answers given, reasons, principals, group names)
reaches a page through these values: bounded in length first, then with invisible and direction-changing characters
made visible (`for_terminal`, as a terminal shows them), and escaped by the templates. An argument the policy hides
is shown as "hidden" whatever the record holds for it.
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, cast

from askback.approvals.policy import Refusal, same_person
from askback.approvals.policy import refusal as policy_refusal
from askback.approvals.service import ApprovalRecord, Approver, Decided, Vote
from askback.core.terminal_text import for_terminal, shorten

__all__ = [
    "Outcome",
    "ShownRecord",
    "ShownVote",
    "outcome_of",
    "refusal",
    "refusal_text",
    "refused_outcome",
    "shown_record",
    "shown_text",
]

# A reason or a summary is shown up to this many characters, a name (principal, group, key) up to the second. An
# argument's or an answer's value is shown whole: an approver approves what they saw, and a call is at most 64 KiB
# (`MAX_STORED_CALL`).
_VALUE_SHOWN = 500
_NAME_SHOWN = 120
_LISTED = 40

# The pages' own words for each refusal (`askback.approvals.policy.REFUSALS` are the service's).
_REFUSALS: Mapping[Refusal, str] = {
    "not_allowed": "There is no request here that you may decide.",
    "requester": "You cannot approve your own request: someone else allowed to must decide it.",
    "actor": "You acted in the call that made this request, so you cannot decide it.",
    "already_decided": "You have decided this request already.",
    "not_pending": "This request is no longer open: it is {status}.",
    "expired": "This request is no longer open: it is {status}.",
    "digest_changed": "This request is not the one the page showed. Open it again.",
}

_OUTCOMES = {
    "approved": "approved: the call goes on",
    "consumed": "approved, and the call went on",
    "denied": "denied: the call will not run",
    "expired": "expired: not enough people approved it in time, and the call will not run",
    "withdrawn": "withdrawn by its requester: the call will not run",
    "pending": "still waiting for approval",
}


def refusal(record: ApprovalRecord, approver: Approver, now: float) -> Refusal | None:
    """Why `approver` may not decide `record` at `now` (`askback.approvals.policy.refusal`), as a page tells it: the
    requester, or an actor of the requester's token, is told that it is their own request whether or not the policy
    names them; anyone else the policy does not name is `not_allowed`, which the pages answer as an unknown id."""
    why = policy_refusal(record, approver, now)
    if why == "not_allowed" and record.requester is not None and same_person(approver.principal, record.requester):
        return "requester"
    if why == "not_allowed" and any(same_person(approver.principal, actor) for actor in record.actors):
        return "actor"
    return why


def refusal_text(why: Refusal, record: ApprovalRecord, now: float) -> str:
    """What the page says for `why`."""
    return _REFUSALS[why].format(status=_status(record, now))


def _status(record: ApprovalRecord, now: float) -> str:
    status = "expired" if record.status in ("pending", "approved") and now >= record.expires_at else record.status
    return _OUTCOMES.get(status, status)


def shown_text(value: str, limit: int = _NAME_SHOWN) -> str:
    """Outside text as a page shows it: one line, at most `limit` characters, odd characters made visible."""
    return for_terminal(shorten(value, limit))


def _shown_value(value: Any) -> str:
    """An argument's or an answer's value, whole, with odd characters made visible (the page keeps its spaces)."""
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, sort_keys=True, default=str)
    return for_terminal(text)


def _moment(at: float) -> str:
    return dt.datetime.fromtimestamp(at, dt.UTC).strftime("%Y-%m-%d %H:%M UTC")


@dataclass(frozen=True)
class ShownVote:
    """One decision on a request, as a page shows it."""

    who: str
    decision: str
    when: str
    reason: str


@dataclass(frozen=True)
class ShownRecord:
    """A request as a page shows it."""

    id: str
    title: str
    tool: str
    summary: str | None
    arguments: tuple[tuple[str, str | None], ...]  # `None`: hidden by the policy
    answers: tuple[tuple[str, str], ...]
    requester: str
    status: str
    open: bool
    created: str
    expires: str
    approvals: int
    required: int
    principals: tuple[str, ...]
    groups: tuple[str, ...]
    more_names: int
    votes: tuple[ShownVote, ...]
    token: str


def _vote(vote: Vote) -> ShownVote:
    verb = "approved" if vote.decision == "approve" else "denied"
    return ShownVote(shown_text(vote.approver), verb, _moment(vote.at), shown_text(vote.reason, _VALUE_SHOWN))


def shown_record(record: ApprovalRecord, now: float, token: str = "") -> ShownRecord:
    """`record` at `now`, as the request and status pages show it; `token` is what its decision form carries (the
    page's keyed token of the request's id and digest, never the digest itself)."""
    approval = record.approval
    arguments = tuple(
        (shown_text(key), None if key in approval.hidden else _shown_value(value))
        for key, value in sorted(record.arguments.items())
    )
    answers = tuple((shown_text(key), _shown_value(value)) for key, value in sorted(record.answers.items()))
    principals = sorted(approval.principals)
    groups = sorted(approval.groups)
    return ShownRecord(
        id=record.id,
        title=shown_text(approval.title, 200),
        tool=shown_text(record.tool),
        summary=None if record.summary is None else shown_text(record.summary, _VALUE_SHOWN),
        arguments=arguments,
        answers=answers,
        requester="nobody signed in" if record.requester is None else shown_text(record.requester),
        status=_status(record, now),
        open=record.status == "pending" and now < record.expires_at,
        created=_moment(record.created_at),
        expires=_moment(record.expires_at),
        approvals=sum(1 for vote in record.votes if vote.decision == "approve"),
        required=approval.required,
        principals=tuple(shown_text(p) for p in principals[:_LISTED]),
        groups=tuple(shown_text(g) for g in groups[:_LISTED]),
        more_names=max(0, len(principals) - _LISTED) + max(0, len(groups) - _LISTED),
        votes=tuple(_vote(vote) for vote in sorted(record.votes, key=lambda v: v.at)),
        token=token,
    )


@dataclass(frozen=True)
class Outcome:
    """What the page says after a decision was sent: a `title` and a line of `text`."""

    title: str
    text: str
    counted: bool


def outcome_of(decided: Decided, decision: str, digest: str, now: float) -> Outcome:
    """What `decided` (the service's answer to a `decision` on the request the page showed with `digest`) means."""
    record = decided.record
    if decided.counted:
        if decision == "deny":
            return Outcome("Denied", "You denied the request: the call will not run.", True)
        if record.status in ("approved", "consumed"):
            return Outcome(
                "Approved", "You approved the request: it has every approval it needs, and the call goes on.", True
            )
        left = max(1, record.approval.required - sum(1 for v in record.votes if v.decision == "approve"))
        more = "1 more approval is" if left == 1 else f"{left} more approvals are"
        return Outcome("Approved", f"You approved the request: {more} needed before the call goes on.", True)
    if decided.refusal == "digest_changed" or (decided.refusal is None and record.digest != digest):
        text = (
            "This request changed since the page you decided on was shown, so your decision was not recorded. "
            "Open it again to see what it asks now."
        )
        return Outcome("This request changed", text, False)
    why = decided.refusal if decided.refusal in _REFUSALS else "not_pending"
    return refused_outcome(cast(Refusal, why), record, now)


def refused_outcome(why: Refusal, record: ApprovalRecord, now: float) -> Outcome:
    """What the page says when a decision sent was refused before it reached the service (a form opened earlier and
    sent after the request was decided, by its requester, or twice)."""
    if why == "expired" or (why == "not_pending" and record.status == "expired"):
        text = f"This request is no longer open: it is {_status(record, now)}. Your decision was not recorded."
        return Outcome("No longer open", text, False)
    if why == "not_pending":
        text = f"This request was already decided (it is {_status(record, now)}); your decision was not recorded."
        return Outcome("Already decided", text, False)
    if why == "already_decided":
        return Outcome("Already decided", "You had decided this request already; nothing was changed.", False)
    return Outcome("Not recorded", f"{refusal_text(why, record, now)} Your decision was not recorded.", False)
