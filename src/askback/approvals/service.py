"""The approvals service: what the asking API (through the port) and the hosted pages call.

Every change (a request made, a decision, a withdrawal, an expiry, a consumption) is one transaction that also
appends its audit rows (`approval.requested`, `.approved`, `.denied`, `.expired`, `.withdrawn`, `.consumed`) to the
tamper-evident chain and its event (`approval.requested`, `approval.decided`, `approval.withdrawn`,
`approval.expired`, `approval.consumed`) to the shared event log, so that webhooks and agent runtimes see it
whichever instance made it.

Concurrency is decided by the database: a change runs in a transaction that takes SQLite's write lock at BEGIN, and
on PostgreSQL reads the request `FOR UPDATE` (a new request holds its requester's lock, for the cap), so of two
instances deciding one request at once the second reads the first's vote. Who may decide, and what the votes add up
to, is `policy`'s, from the request as read under that lock. A pending request past its time is expired by the read
that notices, with its audit row and event.
"""

from __future__ import annotations

import json
import re
import secrets
import unicodedata
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from typing import Any, TypeVar

from askback.approvals import repository as rows
from askback.approvals._changes import Changes
from askback.approvals._keys import STORED_DIGEST, derived, keyed
from askback.approvals.events import CONSUMED, DECIDED, EXPIRED, REQUESTED, WITHDRAWN
from askback.approvals.policy import allowed, outcome, refusal
from askback.approvals.records import ApprovalRecord, Approver, Decided, Decision, Vote
from askback.audit.emit import emit_all
from askback.audit.event import EventKind
from askback.clock import Clock
from askback.core.approving import ApprovalAsk, ApprovalState, ApprovalStatus, approval_digest
from askback.core.caller import MAX_PRINCIPAL, home_spelled
from askback.core.text import name_problem
from askback.errors import InvalidParamsError, LimitReachedError, ToolError
from askback.store import AuditLog, Database, append_event, hold_lock
from askback.store import audit_rows as audit_query

__all__ = ["MAX_STORED_CALL", "MAX_SUMMARY", "ApprovalRecord", "ApprovalService", "Approver", "Decided", "Vote"]

# What one request may store of the call (its arguments and answers, as JSON, in UTF-8 bytes), and the longest
# summary and reason, in characters.
MAX_STORED_CALL = 64 * 1024
MAX_SUMMARY = 1000
_MAX_REASON = 1000
_MAX_ACTORS = 64
# The flows one request remembers as waiting on it (the newest).
_MAX_FLOWS = 32
_T = TypeVar("_T")
# What a request's time to live ends: waiting for its decision, and an approval not yet used by the call it approves
# (a call approved and never made is not approved for ever).
_ENDS_AT_ITS_TIME = frozenset({"pending", "approved"})
_DIGEST = re.compile(r"^[0-9a-f]{64}$")
# What a multi-line text shown to people may not hold: controls (but the line feed and tab), format characters
# (bidirectional overrides among them), separators, surrogates, private and unassigned code points.
_NOT_IN_TEXT = frozenset({"Cc", "Cf", "Zl", "Zp", "Cs", "Co", "Cn"})


def _text_problem(text: str, *, what: str, limit: int) -> str | None:
    if len(text) > limit:
        return f"{what} is longer than {limit} characters"
    for char in text:
        if char not in "\n\t" and unicodedata.category(char) in _NOT_IN_TEXT:
            return f"{what} contains the character U+{ord(char):04X}, which text shown to people may not hold"
    return None


class ApprovalService:
    """Approval requests in the app's store (see the module's docstring): `database` holds them, `audit_log` is the
    store's audit trail (its chain), `status_url(id)` the requester's status page of a request, and a requester holds
    at most `pending_per_requester` pending requests (`LimitReachedError` past it)."""

    def __init__(
        self,
        database: Database,
        *,
        clock: Clock,
        audit_log: AuditLog,
        status_url: Callable[[str], str],
        pending_per_requester: int,
        keys: Sequence[str] = (),
        home_issuer: str | None = None,
    ) -> None:
        self.database = database
        self.clock = clock
        self.audit_log = audit_log
        self.status_url = status_url
        self.pending_per_requester = pending_per_requester
        # The issuer whose people the approvers' sign-in spells bare: requesters and actors are stored, and compared
        # with the people signed in, in that spelling, whatever spelling the bearer check gave them.
        self.home_issuer = home_issuer
        # The digest a request is stored under: keyed by a key of its own purpose derived from each state key (the
        # first for a new request; any for a lookup, so a rotation keeps the requests made before it).
        self._digest_keys = derived([key.encode() for key in keys], STORED_DIGEST)

    def _stored(self, digest: str) -> list[str]:
        """What the call's `digest` is stored as under each key, the current key's first (the digest itself without
        keys, as the operators' tools and tests open the service)."""
        if not self._digest_keys:
            return [digest]
        return [keyed(key, digest.encode()) for key in self._digest_keys]

    def _spelled(self, principal: str | None) -> str | None:
        """`principal` in the home spelling of the approvers' sign-in (`home_spelled`)."""
        return None if principal is None else home_spelled(principal, self.home_issuer)

    def state(self, record: ApprovalRecord) -> ApprovalState:
        """What the port reports to the core of `record`, its status page included."""
        return record.state(self.status_url(record.id))

    # -- for the asking API --

    async def request(self, requester: str | None, actors: Sequence[str], ask: ApprovalAsk) -> ApprovalRecord:
        """The request for `ask.digest` made by `requester`: the pending one (reused), the approved one consumed by
        `ask.flow_id` (in this transaction, with its `approval.consumed` audit row and event; one consumed by this
        same flow is returned as it is), else a new pending one. `LimitReachedError` past the pending requests
        allowed per requester. Expired on read when its time has passed.

        A flow that asks again finds the request it waited on whatever became of it (denied, expired, withdrawn),
        so that it can complete with that; a flow that never waited on a decided request gets a new one. With
        `ask.following` (the request the flow's status link showed), that request, when it is this requester's and
        for this call, is the one the flow waited on; any other id is ignored."""
        checked = self._checked_ask(requester, actors, ask)
        stored_actors = tuple(dict.fromkeys(home_spelled(actor, self.home_issuer) for actor in checked))
        # The digest binds the requester as the caller's check spelled them; the record keeps the home spelling.
        requester = self._spelled(requester)
        arguments = {k: (None if k in ask.approval.hidden else v) for k, v in ask.arguments.items()}
        arguments_json = json.dumps(arguments, sort_keys=True, ensure_ascii=False)
        answers_json = json.dumps(dict(ask.answers), sort_keys=True, ensure_ascii=False)
        if len(arguments_json.encode()) + len(answers_json.encode()) > MAX_STORED_CALL:
            raise ToolError(
                f"This call is too large to be approved: its arguments and answers take more than {MAX_STORED_CALL} "
                "bytes, the most an approval request stores. Make the call with smaller arguments."
            )
        flow = ask.flow_id
        stored = self._stored(ask.digest)

        def write(conn: Any, changes: Changes) -> ApprovalRecord:
            # Under the requester's lock: two instances asking for the same call, or counting toward the cap, take
            # turns, and the second finds what the first made.
            hold_lock(conn, f"approvals of {requester!r}")
            # Under each key of the ring (a rotation keeps the requests made before it): a few keys, a query each.
            found = [
                row
                for one in stored
                for row in conn.execute(rows.FOR_CALL, {"digest": one, "requester": requester}).all()
            ]
            found.sort(key=lambda row: (-row.created_at, row.id))  # newest first, as one query gives them
            # A request an actor of this call's token approved (or one whose actors could not all be kept) is not
            # this call's: an agent acting for the requester never goes on with an approval it gave itself.
            records = [r for r in (self._fresh(conn, row, changes) for row in found) if _serves(r, stored_actors)]
            mine = self._followed(conn, records, requester, ask, changes) or next(
                (r for r in records if flow == r.flow_id or flow in r.flows), None
            )
            if mine is not None and not _serves(mine, stored_actors):
                mine = None
            if mine is not None:
                if mine.status == "approved":
                    return self._consume(conn, self._attach(conn, mine, flow, stored_actors), flow, changes)
                if mine.status != "consumed" or mine.consumed_by_flow == flow:
                    return self._attach(conn, mine, flow, stored_actors)
            pending = next((r for r in records if r.status == "pending"), None)
            if pending is not None:
                return self._attach(conn, pending, flow, stored_actors)
            approved = next((r for r in records if r.status == "approved"), None)
            if approved is not None:
                return self._consume(conn, self._attach(conn, approved, flow, stored_actors), flow, changes)
            # A request past its time no longer counts: expired now, with its audit row and event.
            nobody = requester is None
            stale = rows.STALE_OF_NOBODY if nobody else rows.STALE_OF
            for row in conn.execute(stale, {"requester": requester, "now": changes.at}).all():
                self._fresh(conn, row, changes)
            count = conn.execute(
                rows.PENDING_OF_NOBODY if nobody else rows.PENDING_OF, {"requester": requester}
            ).scalar_one()
            if count >= self.pending_per_requester:
                raise _too_many_pending(self.pending_per_requester)
            record = ApprovalRecord(
                id="apr_" + secrets.token_urlsafe(16),
                approval=ask.approval,
                tool=ask.tool,
                arguments=arguments,
                answers=dict(ask.answers),
                requester=requester,
                actors=stored_actors,
                summary=ask.summary,
                digest=stored[0],
                flow_id=flow,
                status="pending",
                created_at=changes.at,
                expires_at=changes.at + ask.approval.ttl,
                decided_at=None,
                votes=(),
                flows=(flow,),
            )
            rows.create(conn, record, arguments_json=arguments_json, answers_json=answers_json)
            changes.note("approval.requested", record, principal=requester)
            changes.event(REQUESTED, record)
            return record

        return await self._change(write, doing="make an approval request")

    async def withdraw(self, requester: str | None, approval_id: str) -> ApprovalRecord | None:
        """The requester withdraws a pending request; `None` for an id that is not theirs (as for an unknown one). A
        request that is no longer pending is returned as it is."""
        requester = self._spelled(requester)
        return await self._withdraw(approval_id, requester, by=requester, reason="withdrawn by the requester")

    async def withdraw_awaited(self, approval_id: str, *, by: str | None) -> ApprovalRecord | None:
        """An operator withdraws a pending request a cancelled task waited on (`askback tasks cancel`), whoever its
        requester: the task's record names the request, which is all the authority needed; `by` (the task's
        principal) is recorded. `None` for an unknown id; a request no longer pending is returned as it is."""
        return await self._withdraw(
            approval_id, None, by=by, reason="withdrawn: the task waiting on it was cancelled", anyones=True
        )

    async def _withdraw(
        self, approval_id: str, requester: str | None, *, by: str | None, reason: str, anyones: bool = False
    ) -> ApprovalRecord | None:
        """Withdraw `approval_id`, when `requester` made it (or whoever did, with `anyones`)."""

        def write(conn: Any, changes: Changes) -> ApprovalRecord | None:
            row = conn.execute(rows.BY_ID_LOCKED, {"id": approval_id}).first()
            if row is None or (not anyones and row.requester != requester):
                return None
            record = self._fresh(conn, row, changes)
            if record.status != "pending":
                return record
            rows.set_status(conn, record, "withdrawn", at=changes.at, reason=reason)
            record = replace(record, status="withdrawn", decided_at=changes.at, reason=reason)
            changes.note("approval.withdrawn", record, principal=by, reason=reason)
            changes.event(WITHDRAWN, record)
            return record

        return await self._change(write, doing="withdraw an approval request")

    # -- for the hosted pages and operators --

    async def of_requester(self, requester: str | None, approval_id: str) -> ApprovalRecord | None:
        """The request as its requester may see it; `None` for another principal's id, as for an unknown one."""
        requester = self._spelled(requester)
        record = await self.get(approval_id)
        return record if record is not None and record.requester == requester else None

    async def get(self, approval_id: str, *, expire: bool = True) -> ApprovalRecord | None:
        """Any request, expired on read when its time has passed (operators and approvers' pages). `expire=False`
        reads it as stored, writing nothing (a pending request may then be past its time: `askback approvals`)."""
        found = await self._read(rows.BY_ID, {"id": approval_id}, expire=expire)
        return found[0] if found else None

    async def decidable_by(self, approver: Approver) -> list[ApprovalRecord]:
        """The open requests this person may decide, newest first, `repository.LISTED_MOST` at most."""
        now = self.clock.now()
        return await self._reading(
            lambda conn: rows.pending_for(
                conn,
                lambda policy: allowed(policy, approver),
                now=now,
                decidable=lambda record: refusal(record, approver, now) is None,
            )
        )

    async def decide(
        self, approver: Approver, approval_id: str, decision: Decision, reason: str, *, digest: str
    ) -> Decided:
        """Record `approver`'s decision on the request whose digest the page showed (`digest`), after checking, in
        the transaction that records it: in the policy, not the requester nor an actor of the requester's token,
        not already decided by this person, still pending and unexpired, digest unchanged. The decision that
        completes the quorum (or the first denial) decides the request, on every instance. `InvalidParamsError` for
        an unknown id, a decision that is neither `approve` nor `deny`, or a reason or approver that cannot be
        stored."""
        self._checked_decision(approver, decision, reason)

        def write(conn: Any, changes: Changes) -> Decided:
            row = conn.execute(rows.BY_ID_LOCKED, {"id": approval_id}).first()
            if row is None:
                raise _unknown(approval_id)
            record = self._fresh(conn, row, changes)
            why = refusal(record, approver, changes.at)
            if why is None and record.digest != digest:
                why = "digest_changed"
            if why is not None:
                return Decided(record, counted=False, refusal=why)
            vote = Vote(approver.principal, decision, reason, changes.at, approver.method)
            rows.add_vote(conn, record.id, vote)
            record = replace(record, votes=(*record.votes, vote))
            decided = outcome(record.approval, record.votes)
            if decided is not None:
                ended_why = reason if decided == "denied" and reason else None
                rows.set_status(conn, record, decided, at=changes.at, reason=ended_why)
                record = replace(record, status=decided, decided_at=changes.at, reason=ended_why)
            kind: EventKind = "approval.approved" if decision == "approve" else "approval.denied"
            changes.note(
                kind,
                record,
                principal=approver.principal,
                approver=approver.principal,
                method=approver.method,
                action=decision,
                reason=reason or None,
            )
            if decided is not None:
                changes.event(DECIDED, record)
            return Decided(record, counted=True)

        return await self._change(write, doing="decide an approval request")

    async def listing(
        self, *, status: ApprovalStatus | None = None, limit: int = 100, expire: bool = True
    ) -> list[ApprovalRecord]:
        """Requests for operators (`askback approvals list`), newest first, at most `limit` (1 to 1000) of them;
        `expire=False` reads them as stored, writing nothing."""
        if status is not None and status not in rows.BY_STATUS:
            raise InvalidParamsError(f"an approval request's status is one of {', '.join(rows.BY_STATUS)}")
        statement = rows.NEWEST if status is None else rows.BY_STATUS[status]
        found = await self._read(statement, {"limit": max(1, min(limit, 1000))}, expire=expire)
        return [record for record in found if status is None or record.status == status]

    # -- internals --

    def _checked_ask(self, requester: str | None, actors: Sequence[str], ask: ApprovalAsk) -> tuple[str, ...]:
        """The actors to store, after refusing what a request cannot hold."""
        if requester is not None and name_problem(requester, what="the requester", limit=MAX_PRINCIPAL):
            raise InvalidParamsError("the requester's principal cannot be stored with an approval request")
        named = tuple(dict.fromkeys((*actors, *ask.actors)))
        if len(named) > _MAX_ACTORS or any(name_problem(a, what="an actor", limit=MAX_PRINCIPAL) for a in named):
            raise InvalidParamsError("the token's actors cannot be stored with an approval request")
        problem = name_problem(ask.tool, what="the tool's name", limit=255)
        if problem is None and not 0 < len(ask.flow_id) <= 128:
            problem = "the flow's id is empty or longer than 128 characters"
        if problem is not None:
            raise InvalidParamsError(f"an approval request cannot be made: {problem}")
        if ask.summary is not None:
            problem = _text_problem(ask.summary, what="the summary", limit=MAX_SUMMARY)
            if problem is not None:
                raise ToolError(f"This call cannot be put to its approvers: {problem}. Shorten or clean the summary.")
        expected = approval_digest(
            tool=ask.tool,
            arguments=ask.arguments,
            answers=ask.answers,
            requester=requester,
            policy=ask.approval.policy(),
        )
        if not _DIGEST.match(ask.digest) or ask.digest != expected:
            raise InvalidParamsError(
                "an approval request's digest is not the digest of its call (tool, arguments, answers, requester "
                "and policy): nothing was asked"
            )
        return named

    @staticmethod
    def _checked_decision(approver: Approver, decision: str, reason: str) -> None:
        problem = name_problem(approver.principal, what="the approver", limit=MAX_PRINCIPAL) or name_problem(
            approver.method, what="the sign-in method", limit=255
        )
        if problem is None and decision not in ("approve", "deny"):
            problem = f"a decision is 'approve' or 'deny', not {decision[:16]!r}"
        if problem is None:
            problem = _text_problem(reason, what="the reason", limit=_MAX_REASON)
        if problem is not None:
            raise InvalidParamsError(f"This decision cannot be recorded: {problem}.")

    def _fresh(self, conn: Any, row: Any, changes: Changes) -> ApprovalRecord:
        """The record `row` holds, expired now (its audit row and event written) when it was pending, or approved
        and not yet consumed, past its time. The caller holds the row's lock."""
        record = rows.record_of(row, rows.votes_of(conn, row.id))
        if record.status not in _ENDS_AT_ITS_TIME or changes.at < record.expires_at:
            return record
        rows.set_status(conn, record, "expired", at=changes.at)
        record = replace(record, status="expired", decided_at=changes.at)
        changes.note("approval.expired", record, principal=record.requester)
        changes.event(EXPIRED, record)
        return record

    def _followed(
        self, conn: Any, records: list[ApprovalRecord], requester: str | None, ask: ApprovalAsk, changes: Changes
    ) -> ApprovalRecord | None:
        """The request the flow's status link showed (`ask.following`, from the sealed state) when it is this
        requester's and for this call; `None` otherwise (another's, unknown, another call: ignored)."""
        if ask.following is None:
            return None
        found = next((r for r in records if r.id == ask.following), None)
        if found is not None:
            return found
        row = conn.execute(rows.BY_ID_LOCKED, {"id": ask.following}).first()
        if row is None or row.requester != requester or row.digest not in self._stored(ask.digest):
            return None
        return self._fresh(conn, row, changes)

    def _attach(self, conn: Any, record: ApprovalRecord, flow: str, actors: Sequence[str] = ()) -> ApprovalRecord:
        """`record` with `flow` among the flows waiting on it, and, while it is still to be decided, the actors of
        this call's token among those who may not decide it (every call that waits on a request adds its own)."""
        if record.status == "pending":
            merged = tuple(dict.fromkeys((*record.actors, *actors)))
            if merged != record.actors:
                rows.set_actors(conn, record.id, merged)
                record = replace(record, actors=merged)
        if flow in record.flows:
            return record
        # The flow that made it is `flow_id`; of the others, the newest are kept.
        flows = (*record.flows, flow)[-_MAX_FLOWS:]
        rows.set_flows(conn, record.id, flows)
        return replace(record, flows=flows)

    def _consume(self, conn: Any, record: ApprovalRecord, flow: str, changes: Changes) -> ApprovalRecord:
        rows.set_status(conn, record, "consumed", at=changes.at, consumed_by=flow)
        record = replace(record, status="consumed", consumed_by_flow=flow)
        changes.note("approval.consumed", record, principal=record.requester, flow_id=flow)
        changes.event(CONSUMED, record)
        return record

    async def _read(self, statement: Any, params: Mapping[str, Any], *, expire: bool = True) -> list[ApprovalRecord]:
        """The records `statement` selects (`_reading`)."""
        return await self._reading(
            lambda conn: [rows.record_of(r, rows.votes_of(conn, r.id)) for r in conn.execute(statement, params).all()],
            expire=expire,
        )

    async def _reading(
        self, read: Callable[[Any], list[ApprovalRecord]], *, expire: bool = True
    ) -> list[ApprovalRecord]:
        """The records `read` reads in one transaction; those pending past their time are expired (unless `expire`
        is False), each under its lock."""
        now = self.clock.now()
        found = await self.database.transaction(read, doing="read approval requests")
        due = {r.id for r in found if r.status in _ENDS_AT_ITS_TIME and now >= r.expires_at}
        if not due or not expire:
            return found

        def expiring(conn: Any, changes: Changes) -> dict[str, ApprovalRecord]:
            fresh: dict[str, ApprovalRecord] = {}
            for approval_id in sorted(due):
                row = conn.execute(rows.BY_ID_LOCKED, {"id": approval_id}).first()
                if row is not None:
                    fresh[approval_id] = self._fresh(conn, row, changes)
            return fresh

        fresh = await self._change(expiring, doing="expire approval requests")
        return [fresh.get(r.id, r) for r in found]

    async def _change(self, fn: Callable[[Any, Changes], _T], *, doing: str) -> _T:
        """Run `fn` in one transaction that holds the write lock from BEGIN, then write what it noted: its audit
        rows onto the chain and, last (the event log commits in id order), its events."""
        chain = self.audit_log.chain
        at = self.clock.now()

        def run(conn: Any) -> tuple[_T, Changes, tuple[int, str] | None]:
            changes = Changes(at)
            result = fn(conn, changes)
            head = None
            if changes.audit:
                head = self.audit_log.append_rows(conn, audit_query.to_rows(changes.audit), chain)
            for kind, data in changes.events:
                append_event(conn, type=kind, at=at, data=data)
            return result, changes, head

        result, changes, head = await self.database.transaction(run, doing=doing, immediate=True)
        if head is not None:
            self.audit_log.appended(chain, [head])
        emit_all(changes.audit)
        return result


def _serves(record: ApprovalRecord, actors: Sequence[str]) -> bool:
    """Whether `record` may stand for a call whose token names `actors`: none of them approved it, and, while it is
    pending, they can all be kept with it (so that none of them can decide it)."""
    if any(vote.approver in actors for vote in record.votes if vote.decision == "approve"):
        return False
    return record.status != "pending" or len(set(record.actors).union(actors)) <= _MAX_ACTORS


def _unknown(approval_id: str) -> InvalidParamsError:
    return InvalidParamsError(f"there is no approval request {approval_id[:64]!r}")


def _too_many_pending(most: int) -> LimitReachedError:
    return LimitReachedError(
        f"Too many approval requests waiting: you already hold {most} that nobody has decided yet, the most one "
        "person may hold. Wait for them to be decided, or withdraw the ones you no longer need (decline or cancel "
        "the call that asked), then try again.",
        limit=most,
        tool_error=True,
    )
