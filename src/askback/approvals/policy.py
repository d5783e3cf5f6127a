"""Who may decide an approval request, and what the decisions so far add up to: plain data in, a verdict out, no I/O.

```
            approve (quorum reached)
 pending ─────────────────────────────▶ approved ──consumed by a flow──▶ consumed
    │  first deny ──────────────────────▶ denied
    │  its time passes (seen on a read) ─▶ expired ◀── its time passes before a flow consumes it (approved)
    └─ the requester withdraws ─────────▶ withdrawn
```

`denied`, `expired` and `withdrawn` are final, and mean the effect did not run and never will; `consumed` means it
ran (once, for the flow named). The service reads a request under its lock, asks `refusal` whether this person may
decide it now, records the vote, and asks `outcome` whether the votes decide it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Literal

from askback.core.approving import Approval, ApprovalStatus
from askback.core.caller import split_principal

if TYPE_CHECKING:
    from askback.approvals.records import ApprovalRecord, Approver, Vote

__all__ = ["REFUSALS", "TRANSITIONS", "Outcome", "Refusal", "allowed", "outcome", "refusal", "same_person"]

Refusal = Literal["not_allowed", "requester", "actor", "already_decided", "not_pending", "expired", "digest_changed"]
"""Why a decision was not taken. `digest_changed` is the service's own: the page showed another call than the one
stored under that id."""

Outcome = Literal["approved", "denied"]

REFUSALS: Mapping[Refusal, str] = {
    "not_allowed": "You are not one of the people who may decide this request.",
    "requester": "You made this request, and its policy does not let the requester approve their own request.",
    "actor": "You acted on the token that made this request, so you may not decide it.",
    "already_decided": "You have already decided this request; a decision is made once.",
    "not_pending": "This request has already been decided or withdrawn; nothing was changed.",
    "expired": "This request has expired; nothing was changed. The requester may ask again.",
    "digest_changed": "This request is not the one the page showed; nothing was changed. Open it again.",
}
"""What each refusal means, in words for the page that shows it."""

TRANSITIONS: Mapping[ApprovalStatus, frozenset[ApprovalStatus]] = {
    "pending": frozenset({"approved", "denied", "expired", "withdrawn"}),
    "approved": frozenset({"consumed", "expired"}),
    "denied": frozenset(),
    "expired": frozenset(),
    "withdrawn": frozenset(),
    "consumed": frozenset(),
}
"""Every change of status a request may make (the diagram above)."""


def allowed(approval: Approval, approver: Approver) -> bool:
    """Whether the policy names `approver`: as one of its principals, or through one of its groups."""
    return approver.principal in approval.principals or not approval.groups.isdisjoint(approver.groups)


def same_person(approver: str, principal: str) -> bool:
    """Whether `approver` (as the pages' sign-in names them) may be `principal` (a requester or an actor, as the
    bearer check named them), for refusing them: the same spelling, or the same subject where either is bare, since
    a sign-in that knows no home issuer names people bare while a check that returns `iss` qualifies them. Refusing
    a namesake of another issuer is the safe mistake; letting an agent approve its own call is not."""
    if approver == principal:
        return True
    approver_issuer, approver_subject = split_principal(approver)
    issuer, subject = split_principal(principal)
    return (approver_issuer is None or issuer is None) and approver_subject == subject


def refusal(record: ApprovalRecord, approver: Approver, now: float) -> Refusal | None:
    """Why `approver` may not decide `record` at `now`, checked in this order: not named by the policy; the
    requester (unless the policy allows self-approval); an actor of the requester's token (always refused, whatever
    the policy); has decided it already; not pending; expired. `None`: they may."""
    if not allowed(record.approval, approver):
        return "not_allowed"
    if (
        record.requester is not None
        and same_person(approver.principal, record.requester)
        and not record.approval.self_approval
    ):
        return "requester"
    if any(same_person(approver.principal, actor) for actor in record.actors):
        return "actor"
    if any(vote.approver == approver.principal for vote in record.votes):
        return "already_decided"
    if record.status == "expired":
        return "expired"
    if record.status != "pending":
        return "not_pending"
    if now >= record.expires_at:
        return "expired"
    return None


def outcome(approval: Approval, votes: Sequence[Vote]) -> Outcome | None:
    """What `votes` decide: `denied` at the first denial, `approved` once `approval.required` distinct people have
    approved, else `None` (still pending)."""
    approvers: set[str] = set()
    for vote in votes:
        if vote.decision == "deny":
            return "denied"
        approvers.add(vote.approver)
    return "approved" if len(approvers) >= approval.required else None
