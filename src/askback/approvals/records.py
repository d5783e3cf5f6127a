"""What the approvals service speaks in: the person deciding, a vote, a request as stored, and what a decision did.

Plain frozen data, shared by the pure policy, the repository and the service (which re-exports them: import them from
`askback.approvals.service`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from askback.core.approving import Approval, ApprovalState, ApprovalStatus

__all__ = ["ApprovalRecord", "Approver", "Decided", "Decision", "Vote"]

Decision = Literal["approve", "deny"]


@dataclass(frozen=True)
class Approver:
    """The person deciding, as their sign-in names them: `principal` (issuer included, as
    `askback.core.caller.principal_of` spells it), the `groups` their sign-in's group claim lists (or the setup's
    directory gives), and `method`, how they were authenticated (`oidc <issuer>`, `development`), for the record."""

    principal: str
    groups: frozenset[str] = field(default_factory=frozenset)
    method: str = "unknown"


@dataclass(frozen=True)
class Vote:
    """One person's decision on a request."""

    approver: str
    decision: Decision
    reason: str
    at: float
    method: str


@dataclass(frozen=True)
class ApprovalRecord:
    """An approval request as the store holds it. `arguments` are the call's arguments with the policy's hidden ones
    replaced by `None` (their values are in the digest, never stored); `answers` the answers given before it was
    asked (form contents, by question key).

    `reason` says why it ended as it did (the denial's reason, a withdrawal), `consumed_by_flow` which flow ran the
    effect it approved, and `flows` which flows waited on it (the one that made it first)."""

    id: str
    approval: Approval
    tool: str
    arguments: Mapping[str, Any]
    answers: Mapping[str, Any]
    requester: str | None
    actors: tuple[str, ...]
    summary: str | None
    digest: str
    flow_id: str
    status: ApprovalStatus
    created_at: float
    expires_at: float
    decided_at: float | None
    votes: tuple[Vote, ...]
    reason: str | None = None
    consumed_by_flow: str | None = None
    flows: tuple[str, ...] = ()

    @property
    def approvers(self) -> tuple[str, ...]:
        """Who approved it, in the order they did."""
        return tuple(vote.approver for vote in self.votes if vote.decision == "approve")

    @property
    def denied_by(self) -> str | None:
        """Who denied it, when someone did."""
        return next((vote.approver for vote in self.votes if vote.decision == "deny"), None)

    def state(self, status_url: str) -> ApprovalState:
        """What the port reports to the core: `status_url` is the request's status page."""
        return ApprovalState(
            id=self.id,
            status=self.status,
            expires_at=self.expires_at,
            required=self.approval.required,
            approvers=self.approvers,
            denied_by=self.denied_by,
            reason=self.reason,
            status_url=status_url,
            approval=self.approval,
        )


@dataclass(frozen=True)
class Decided:
    """What a decision did: `record` as it now is; `counted` says whether this decision was taken (False: the
    request was already decided, withdrawn or expired, or this person had decided already: `refusal` says which, a
    code of `askback.approvals.policy.REFUSALS`). A page shows a refusal of `not_allowed` as it shows an unknown
    request: the record is not that person's to see."""

    record: ApprovalRecord
    counted: bool
    refusal: str | None = None
