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
from typing import Any, Literal

from askback.approvals.service import ApprovalRecord, Approver, Decided, Vote
from askback.core.terminal_text import for_terminal, shorten

__all__ = [
    "Outcome",
    "PageRefusal",
    "ShownRecord",
    "ShownVote",
    "outcome_of",
    "refused_outcome",
    "refusal",
    "refusal_text",
    "shown_record",
    "shown_text",
]

# A value is shown up to this many characters (a page is for deciding, not for reading a whole document); a name
# (principal, group, key) up to the second.
_VALUE_SHOWN = 500
_NAME_SHOWN = 120
_LISTED = 40

PageRefusal = Literal[
    "not_allowed", "requester", "actor", "already_decided", "not_pending", "expired", "digest_changed"
]
"""Why a person may not decide a request (`askback.approvals.policy.Refusal`): outside its policy (the page answers
as for an unknown id), its requester (unless the policy lets them), an actor of the requester's token, one who decided
it already, or it is no longer open."""

_REFUSALS: Mapping[PageRefusal, str] = {
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
    "expired": "expired before enough people approved it: the call will not run",
    "withdrawn": "withdrawn by its requester: the call will not run",
    "pending": "still waiting for approval",
}


def refusal(record: ApprovalRecord, approver: Approver, now: float) -> PageRefusal | None:
    """Why `approver` may not decide `record` at `now`; `None` when they may. The requester (or an actor of the
    requester's token) is told so whether or not the policy names them, since it is their own request; anyone else
    outside the policy is `not_allowed`, which the pages answer as an unknown id."""
    approval = record.approval
    who = approver.principal
    in_policy = who in approval.principals or not approval.groups.isdisjoint(approver.groups)
    if who == record.requester and not (approval.self_approval and in_policy):
        return "requester"
    if who in record.actors and who != record.requester:
        return "actor"
    if not in_policy:
        return "not_allowed"
    if any(vote.approver == who for vote in record.votes):
        return "already_decided"
    if record.status == "expired" or (record.status == "pending" and now >= record.expires_at):
        return "expired"
    if record.status != "pending":
        return "not_pending"
    return None


def refusal_text(why: PageRefusal, record: ApprovalRecord, now: float) -> str:
    """What the page says for `why`."""
    return _REFUSALS[why].format(status=_status(record, now))


def _status(record: ApprovalRecord, now: float) -> str:
    status = "expired" if record.status == "pending" and now >= record.expires_at else record.status
    return _OUTCOMES.get(status, status)


def shown_text(value: str, limit: int = _NAME_SHOWN) -> str:
    """Outside text as a page shows it: one line, at most `limit` characters, odd characters made visible."""
    return for_terminal(shorten(value, limit))


def _shown_value(value: Any) -> str:
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, sort_keys=True, default=str)
    return for_terminal(shorten(text, _VALUE_SHOWN))


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
    digest: str


def _vote(vote: Vote) -> ShownVote:
    verb = "approved" if vote.decision == "approve" else "denied"
    return ShownVote(shown_text(vote.approver), verb, _moment(vote.at), shown_text(vote.reason, _VALUE_SHOWN))


def shown_record(record: ApprovalRecord, now: float) -> ShownRecord:
    """`record` at `now`, as the request and status pages show it."""
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
        digest=record.digest,
    )


@dataclass(frozen=True)
class Outcome:
    """What the page says after a decision was sent: a `title` and a line of `text`."""

    title: str
    text: str
    counted: bool


def outcome_of(decided: Decided, approver: Approver, decision: str, digest: str, now: float) -> Outcome:
    """What `decided` (the service's answer to `approver`'s `decision` on the request shown with `digest`) means."""
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
    if record.digest != digest:
        text = (
            "This request changed since the page you decided on was shown, so your decision was not recorded. "
            "Open it again to see what it asks now."
        )
        return Outcome("This request changed", text, False)
    mine = any(vote.approver == approver.principal for vote in record.votes)
    if mine:
        return Outcome("Already decided", "You had decided this request already; nothing was changed.", False)
    text = f"This request was already decided (it is {_status(record, now)}); your decision was not recorded."
    return Outcome("Already decided", text, False)


def refused_outcome(why: PageRefusal, record: ApprovalRecord, now: float) -> Outcome:
    """What the page says when a decision sent was refused before it reached the service (a form opened earlier and
    sent after the request was decided, by its requester, or twice)."""
    if why in ("not_pending", "expired"):
        text = f"This request was already decided (it is {_status(record, now)}); your decision was not recorded."
        return Outcome("Already decided", text, False)
    if why == "already_decided":
        return Outcome("Already decided", "You had decided this request already; nothing was changed.", False)
    return Outcome("Not recorded", f"{refusal_text(why, record, now)} Your decision was not recorded.", False)
