"""What the approvals tests share: a policy, the ask a round makes for one exact call, and a service on a store."""

from __future__ import annotations

import secrets
from collections.abc import Mapping
from typing import Any

from pydantic import SecretStr

from askback.approvals.service import ApprovalService, Approver
from askback.clock import Clock
from askback.core.approving import Approval, ApprovalAsk, approval_digest
from askback.identity import PeopleSignIn
from askback.store import Store

NOW = 1_800_000_000.0
BASE = "https://tools.example.com"

# Two of bob, carol and dave.
TWO_OF_THREE = Approval(
    key="deploy", title="Deploy to production", principals=frozenset({"bob", "carol", "dave"}), required=2
)
ONE_OF_THREE = Approval(key="deploy", title="Deploy to production", principals=frozenset({"bob", "carol", "dave"}))

BOB = Approver("bob", method="development")
CAROL = Approver("carol", method="development")
DAVE = Approver("dave", method="development")


def status_url(approval_id: str) -> str:
    return f"{BASE}/approvals/requests/{approval_id}/status"


def ask(
    approval: Approval = TWO_OF_THREE,
    *,
    flow: str = "flow-1",
    requester: str | None = "alice",
    arguments: Mapping[str, Any] | None = None,
    answers: Mapping[str, Any] | None = None,
    summary: str | None = "Deploy build 42 to production",
    tool: str = "deploy",
) -> ApprovalAsk:
    arguments = {"env": "production", "build": 42} if arguments is None else arguments
    answers = {} if answers is None else answers
    digest = approval_digest(
        tool=tool, arguments=arguments, answers=answers, requester=requester, policy=approval.policy()
    )
    return ApprovalAsk(approval, tool, arguments, answers, digest, flow, summary)


def service_on(store: Store, clock: Clock, *, pending: int = 20) -> ApprovalService:
    return ApprovalService(
        store.database,
        clock=clock,
        audit_log=store.audit_log,
        status_url=status_url,
        pending_per_requester=pending,
    )


def people_sign_in(issuer: str, base_url: str, clock: Clock) -> PeopleSignIn:
    """People's sign-in at `issuer` for pages at `base_url`, never sent to the provider: its home issuer is what the
    approvals spell requesters and actors by."""
    return PeopleSignIn(
        issuer=issuer,
        client_id="askback",
        client_secret=SecretStr("not used here"),
        base_url=base_url,
        session_secret=secrets.token_bytes(32),
        clock=clock,
    )
