"""The approvals service: what the asking API (through the port) and the hosted pages call.

Every change (a request made, a decision, a withdrawal, an expiry, a consumption) is one transaction that also
appends its audit rows (`approval.requested`, `.approved`, `.denied`, `.expired`, `.withdrawn`, `.consumed`) to the
tamper-evident chain and its event (`approval.requested`, `approval.decided`, `approval.withdrawn`,
`approval.expired`, `approval.consumed`) to the shared event log, so that webhooks and agent runtimes see it
whichever instance made it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from askback.core.approving import Approval, ApprovalAsk, ApprovalState, ApprovalStatus

__all__ = ["ApprovalRecord", "ApprovalService", "Approver", "Decided", "Vote"]

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
    asked (form contents, by question key)."""

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

    def state(self, status_url: str) -> ApprovalState:
        """What the port reports to the core."""
        raise NotImplementedError


@dataclass(frozen=True)
class Decided:
    """What a decision did: `record` as it now is; `counted` says whether this decision was taken (False: the
    request was already decided, withdrawn or expired, or this person had decided already: `refusal` says which)."""

    record: ApprovalRecord
    counted: bool
    refusal: str | None = None


class ApprovalService:
    """Approval requests in the app's store (see the module's docstring)."""

    async def request(self, requester: str | None, actors: Sequence[str], ask: ApprovalAsk) -> ApprovalRecord:
        """The request for `ask.digest` made by `requester`: the pending one (reused), the approved one consumed by
        `ask.flow_id` (in this transaction, with its `approval.consumed` audit row and event; one consumed by this
        same flow is returned as it is), else a new pending one. `LimitReachedError` past the pending requests
        allowed per requester. Expired on read when its time has passed."""
        raise NotImplementedError

    async def withdraw(self, requester: str | None, approval_id: str) -> ApprovalRecord | None:
        """The requester withdraws a pending request; `None` for an id that is not theirs (as for an unknown one)."""
        raise NotImplementedError

    async def of_requester(self, requester: str | None, approval_id: str) -> ApprovalRecord | None:
        """The request as its requester may see it; `None` for another principal's id, as for an unknown one."""
        raise NotImplementedError

    async def get(self, approval_id: str) -> ApprovalRecord | None:
        """Any request, expired on read when its time has passed (operators and approvers' pages)."""
        raise NotImplementedError

    async def decidable_by(self, approver: Approver) -> list[ApprovalRecord]:
        """The open requests this person may decide, newest first."""
        raise NotImplementedError

    async def decide(
        self, approver: Approver, approval_id: str, decision: Decision, reason: str, *, digest: str
    ) -> Decided:
        """Record `approver`'s decision on the request whose digest the page showed (`digest`), after checking, in
        the transaction that records it: in the policy, not the requester nor an actor of the requester's token,
        not already decided by this person, still pending and unexpired, digest unchanged. The decision that
        completes the quorum (or the first denial) decides the request, on every instance."""
        raise NotImplementedError

    async def listing(self, *, status: ApprovalStatus | None = None, limit: int = 100) -> list[ApprovalRecord]:
        """Requests for operators (`askback approvals list`), newest first."""
        raise NotImplementedError
