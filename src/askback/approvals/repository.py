"""Approval requests and votes in the shared store: the statements, and the steps a service transaction is made of.

Each function runs inside the caller's transaction (`Database.transaction(..., immediate=True)`'s `conn`), so that
SQLite's write lock is held from BEGIN; on PostgreSQL a request that is about to change is read `FOR UPDATE`, so two
instances deciding it at once take turns, and the second reads the votes the first committed. Statements are built
once, with bound parameters (SQLite's fast path compiles each statement object once).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping
from typing import Any, cast, get_args

from sqlalchemy import Table, and_, bindparam, func, insert, or_, select, update

from askback.approvals._models import RequestRow, VoteRow
from askback.approvals.policy import TRANSITIONS
from askback.approvals.records import ApprovalRecord, Vote
from askback.core.approving import Approval, ApprovalStatus
from askback.errors import AskbackError

__all__ = [
    "BY_ID",
    "BY_ID_LOCKED",
    "BY_STATUS",
    "FOR_CALL",
    "NEWEST",
    "PENDING",
    "PENDING_OF",
    "PENDING_OF_NOBODY",
    "STALE_OF",
    "STALE_OF_NOBODY",
    "add_vote",
    "create",
    "record_of",
    "set_flows",
    "set_status",
    "votes_of",
]

_REQUESTS = cast(Table, RequestRow.__table__)
_VOTES = cast(Table, VoteRow.__table__)
_r, _v = _REQUESTS.c, _VOTES.c

# How many requests for one exact call of one requester a new ask looks through (newest first): more are only made
# after a denial, an expiry or a withdrawal each, and the pending cap bounds how fast.
_CALL_HISTORY = 50
# The approvers' list reads the open requests' policies this many at a time (newest first), until it has found
# `LISTED_MOST` this person may decide or has read them all.
PENDING_SCAN = 1000
LISTED_MOST = 200

BY_ID = select(_REQUESTS).where(_r.id == bindparam("id"))
BY_ID_LOCKED = select(_REQUESTS).where(_r.id == bindparam("id")).with_for_update()
FOR_CALL = (
    select(_REQUESTS)
    .where(_r.digest == bindparam("digest"), _r.requester.is_not_distinct_from(bindparam("requester")))
    .order_by(_r.created_at.desc(), _r.id)
    .limit(_CALL_HISTORY)
    .with_for_update()
)
PENDING_OF = (
    select(func.count()).select_from(_REQUESTS).where(_r.requester == bindparam("requester"), _r.status == "pending")
)
PENDING_OF_NOBODY = select(func.count()).select_from(_REQUESTS).where(_r.requester.is_(None), _r.status == "pending")
# A requester's pending requests past their time, expired before the cap counts them.
STALE_OF = (
    select(_REQUESTS)
    .where(_r.requester == bindparam("requester"), _r.status == "pending", _r.expires_at <= bindparam("now"))
    .with_for_update()
)
STALE_OF_NOBODY = (
    select(_REQUESTS)
    .where(_r.requester.is_(None), _r.status == "pending", _r.expires_at <= bindparam("now"))
    .with_for_update()
)
_POLICIES = select(_r.id, _r.policy, _r.created_at, _r.expires_at).where(_r.status == "pending")
_NEWEST = (_r.created_at.desc(), _r.id.desc())
PENDING = _POLICIES.order_by(*_NEWEST).limit(PENDING_SCAN)
PENDING_BEFORE = (
    _POLICIES.where(
        or_(
            _r.created_at < bindparam("at"),
            and_(_r.created_at == bindparam("at"), _r.id < bindparam("id")),
        )
    )
    .order_by(*_NEWEST)
    .limit(PENDING_SCAN)
)
_VOTES_OF = (
    select(_v.approver, _v.decision, _v.reason, _v.at, _v.method)
    .where(_v.request_id == bindparam("id"))
    .order_by(_v.at, _v.approver)
)
_CREATE = insert(_REQUESTS)
_ADD_VOTE = insert(_VOTES)
_SET_STATUS = (
    update(_REQUESTS)
    .where(_r.id == bindparam("b_id"), _r.status == bindparam("b_before"))
    .values(
        status=bindparam("b_after"),
        decided_at=bindparam("b_decided_at"),
        reason=bindparam("b_reason"),
        consumed_by_flow=bindparam("b_consumed_by"),
    )
)
# The operators' listing: every request, or those of one status, newest first.
NEWEST = select(_REQUESTS).order_by(_r.created_at.desc(), _r.id).limit(bindparam("limit"))
BY_STATUS: Mapping[ApprovalStatus, Any] = {
    status: select(_REQUESTS).where(_r.status == status).order_by(_r.created_at.desc(), _r.id).limit(bindparam("limit"))
    for status in get_args(ApprovalStatus)
}
_SET_FLOWS = update(_REQUESTS).where(_r.id == bindparam("b_id")).values(flows=bindparam("b_flows"))
_SET_ACTORS = update(_REQUESTS).where(_r.id == bindparam("b_id")).values(actors=bindparam("b_actors"))


def _approval(policy: Mapping[str, Any]) -> Approval:
    return Approval(
        key=policy["key"],
        title=policy["title"],
        principals=frozenset(policy["principals"]),
        groups=frozenset(policy["groups"]),
        required=int(policy["required"]),
        ttl=float(policy["ttl"]),
        self_approval=bool(policy["self_approval"]),
        hidden=frozenset(policy["hidden"]),
    )


def votes_of(conn: Any, request_id: str) -> tuple[Vote, ...]:
    return tuple(
        Vote(row.approver, row.decision, row.reason, row.at, row.method)
        for row in conn.execute(_VOTES_OF, {"id": request_id}).all()
    )


def record_of(row: Any, votes: Iterable[Vote]) -> ApprovalRecord:
    """The record a request row and its votes make."""
    return ApprovalRecord(
        id=row.id,
        approval=_approval(json.loads(row.policy)),
        tool=row.tool,
        arguments=json.loads(row.arguments),
        answers=json.loads(row.answers),
        requester=row.requester,
        actors=tuple(json.loads(row.actors)),
        summary=row.summary,
        digest=row.digest,
        flow_id=row.flow_id,
        status=row.status,
        created_at=row.created_at,
        expires_at=row.expires_at,
        decided_at=row.decided_at,
        votes=tuple(votes),
        reason=row.reason,
        consumed_by_flow=row.consumed_by_flow,
        flows=tuple(json.loads(row.flows)),
    )


def create(conn: Any, record: ApprovalRecord, *, arguments_json: str, answers_json: str) -> None:
    conn.execute(
        _CREATE,
        {
            "id": record.id,
            "key": record.approval.key,
            "title": record.approval.title,
            "policy": json.dumps(record.approval.policy(), sort_keys=True),
            "tool": record.tool,
            "arguments": arguments_json,
            "answers": answers_json,
            "requester": record.requester,
            "actors": json.dumps(list(record.actors)),
            "summary": record.summary,
            "digest": record.digest,
            "flow_id": record.flow_id,
            "flows": json.dumps(list(record.flows)),
            "consumed_by_flow": None,
            "status": record.status,
            "created_at": record.created_at,
            "expires_at": record.expires_at,
            "decided_at": None,
            "reason": None,
        },
    )


def set_status(
    conn: Any,
    record: ApprovalRecord,
    after: ApprovalStatus,
    *,
    at: float,
    reason: str | None = None,
    consumed_by: str | None = None,
) -> None:
    """Move `record` from the status it was read in to `after`; `decided_at` is when it left `pending`. Under the
    request's lock nobody else can have changed it; a changed row, or a change `policy.TRANSITIONS` does not list,
    is a bug, and rolls the transaction back."""
    if after not in TRANSITIONS[record.status]:
        raise AskbackError(f"approval request {record.id} cannot go from {record.status} to {after}")
    decided_at = at if record.status == "pending" else record.decided_at
    params = {
        "b_id": record.id,
        "b_before": record.status,
        "b_after": after,
        "b_decided_at": decided_at,
        "b_reason": reason if reason is not None else record.reason,
        "b_consumed_by": consumed_by if consumed_by is not None else record.consumed_by_flow,
    }
    if conn.execute(_SET_STATUS, params).rowcount != 1:
        raise AskbackError(f"approval request {record.id} changed under its lock")


def set_flows(conn: Any, request_id: str, flows: Iterable[str]) -> None:
    conn.execute(_SET_FLOWS, {"b_id": request_id, "b_flows": json.dumps(list(flows))})


def set_actors(conn: Any, request_id: str, actors: Iterable[str]) -> None:
    conn.execute(_SET_ACTORS, {"b_id": request_id, "b_actors": json.dumps(list(actors))})


def add_vote(conn: Any, request_id: str, vote: Vote) -> None:
    conn.execute(
        _ADD_VOTE,
        {
            "request_id": request_id,
            "approver": vote.approver,
            "decision": vote.decision,
            "reason": vote.reason,
            "method": vote.method,
            "at": vote.at,
        },
    )


def pending_for(
    conn: Any,
    may_decide: Callable[[Approval], bool],
    *,
    now: float,
    decidable: Callable[[ApprovalRecord], bool],
) -> list[ApprovalRecord]:
    """The open requests this person may decide, newest first, `LISTED_MOST` at most: every pending request's policy
    and expiry are read, page by page, those whose policy `may_decide` accepts and which are open at `now` are read
    whole, with their votes, and kept when `decidable` (the person's own, an actor's or already decided by them are
    not). Only what is kept counts, so that no number of requests this person may not decide now hides one they may.
    A policy is read and judged once per listing however many requests store it (a tool's requests all do)."""
    kept: list[ApprovalRecord] = []
    judged: dict[str, bool] = {}
    page = conn.execute(PENDING, {}).all()
    while True:
        for row in page:
            if row.expires_at <= now:
                continue
            if row.policy not in judged:
                judged[row.policy] = may_decide(_approval(json.loads(row.policy)))
            if not judged[row.policy]:
                continue
            found = conn.execute(BY_ID, {"id": row.id}).first()
            record = None if found is None else record_of(found, votes_of(conn, found.id))
            if record is not None and decidable(record):
                kept.append(record)
                if len(kept) == LISTED_MOST:
                    return kept
        if len(page) < PENDING_SCAN:
            return kept
        page = conn.execute(PENDING_BEFORE, {"at": page[-1].created_at, "id": page[-1].id}).all()
